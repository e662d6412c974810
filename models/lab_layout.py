"""LabBuilder's second stage: a protocol -> a laboratory layout, by constraint-aware optimisation.

Floor items (benches, floor-standing equipment, one storage cabinet per reagent hazard class) are
placed in the room; bench-top equipment goes on the benches. Geometry is shapely's. A layout is
scored by:

* **collisions**: items whose footprints overlap, and bench-top items that overflow their bench;
* **out of bounds**: floor items not wholly inside the room;
* **safety**: separations between hazard classes (``SEPARATIONS``: flammables 1.5 m from heat
  sources and from oxidisers, acids 1.0 m from bases), each broken pair counted with its weight;
* **reachability**: a robot of the protocol's footprint drives from the door over an occupancy
  grid (obstacles grown by its radius) and must reach, by A* (networkx), the access point in front
  of every item a step uses, the cabinets of its reagents included.

Three placements: ``random``; ``greedy`` (largest first along the walls, no safety); and
``optimised`` (the greedy layout improved by simulated annealing on a cost of overlap area,
out-of-room area, separation shortfall, blocked access zones and travel between consecutive steps,
then a repair pass that pushes items apart and back inside the room).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import networkx as nx
import numpy as np
import shapely
from shapely import affinity
from shapely.geometry import Point, box

from .lab_protocol import STORAGE, Protocol, asset_table, reagent_table

SEPARATIONS = ((("flammable", "heat_source"), 1.5, 3.0), (("flammable", "oxidiser"), 1.5, 2.0),
               (("acid", "base"), 1.0, 1.0))  # (classes, metres, weight)
GRID = 0.1  # metres per occupancy cell
GAP = 0.1  # between neighbours on a wall or a bench
METHODS = ("random", "greedy", "optimised")
_FRONT = ((0.0, -1.0), (1.0, 0.0), (0.0, 1.0), (-1.0, 0.0))  # facing direction per quarter turn


@dataclass
class Layout:
    protocol: Protocol
    floor: dict[str, list]  # item id -> [asset, x, y, quarter turns]
    bench_of: dict[str, str] = field(default_factory=dict)  # bench-top item id -> bench id

    def copy(self) -> Layout:
        return Layout(self.protocol, {k: list(v) for k, v in self.floor.items()}, dict(self.bench_of))


def _footprint(asset: str, x: float, y: float, turns: int):
    a = asset_table()[asset]
    return affinity.translate(affinity.rotate(box(-a.width / 2, -a.depth / 2, a.width / 2, a.depth / 2),
                                              90 * turns, origin=(0, 0)), x, y)


def _along(turns: int, u: float, v: float) -> tuple[float, float]:
    """Local (u along the width, v towards the back) to room axes for an item turned ``turns`` quarters."""
    fx, fy = _FRONT[turns % 4]
    return (-fy * u - fx * v, fx * u - fy * v)


def items_of(protocol: Protocol) -> tuple[list[str], list[str]]:
    """(floor item ids, bench-top item ids); ids are asset names, benches ``lab_bench#k``."""
    assets = asset_table()
    top = [e for e in protocol.equipment if assets[e].kind == "benchtop"]
    length = assets["lab_bench"].width
    need = sum(assets[e].width + GAP for e in top)
    benches = [f"lab_bench#{k + 1}" for k in range(math.ceil(need / (length - GAP)))] if top else []
    floor = benches + [e for e in protocol.equipment if assets[e].kind == "floor"] + protocol.cabinets()
    return floor, top


def asset_of(item: str) -> str:
    return item.split("#")[0]


def check_fits(protocol: Protocol) -> None:
    """``ValueError`` when the floor items need more than half the room (the rest is for moving)."""
    floor, _ = items_of(protocol)
    assets = asset_table()
    areas = {i: assets[asset_of(i)].width * assets[asset_of(i)].depth for i in floor}
    w, d = protocol.room
    longest = max(floor, key=lambda i: assets[asset_of(i)].width)
    if sum(areas.values()) > 0.5 * w * d or assets[asset_of(longest)].width > max(w, d):
        listing = ", ".join(f"{i} {a:.2f} m2" for i, a in sorted(areas.items(), key=lambda kv: -kv[1]))
        raise ValueError(f"room {w} x {d} m ({w * d:.1f} m2) is too small for the protocol: its floor items need "
                         f"{sum(areas.values()):.1f} m2, more than half the floor, or the longest ({longest}) is wider "
                         f"than the room; items: {listing}")


