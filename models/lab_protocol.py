"""LabBuilder's first stage: a text specification -> a structured protocol (steps, equipment, reagents).

The specification is plain text in a small grammar::

    Room: 7.5 x 5 m
    Robot: 0.5 m
    Step 1: Weigh the agarose using balance with agarose.
    Step 2: Dissolve it using hot_plate, vortex_mixer with tris_buffer, ethanol.

Equipment and reagents are names from the asset table shipped with the package
(``models/data/lab_assets.csv``: size, kind, hazard class; ``lab_reagents.csv``: hazard class);
an underscore may be written as a space. A name not in the tables is refused with the list of
names it may be. (The paper has a language model read free text; here a grammar stands in.)
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

DATA = Path(__file__).parent / "data"
KINDS = ("bench", "floor", "benchtop", "cabinet")
STORAGE = {"flammable": "flammables_cabinet", "acid": "acid_cabinet", "base": "base_cabinet",
           "oxidiser": "oxidiser_cabinet", "none": "general_cabinet"}


@dataclass(frozen=True)
class Asset:
    name: str
    kind: str  # bench | floor | benchtop | cabinet
    width: float  # metres, along the wall it backs onto
    depth: float
    hazard: str  # none | heat_source | flammable | acid | base | oxidiser


@dataclass(frozen=True)
class Step:
    number: int
    text: str
    equipment: tuple[str, ...]
    reagents: tuple[str, ...]


@dataclass(frozen=True)
class Protocol:
    room: tuple[float, float]  # width (x), depth (y) in metres
    robot: float  # footprint diameter in metres
    steps: tuple[Step, ...]

    @property
    def equipment(self) -> list[str]:
        return sorted({e for s in self.steps for e in s.equipment})

    @property
    def reagents(self) -> list[str]:
        return sorted({r for s in self.steps for r in s.reagents})

    def cabinets(self) -> list[str]:
        """One storage cabinet for each hazard class of the reagents."""
        hazards = reagent_table()
        return sorted({STORAGE[hazards[r]] for r in self.reagents})


@cache
def asset_table() -> dict[str, Asset]:
    with open(DATA / "lab_assets.csv", newline="") as handle:
        return {row["name"]: Asset(row["name"], row["kind"], float(row["width_m"]), float(row["depth_m"]), row["hazard"])
                for row in csv.DictReader(handle)}


@cache
def reagent_table() -> dict[str, str]:
    with open(DATA / "lab_reagents.csv", newline="") as handle:
        return {row["name"]: row["hazard"] for row in csv.DictReader(handle)}


def _names(text: str) -> list[str]:
    return [re.sub(r"\s+", "_", n.strip().lower()) for n in text.split(",") if n.strip()]


def parse_spec(text: str) -> Protocol:
    """The protocol a specification states; ``ValueError`` naming what is missing or unknown."""
    room = re.search(r"^\s*Room:\s*([\d.]+)\s*x\s*([\d.]+)\s*m", text, re.MULTILINE | re.IGNORECASE)
    if not room:
        raise ValueError("the specification needs a line 'Room: W x D m' (e.g. 'Room: 7 x 5 m')")
    robot = re.search(r"^\s*Robot:\s*([\d.]+)\s*m", text, re.MULTILINE | re.IGNORECASE)
    equipment_names = [a.name for a in asset_table().values() if a.kind in ("floor", "benchtop")]
    steps, unknown = [], []
    for number, body in re.findall(r"^\s*Step\s+(\d+):\s*(.+?)\s*$", text, re.MULTILINE | re.IGNORECASE):
        using = re.search(r"\busing\s+(.+?)(?:\s+with\s+(.+?))?\.?$", body)
        if not using:
            raise ValueError(f"step {number} names no equipment; write '... using NAME[, NAME] [with REAGENT, ...].'")
        equipment, reagents = _names(using.group(1)), _names(using.group(2) or "")
        unknown += [f"equipment {e!r} (step {number})" for e in equipment if e not in equipment_names]
        unknown += [f"reagent {r!r} (step {number})" for r in reagents if r not in reagent_table()]
        steps.append(Step(int(number), body, tuple(equipment), tuple(reagents)))
    if unknown:
        raise ValueError(f"unknown {'; '.join(unknown)}. Known equipment: {', '.join(sorted(equipment_names))}. "
                         f"Known reagents: {', '.join(sorted(reagent_table()))}")
    if not steps:
        raise ValueError("the specification has no steps; write lines 'Step 1: ... using NAME.'")
    width, depth = float(room.group(1)), float(room.group(2))
    if width <= 0 or depth <= 0:
        raise ValueError(f"room dimensions must be positive, got {width} x {depth} m")
    return Protocol((width, depth), float(robot.group(1)) if robot else 0.5, tuple(steps))


def generate_spec(seed: int, n_steps: tuple[int, int] = (4, 8)) -> str:
    """A random but plausible specification: room size, robot, steps with equipment and reagents."""
    rng = np.random.default_rng(seed)
    assets = asset_table()
    floor = [a for a in assets if assets[a].kind == "floor"]
    bench = [a for a in assets if assets[a].kind == "benchtop"]
    reagents = list(reagent_table())
    verbs = ("Prepare", "Mix", "Heat", "Measure", "Incubate", "Spin", "Inspect", "Dilute", "Wash", "Store")
    lines = [f"Room: {rng.uniform(6.5, 9.5):.1f} x {rng.uniform(5.0, 7.0):.1f} m", "Robot: 0.5 m"]
    for k in range(1, int(rng.integers(n_steps[0], n_steps[1] + 1)) + 1):
        pool = floor if rng.random() < 0.35 else bench
        equipment = rng.choice(pool, size=int(rng.integers(1, 3)), replace=False)
        used = rng.choice(reagents, size=int(rng.integers(0, 3)), replace=False)
        tail = f" with {', '.join(used)}" if len(used) else ""
        lines.append(f"Step {k}: {verbs[int(rng.integers(len(verbs)))]} the samples using {', '.join(equipment)}{tail}.")
    return "\n".join(lines) + "\n"


def read_with_server(client, text: str) -> Protocol:
    """A free-text description read by a user's model server (``client.complete(prompt) -> str``, e.g.
    a :class:`.llm_client.ChatClient`) into the grammar above, then parsed (unknown names refused)."""
    equipment = sorted(a.name for a in asset_table().values() if a.kind in ("floor", "benchtop"))
    prompt = ("Rewrite this laboratory description in exactly this form, one line each:\n"
              "Room: W x D m\nRobot: DIAMETER m\nStep N: WHAT using EQUIPMENT[, EQUIPMENT] [with REAGENT[, REAGENT]].\n"
              f"Use only these equipment names: {', '.join(equipment)}.\n"
              f"Use only these reagent names: {', '.join(sorted(reagent_table()))}.\n"
              f"Reply with the lines only.\n\n{text}")
    return parse_spec(client.complete(prompt))
