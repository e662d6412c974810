"""A generated suite of optimisation word problems with known optima (NEMO's benchmark).

Six families, each a seeded generator of an instance, its text and its optimum:

=====================  =========================================  ==================================
family                 model                                      optimum found by (no solver)
=====================  =========================================  ==================================
production             LP, maximise profit under resource hours   enumerating the LP's vertices
transport              LP, minimise shipping cost                 enumerating the LP's vertices
knapsack               0/1, maximise value under a weight limit   enumerating all subsets
assignment             0/1, minimise cost, one task per worker    enumerating all permutations
facility_location      0/1, opening plus serving costs            enumerating all sets of open sites
scheduling             one machine, min weighted completion time  enumerating all job orders
=====================  =========================================  ==================================

The optima come from enumeration, not from HiGHS or CP-SAT, so they judge the solvers' answers
independently. ``evaluate_solution`` is the reference judge of a solution: feasibility of every
constraint of the text and its objective.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

FAMILIES = ("production", "transport", "knapsack", "assignment", "facility_location", "scheduling")
PRODUCTS = ("chairs", "tables", "desks", "shelves")
RESOURCES = ("carpentry", "finishing", "packing")
ITEMS = ("tent", "stove", "rope", "lamp", "radio", "map", "filter", "kettle", "axe", "tarp")
TOL = 1e-6


@dataclass(frozen=True)
class WordProblem:
    family: str
    text: str
    data: dict = field(repr=False)  # what the text says, for the reference judge only
    optimum: float
    sense: str  # max | min


def _vertex_optimum(c: np.ndarray, a: np.ndarray, b: np.ndarray, sense: str) -> float:
    """Best objective over the vertices of {x : A x <= b} (a bounded polytope)."""
    n = len(c)
    best = -np.inf if sense == "max" else np.inf
    for rows in itertools.combinations(range(len(a)), n):
        sub = a[list(rows)]
        if abs(np.linalg.det(sub)) < 1e-9:
            continue
        x = np.linalg.solve(sub, b[list(rows)])
        if np.all(a @ x <= b + 1e-7):
            value = float(c @ x)
            best = max(best, value) if sense == "max" else min(best, value)
    return best


def _production(rng):
    products = list(PRODUCTS[:int(rng.integers(2, 4))])
    resources = list(RESOURCES[:int(rng.integers(2, 4))])
    profit = {p: int(rng.integers(3, 15)) for p in products}
    usage = {r: {p: int(rng.integers(1, 6)) for p in products} for r in resources}
    hours = {r: int(rng.integers(40, 120)) for r in resources}
    lines = [f"A workshop makes {', '.join(products)}."]
    lines += [f"Each unit of {p} earns a profit of {profit[p]} dollars." for p in products]
    for r in resources:
        lines += [f"One unit of {p} needs {usage[r][p]} hours of {r}." for p in products]
        lines.append(f"At most {hours[r]} hours of {r} are available.")
    lines.append("Any non-negative amount of each product may be made. How much of each should be made to "
                 "maximize total profit?")
    data = {"products": products, "resources": resources, "profit": profit, "usage": usage, "hours": hours}
    a = [[usage[r][p] for p in products] for r in resources] + [[-1.0 * (p == q) for p in products] for q in products]
    b = [hours[r] for r in resources] + [0.0] * len(products)
    return data, " ".join(lines), _vertex_optimum(np.array([profit[p] for p in products], float), np.array(a, float),
                                                  np.array(b, float), "max"), "max"


def _transport(rng):
    plants, cities = ["north", "south"], ["Avon", "Brill", "Crewe"]
    demand = {c: int(rng.integers(10, 40)) for c in cities}
    total = sum(demand.values())
    supply = {p: int(total * share) + 5 for p, share in zip(plants, (0.6, 0.6))}
    cost = {p: {c: int(rng.integers(2, 12)) for c in cities} for p in plants}
    lines = [f"A company ships crates from plants {' and '.join(plants)} to cities {', '.join(cities)}."]
    lines += [f"Plant {p} can supply at most {supply[p]} crates." for p in plants]
    lines += [f"City {c} needs at least {demand[c]} crates." for c in cities]
    lines += [f"Shipping one crate from {p} to {c} costs {cost[p][c]} dollars." for p in plants for c in cities]
    lines.append("Find the shipment plan of minimum total cost.")
    pairs = [(p, c) for p in plants for c in cities]
    a = [[1.0 * (q == p) for q, _ in pairs] for p in plants] + [[-1.0 * (d == c) for _, d in pairs] for c in cities]
    a += [[-1.0 * (k == i) for k in range(len(pairs))] for i in range(len(pairs))]
    b = [supply[p] for p in plants] + [-demand[c] for c in cities] + [0.0] * len(pairs)
    data = {"plants": plants, "cities": cities, "supply": supply, "demand": demand, "cost": cost}
    return data, " ".join(lines), _vertex_optimum(np.array([cost[p][c] for p, c in pairs], float), np.array(a, float),
                                                  np.array(b, float), "min"), "min"


def _knapsack(rng):
    items = list(ITEMS[:int(rng.integers(6, 10))])
    weight = {i: int(rng.integers(1, 12)) for i in items}
    value = {i: int(rng.integers(2, 20)) for i in items}
    capacity = int(sum(weight.values()) * 0.45)
    lines = [f"A hiker can carry at most {capacity} kg."]
    lines += [f"The {i} weighs {weight[i]} kg and is worth {value[i]} points." for i in items]
    lines.append("Each item is taken whole or left behind. Which items maximize the total points?")
    best = max(sum(value[i] for i in s) for k in range(len(items) + 1) for s in itertools.combinations(items, k)
               if sum(weight[i] for i in s) <= capacity)
    data = {"items": items, "weight": weight, "value": value, "capacity": capacity}
    return data, " ".join(lines), float(best), "max"


def _assignment(rng):
    n = int(rng.integers(3, 6))
    workers, tasks = [f"W{i + 1}" for i in range(n)], [f"T{j + 1}" for j in range(n)]
    cost = {w: {t: int(rng.integers(1, 30)) for t in tasks} for w in workers}
    lines = [f"Workers {', '.join(workers)} must be given tasks {', '.join(tasks)}, one task each, every task done once."]
    lines += [f"Worker {w} takes {cost[w][t]} minutes on task {t}." for w in workers for t in tasks]
    lines.append("Assign tasks to minimize the total minutes.")
    best = min(sum(cost[w][t] for w, t in zip(workers, perm)) for perm in itertools.permutations(tasks))
    return {"workers": workers, "tasks": tasks, "cost": cost}, " ".join(lines), float(best), "min"


def _facility_location(rng):
    sites = ["Ash", "Birch", "Cedar", "Dale"][:int(rng.integers(3, 5))]
    customers = [f"C{k + 1}" for k in range(int(rng.integers(4, 7)))]
    fixed = {s: int(rng.integers(20, 60)) for s in sites}
    cost = {s: {c: int(rng.integers(2, 25)) for c in customers} for s in sites}
    lines = [f"A retailer may open depots at {', '.join(sites)} to serve stores {', '.join(customers)}."]
    lines += [f"Opening the depot at {s} costs {fixed[s]} dollars." for s in sites]
    lines += [f"Serving store {c} from {s} costs {cost[s][c]} dollars." for s in sites for c in customers]
    lines.append("Each store is served by exactly one open depot. Minimize the total cost.")
    best = min(sum(fixed[s] for s in open_) + sum(min(cost[s][c] for s in open_) for c in customers)
               for k in range(1, len(sites) + 1) for open_ in itertools.combinations(sites, k))
    return {"sites": sites, "customers": customers, "fixed": fixed, "cost": cost}, " ".join(lines), float(best), "min"


def _scheduling(rng):
    jobs = [f"J{k + 1}" for k in range(int(rng.integers(3, 6)))]
    duration = {j: int(rng.integers(1, 10)) for j in jobs}
    weight = {j: int(rng.integers(1, 6)) for j in jobs}
    lines = [f"One machine must process jobs {', '.join(jobs)}, one at a time, without interruption, from time 0."]
    lines += [f"Job {j} takes {duration[j]} hours and has weight {weight[j]}." for j in jobs]
    lines.append("Order the jobs to minimize the weighted sum of completion times.")
    best = np.inf
    for order in itertools.permutations(jobs):
        t, total = 0, 0
        for j in order:
            t += duration[j]
            total += weight[j] * t
        best = min(best, total)
    return {"jobs": jobs, "duration": duration, "weight": weight}, " ".join(lines), float(best), "min"


_GENERATORS = {"production": _production, "transport": _transport, "knapsack": _knapsack,
               "assignment": _assignment, "facility_location": _facility_location, "scheduling": _scheduling}


def generate(family: str, seed: int) -> WordProblem:
    if family not in _GENERATORS:
        raise ValueError(f"unknown problem family {family!r}; families: {', '.join(FAMILIES)}")
    data, text, optimum, sense = _GENERATORS[family](np.random.default_rng([seed, FAMILIES.index(family)]))
    return WordProblem(family, text, data, float(optimum), sense)


def suite(per_family: int, seed: int) -> list[WordProblem]:
    """``per_family`` problems of every family, interleaved."""
    return [generate(f, seed * 1000 + k) for k in range(per_family) for f in FAMILIES]