# -- geometry of a layout --------------------------------------------------------------------------

def geometry(layout: Layout) -> dict:
    """Footprints, bench-top footprints, access points and hazard classes of every item."""
    assets = asset_table()
    shapes, access, hazard, overflow = {}, {}, {}, set()
    reach = layout.protocol.robot / 2 + 0.15  # the robot centre stops clear of the grown obstacle
    for item, (asset, x, y, turns) in layout.floor.items():
        shapes[item] = _footprint(asset, x, y, turns)
        dx, dy = _along(turns, 0.0, -(assets[asset].depth / 2 + reach))
        access[item] = (x + dx, y + dy)
        hazard[item] = assets[asset].hazard
    tops = {}
    for item, bench in sorted(layout.bench_of.items()):
        tops.setdefault(bench, []).append(item)
    bench_len = assets["lab_bench"].width
    for bench, items in tops.items():
        _, bx, by, turns = layout.floor[bench]
        u = -bench_len / 2 + GAP
        for item in items:
            a = assets[item]
            if u + a.width > bench_len / 2:
                overflow.add(item)
            cx, cy = _along(turns, u + a.width / 2, 0.0)
            shapes[item] = _footprint(item, bx + cx, by + cy, turns)
            dx, dy = _along(turns, u + a.width / 2, -(assets["lab_bench"].depth / 2 + reach))
            access[item] = (bx + dx, by + dy)
            hazard[item] = a.hazard
            u += a.width + GAP
    return {"shapes": shapes, "access": access, "hazard": hazard, "overflow": overflow}


def _pairs(items: list[str]) -> tuple[np.ndarray, np.ndarray]:
    i, j = np.triu_indices(len(items), 1)
    return i, j


def collisions(layout: Layout, geo: dict) -> set[str]:
    floor = list(layout.floor)
    shapes = np.array([geo["shapes"][k] for k in floor])
    i, j = _pairs(floor)
    hit = shapely.area(shapely.intersection(shapes[i], shapes[j])) > 1e-6
    return {floor[k] for k in np.concatenate([i[hit], j[hit]])} | set(geo["overflow"])


def out_of_bounds(layout: Layout, geo: dict) -> set[str]:
    room = box(0, 0, *layout.protocol.room).buffer(1e-6)
    return {k for k in layout.floor if not room.contains(geo["shapes"][k])}


def safety_violations(geo: dict) -> list[dict]:
    """Every pair of items closer than its hazard classes allow."""
    out = []
    items = sorted(geo["hazard"])
    for (a_class, b_class), metres, weight in SEPARATIONS:
        for a in (k for k in items if geo["hazard"][k] == a_class):
            for b in (k for k in items if geo["hazard"][k] == b_class):
                gap = geo["shapes"][a].distance(geo["shapes"][b])
                if gap < metres:
                    out.append({"items": [a, b], "classes": [a_class, b_class], "distance": round(gap, 3),
                                "required": metres, "weight": weight})
    return out


def occupancy(layout: Layout, geo: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(free mask [ny, nx], cell centre xs, ys): free where the robot's centre may be."""
    w, d = layout.protocol.room
    r = layout.protocol.robot / 2
    xs, ys = np.arange(GRID / 2, w, GRID), np.arange(GRID / 2, d, GRID)
    gx, gy = np.meshgrid(xs, ys)
    obstacles = shapely.union_all([geo["shapes"][k] for k in layout.floor]).buffer(r)
    inside = (gx >= r) & (gx <= w - r) & (gy >= r) & (gy <= d - r)
    return inside & ~shapely.contains_xy(obstacles, gx, gy), xs, ys


def door(layout: Layout) -> tuple[float, float]:
    return layout.protocol.room[0] / 2, layout.protocol.robot / 2 + GRID


def _cell(point, xs, ys) -> tuple[int, int]:
    return (int(np.clip(round((point[1] - GRID / 2) / GRID), 0, len(ys) - 1)),
            int(np.clip(round((point[0] - GRID / 2) / GRID), 0, len(xs) - 1)))


def cut_off(layout: Layout, geo: dict) -> int:
    """Access points not connected to the door on the occupancy grid (connected components: cheap
    enough for every annealing step; the final check is A*)."""
    from scipy import ndimage

    free, xs, ys = occupancy(layout, geo)
    labels, _ = ndimage.label(free)
    home = labels[_cell(door(layout), xs, ys)]
    return sum(home == 0 or labels[_cell(p, xs, ys)] != home for p in geo["access"].values())


def reachability(layout: Layout, geo: dict) -> dict:
    """Per step: reachable or not (every item it uses and its reagents' cabinets), and A* path lengths."""
    free, xs, ys = occupancy(layout, geo)
    graph = nx.grid_2d_graph(*free.shape)
    graph.remove_nodes_from([tuple(c) for c in np.argwhere(~free)])

    start = _cell(door(layout), xs, ys)
    lengths = {}
    for item, point in geo["access"].items():
        target = _cell(point, xs, ys)
        try:
            lengths[item] = GRID * nx.astar_path_length(graph, start, target,
                                                        heuristic=lambda a, b: math.dist(a, b))
        except (nx.NetworkXNoPath, nx.NodeNotFound):
            lengths[item] = None
    steps = []
    for step in layout.protocol.steps:
        needs = list(step.equipment) + sorted({STORAGE[reagent_table()[r]] for r in step.reagents})
        steps.append({"step": step.number, "needs": needs, "reachable": all(lengths.get(n) is not None for n in needs)})
    return {"steps": steps, "path_lengths": lengths}


def metrics(layout: Layout) -> dict:
    geo = geometry(layout)
    n_items = len(layout.floor) + len(layout.bench_of)
    reach = reachability(layout, geo)
    safety = safety_violations(geo)
    colliding, outside = collisions(layout, geo), out_of_bounds(layout, geo)
    return {"collision_rate": len(colliding) / n_items, "out_of_bounds_rate": len(outside) / len(layout.floor),
            "weighted_safety_violations": float(sum(v["weight"] for v in safety)),
            "reachable_step_fraction": float(np.mean([s["reachable"] for s in reach["steps"]])),
            "colliding": sorted(colliding), "out_of_bounds": sorted(outside), "safety": safety,
            "steps": reach["steps"]}


# -- placements ---------------------------------------------------------------------------------------

def _initial(protocol: Protocol) -> Layout:
    floor, top = items_of(protocol)
    benches = [i for i in floor if i.startswith("lab_bench#")]
    return Layout(protocol, {i: [asset_of(i), 0.0, 0.0, 0] for i in floor},
                  {t: benches[0] for t in top} if benches else {})


def random_layout(protocol: Protocol, rng: np.random.Generator) -> Layout:
    layout = _initial(protocol)
    w, d = protocol.room
    for item in layout.floor:
        layout.floor[item][1:] = [float(rng.uniform(0, w)), float(rng.uniform(0, d)), int(rng.integers(4))]
    benches = [i for i in layout.floor if i.startswith("lab_bench#")]
    layout.bench_of = {t: benches[int(rng.integers(len(benches)))] for t in layout.bench_of}
    return layout


def _wall_slots(protocol: Protocol):
    """Walls in order (bottom, right, top, left) as (start point, direction, quarter turns, length),
    the bottom wall split around the door."""
    w, d = protocol.room
    door_half = protocol.robot / 2 + 0.3
    return [((0.0, 0.0), (1, 0), 2, w / 2 - door_half), ((w / 2 + door_half, 0.0), (1, 0), 2, w / 2 - door_half),
            ((w, 0.0), (0, 1), 3, d), ((w, d), (-1, 0), 0, w), ((0.0, d), (0, -1), 1, d)]


def greedy_layout(protocol: Protocol) -> Layout:
    """Largest items first, back to the walls, walking round the room; bench-top items first fit."""
    layout = _initial(protocol)
    assets = asset_table()
    walls = _wall_slots(protocol)
    cursor = [GAP] * len(walls)
    order = sorted(layout.floor, key=lambda i: -assets[asset_of(i)].width * assets[asset_of(i)].depth)
    placed_corner = {}
    for item in order:
        a = assets[asset_of(item)]
        for k, ((sx, sy), (dx, dy), turns, length) in enumerate(walls):
            if cursor[k] + a.width + GAP <= length - (a.depth if k in placed_corner else 0):
                u = cursor[k] + a.width / 2
                nx_, ny_ = -_FRONT[turns][0], -_FRONT[turns][1]  # towards the wall
                x = sx + dx * u - nx_ * a.depth / 2
                y = sy + dy * u - ny_ * a.depth / 2
                layout.floor[item][1:] = [x, y, turns]
                cursor[k] += a.width + GAP
                placed_corner[(k + 1) % len(walls)] = True
                break
        else:
            layout.floor[item][1:] = [protocol.room[0] / 2, protocol.room[1] / 2, 0]
    benches = [i for i in layout.floor if i.startswith("lab_bench#")]
    used = dict.fromkeys(benches, GAP)
    for top in sorted(layout.bench_of, key=lambda t: -assets[t].width):
        fits = [b for b in benches if used[b] + assets[top].width + GAP <= assets["lab_bench"].width]
        layout.bench_of[top] = fits[0] if fits else benches[0]
        used[layout.bench_of[top]] += assets[top].width + GAP
    return layout


def cost(layout: Layout) -> float:
    """The annealing objective (lower is better)."""
    geo = geometry(layout)
    floor = list(layout.floor)
    shapes = np.array([geo["shapes"][k] for k in floor])
    i, j = _pairs(floor)
    overlap = float(shapely.area(shapely.intersection(shapes[i], shapes[j])).sum())
    room = box(0, 0, *layout.protocol.room)
    outside = float(sum(s.area for s in shapes) - shapely.area(shapely.intersection(shapes, room)).sum())
    shortfall = sum(v["weight"] * (v["required"] - v["distance"]) for v in safety_violations(geo))
    depth = layout.protocol.robot
    zones = [Point(geo["access"][k]).buffer(depth / 2) for k in geo["access"]]
    blocked = float(shapely.area(shapely.intersection(np.array(zones), shapely.union_all(shapes))).sum())
    blocked += float(sum(z.area for z in zones) - shapely.area(shapely.intersection(np.array(zones), room)).sum())
    points = [door(layout)] + [geo["access"][e] for s in layout.protocol.steps for e in s.equipment]
    travel = sum(math.dist(a, b) for a, b in zip(points, points[1:]))
    return (20 * overlap + 20 * outside + shortfall + 5 * blocked + 0.02 * travel + 5 * len(geo["overflow"])
            + 3 * cut_off(layout, geo))


def repair(layout: Layout, rounds: int = 60) -> Layout:
    """Move items back inside the room and push overlapping pairs apart along their shallower axis."""
    layout = layout.copy()
    w, d = layout.protocol.room
    for _ in range(rounds):
        geo = geometry(layout)
        moved = False
        for item in layout.floor:
            minx, miny, maxx, maxy = geo["shapes"][item].bounds
            dx = max(0.0, -minx) - max(0.0, maxx - w)
            dy = max(0.0, -miny) - max(0.0, maxy - d)
            if abs(dx) > 1e-9 or abs(dy) > 1e-9:
                layout.floor[item][1] += dx
                layout.floor[item][2] += dy
                moved = True
        geo = geometry(layout)
        floor = list(layout.floor)
        for a, b in zip(*_pairs(floor)):
            inter = geo["shapes"][floor[a]].intersection(geo["shapes"][floor[b]])
            if inter.area > 1e-6:
                minx, miny, maxx, maxy = inter.bounds
                sa, sb = geo["shapes"][floor[a]].centroid, geo["shapes"][floor[b]].centroid
                if maxx - minx < maxy - miny:
                    shift = (maxx - minx + 0.02) / 2 * (1 if sb.x >= sa.x else -1)
                    layout.floor[floor[a]][1] -= shift
                    layout.floor[floor[b]][1] += shift
                else:
                    shift = (maxy - miny + 0.02) / 2 * (1 if sb.y >= sa.y else -1)
                    layout.floor[floor[a]][2] -= shift
                    layout.floor[floor[b]][2] += shift
                moved = True
        if not moved:
            break
    return layout


def optimised_layout(protocol: Protocol, rng: np.random.Generator, iterations: int = 600) -> Layout:
    """Greedy start, simulated annealing on :func:`cost`, then :func:`repair`."""
    if iterations < 0:
        raise ValueError(f"iterations must be non-negative, got {iterations}")
    current = greedy_layout(protocol)
    current_cost = cost(current)
    best, best_cost = current, current_cost
    walls = _wall_slots(protocol)
    benches = [i for i in current.floor if i.startswith("lab_bench#")]
    floor = list(current.floor)
    for step in range(iterations):
        temperature = 2.0 * (0.005 / 2.0) ** (step / max(1, iterations - 1))
        trial = current.copy()
        move = rng.random()
        item = floor[int(rng.integers(len(floor)))]
        if move < 0.45:
            trial.floor[item][1] += float(rng.normal(0, 0.4))
            trial.floor[item][2] += float(rng.normal(0, 0.4))
        elif move < 0.7:
            (sx, sy), (dx, dy), turns, length = walls[int(rng.integers(len(walls)))]
            a = asset_table()[asset_of(item)]
            u = float(rng.uniform(a.width / 2, max(a.width / 2, length - a.width / 2)))
            back = (-_FRONT[turns][0], -_FRONT[turns][1])
            trial.floor[item][1:] = [sx + dx * u - back[0] * a.depth / 2, sy + dy * u - back[1] * a.depth / 2, turns]
        elif move < 0.85 or not trial.bench_of:
            other = floor[int(rng.integers(len(floor)))]
            trial.floor[item][1:3], trial.floor[other][1:3] = trial.floor[other][1:3], trial.floor[item][1:3]
        else:
            top = sorted(trial.bench_of)[int(rng.integers(len(trial.bench_of)))]
            trial.bench_of[top] = benches[int(rng.integers(len(benches)))]
        trial_cost = cost(trial)
        if trial_cost < current_cost or rng.random() < math.exp((current_cost - trial_cost) / temperature):
            current, current_cost = trial, trial_cost
            if current_cost < best_cost:
                best, best_cost = current, current_cost
    return repair(best)


def plan(protocol: Protocol, method: str = "optimised", seed: int = 0, iterations: int = 600) -> Layout:
    """A layout by ``method`` (random | greedy | optimised); the room is checked first."""
    if method not in METHODS:
        raise ValueError(f"unknown placement method {method!r}; methods: {', '.join(METHODS)}")
    check_fits(protocol)
    rng = np.random.default_rng(seed)
    if method == "random":
        return random_layout(protocol, rng)
    if method == "greedy":
        return greedy_layout(protocol)
    return optimised_layout(protocol, rng, iterations)


def to_json(layout: Layout) -> dict:
    geo = geometry(layout)
    items = [{"id": k, "asset": asset_of(k), "kind": asset_table()[asset_of(k)].kind, "hazard": geo["hazard"][k],
              "on_bench": layout.bench_of.get(k), "polygon": [list(map(float, p)) for p in geo["shapes"][k].exterior.coords],
              "access_point": list(map(float, geo["access"][k]))} for k in geo["shapes"]]
    storage = {r: STORAGE[reagent_table()[r]] for r in layout.protocol.reagents}
    return {"room": list(layout.protocol.room), "robot": layout.protocol.robot, "door": list(door(layout)),
            "items": items, "reagent_storage": storage, "metrics": metrics(layout)}


def plot_plan(layout: Layout, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Polygon as Patch

    colours = {"heat_source": "tab:red", "flammable": "tab:orange", "oxidiser": "gold", "acid": "tab:purple",
               "base": "tab:cyan", "none": "lightgrey"}
    geo = geometry(layout)
    free, xs, ys = occupancy(layout, geo)
    fig, ax = plt.subplots(figsize=(8, 8 * layout.protocol.room[1] / layout.protocol.room[0] + 0.5))
    ax.imshow(~free, origin="lower", extent=(0, layout.protocol.room[0], 0, layout.protocol.room[1]), cmap="Greys",
              alpha=0.15)
    for item, shape in geo["shapes"].items():
        ax.add_patch(Patch(np.asarray(shape.exterior.coords), closed=True, facecolor=colours[geo["hazard"][item]],
                           edgecolor="black", alpha=0.8 if item in layout.bench_of else 0.6))
        c = shape.centroid
        ax.text(c.x, c.y, item.replace("_", " "), fontsize=6, ha="center", va="center")
        ax.plot(*geo["access"][item], "k.", ms=3)
    ax.plot(*door(layout), "g^", ms=10, label="door")
    ax.set_xlim(0, layout.protocol.room[0])
    ax.set_ylim(0, layout.protocol.room[1])
    ax.set_aspect("equal")
    m = metrics(layout)
    ax.set_title(f"collisions {m['collision_rate']:.2f}, out of bounds {m['out_of_bounds_rate']:.2f}, safety "
                 f"{m['weighted_safety_violations']:.0f}, reachable steps {m['reachable_step_fraction']:.2f}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
