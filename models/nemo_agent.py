"""NEMO's offline modelling agent: word problem -> optimisation model -> solver program, with slips.

It stands in for the language model of the paper (not available offline) and makes the mistakes
such a model makes. It reads the text (``parse``), formulates a model (``formulate``: variables,
labelled linear constraints, objective), may slip (``inject``: a dropped constraint, an
inequality the wrong way round, a wrong coefficient, the wrong objective sense, a program cut
short), and writes the model as a HiGHS (``highspy``) or OR-Tools CP-SAT program (``render``).
Given the feedback of a failed validation it repairs (``repair``) only what the feedback
names: the constraints a simulator found broken, the objective when the values disagree, every
constraint when the solver finds no solution, the program when it would not run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

import numpy as np

SLIPS = ("drop_constraint", "sign_slip", "coefficient_slip", "wrong_sense", "truncated_program")
SLIP_WEIGHTS = (0.25, 0.2, 0.3, 0.15, 0.1)
_FLIP = {"<=": ">=", ">=": "<=", "==": "<="}


@dataclass(frozen=True)
class Row:
    label: str  # kind:item, as the simulators name constraints
    coeffs: dict
    sense: str  # <= | >= | ==
    rhs: float


@dataclass(frozen=True)
class ModelSpec:
    family: str
    variables: dict  # name -> (kind: cont | int | bin, lower, upper)
    rows: tuple[Row, ...]
    objective: dict
    sense: str  # max | min
    solver: str  # highs | cpsat
    truncated: bool = False
    slips: tuple[str, ...] = field(default=())


# -- reading the text --------------------------------------------------------------------------

def _names(text: str) -> list[str]:
    return [t.strip() for t in re.split(r",| and ", text) if t.strip()]


def _find(pattern: str, text: str) -> list[tuple]:
    return [tuple(int(g) if g.isdigit() else g for g in m) for m in re.findall(pattern, text)]


def family_of(text: str) -> str:
    keys = (("workshop makes", "production"), ("ships crates", "transport"), ("hiker can carry", "knapsack"),
            ("must be given tasks", "assignment"), ("open depots", "facility_location"),
            ("One machine must process", "scheduling"))
    for key, family in keys:
        if key in text:
            return family
    raise ValueError("cannot tell which kind of optimisation problem the text states; known kinds: "
                     "production, transport, knapsack, assignment, facility_location, scheduling")


def parse(text: str) -> tuple[str, dict]:
    """(family, data) read from the text."""
    family = family_of(text)
    if family == "production":
        products = _names(re.search(r"workshop makes (.+?)\.", text).group(1))
        usage = {}
        for p, u, r in _find(r"One unit of (\w+) needs (\d+) hours of (\w+)", text):
            usage.setdefault(r, {})[p] = u
        data = {"products": products, "resources": list(usage),
                "profit": dict(_find(r"Each unit of (\w+) earns a profit of (\d+) dollars", text)),
                "usage": usage, "hours": {r: h for h, r in _find(r"At most (\d+) hours of (\w+) are available", text)}}
    elif family == "transport":
        m = re.search(r"from plants (.+?) to cities (.+?)\.", text)
        plants, cities = _names(m.group(1)), _names(m.group(2))
        cost = {p: {} for p in plants}
        for p, c, v in _find(r"from (\w+) to (\w+) costs (\d+) dollars", text):
            cost[p][c] = v
        data = {"plants": plants, "cities": cities, "cost": cost,
                "supply": dict(_find(r"Plant (\w+) can supply at most (\d+) crates", text)),
                "demand": dict(_find(r"City (\w+) needs at least (\d+) crates", text))}
    elif family == "knapsack":
        found = _find(r"The (\w+) weighs (\d+) kg and is worth (\d+) points", text)
        data = {"items": [i for i, _, _ in found], "weight": {i: w for i, w, _ in found},
                "value": {i: v for i, _, v in found},
                "capacity": int(re.search(r"carry at most (\d+) kg", text).group(1))}
    elif family == "assignment":
        m = re.search(r"Workers (.+?) must be given tasks (.+?), one task each", text)
        workers, tasks = _names(m.group(1)), _names(m.group(2))
        cost = {w: {} for w in workers}
        for w, v, t in _find(r"Worker (\w+) takes (\d+) minutes on task (\w+)", text):
            cost[w][t] = v
        data = {"workers": workers, "tasks": tasks, "cost": cost}
    elif family == "facility_location":
        m = re.search(r"open depots at (.+?) to serve stores (.+?)\.", text)
        sites, customers = _names(m.group(1)), _names(m.group(2))
        cost = {s: {} for s in sites}
        for c, s, v in _find(r"Serving store (\w+) from (\w+) costs (\d+) dollars", text):
            cost[s][c] = v
        data = {"sites": sites, "customers": customers, "cost": cost,
                "fixed": dict(_find(r"Opening the depot at (\w+) costs (\d+) dollars", text))}
    else:
        found = _find(r"Job (\w+) takes (\d+) hours and has weight (\d+)", text)
        data = {"jobs": [j for j, _, _ in found], "duration": {j: d for j, d, _ in found},
                "weight": {j: w for j, _, w in found}}
    return family, data


# -- the model ----------------------------------------------------------------------------------

def formulate(family: str, data: dict) -> ModelSpec:
    """The correct model of a parsed problem."""
    if family == "production":
        ps = data["products"]
        rows = [Row("hours:" + r, {"make_" + p: data["usage"][r][p] for p in ps}, "<=", data["hours"][r])
                for r in data["resources"]]
        return ModelSpec(family, {"make_" + p: ("cont", 0, None) for p in ps}, tuple(rows),
                         {"make_" + p: data["profit"][p] for p in ps}, "max", "highs")
    if family == "transport":
        pl, ci = data["plants"], data["cities"]
        rows = [Row("supply:" + p, {f"ship_{p}_{c}": 1 for c in ci}, "<=", data["supply"][p]) for p in pl]
        rows += [Row("demand:" + c, {f"ship_{p}_{c}": 1 for p in pl}, ">=", data["demand"][c]) for c in ci]
        return ModelSpec(family, {f"ship_{p}_{c}": ("cont", 0, None) for p in pl for c in ci}, tuple(rows),
                         {f"ship_{p}_{c}": data["cost"][p][c] for p in pl for c in ci}, "min", "highs")
    if family == "knapsack":
        items = data["items"]
        rows = (Row("capacity", {"take_" + i: data["weight"][i] for i in items}, "<=", data["capacity"]),)
        return ModelSpec(family, {"take_" + i: ("bin", 0, 1) for i in items}, rows,
                         {"take_" + i: data["value"][i] for i in items}, "max", "cpsat")
    if family == "assignment":
        ws, ts = data["workers"], data["tasks"]
        rows = [Row("worker:" + w, {f"assign_{w}_{t}": 1 for t in ts}, "==", 1) for w in ws]
        rows += [Row("task:" + t, {f"assign_{w}_{t}": 1 for w in ws}, "==", 1) for t in ts]
        return ModelSpec(family, {f"assign_{w}_{t}": ("bin", 0, 1) for w in ws for t in ts}, tuple(rows),
                         {f"assign_{w}_{t}": data["cost"][w][t] for w in ws for t in ts}, "min", "cpsat")
    if family == "facility_location":
        ss, cs = data["sites"], data["customers"]
        rows = [Row("serve:" + c, {f"serve_{s}_{c}": 1 for s in ss}, "==", 1) for c in cs]
        rows += [Row(f"link:{s}_{c}", {f"serve_{s}_{c}": 1, "open_" + s: -1}, "<=", 0) for s in ss for c in cs]
        variables = {"open_" + s: ("bin", 0, 1) for s in ss} | {f"serve_{s}_{c}": ("bin", 0, 1) for s in ss for c in cs}
        objective = {"open_" + s: data["fixed"][s] for s in ss} | {f"serve_{s}_{c}": data["cost"][s][c]
                                                                     for s in ss for c in cs}
        return ModelSpec(family, variables, tuple(rows), objective, "min", "highs")
    if family == "scheduling":
        jobs, d = data["jobs"], data["duration"]
        horizon = sum(d.values())
        variables = {"end_" + j: ("int", 0, horizon) for j in jobs}
        rows = [Row("start:" + j, {"end_" + j: 1}, ">=", d[j]) for j in jobs]
        for a, b in ((a, b) for i, a in enumerate(jobs) for b in jobs[i + 1:]):
            order = f"before_{a}_{b}"  # 1: a runs before b
            variables[order] = ("bin", 0, 1)
            label = "overlap:" + "_".join(sorted((a, b)))
            rows.append(Row(label, {"end_" + b: 1, "end_" + a: -1, order: -horizon}, ">=", d[b] - horizon))
            rows.append(Row(label, {"end_" + a: 1, "end_" + b: -1, order: horizon}, ">=", d[a]))
        return ModelSpec(family, variables, tuple(rows), {"end_" + j: data["weight"][j] for j in jobs}, "min", "cpsat")
    raise ValueError(f"unknown problem family {family!r}")


def inject(spec: ModelSpec, slip: str, rng: np.random.Generator) -> ModelSpec:
    """``spec`` with one slip of the kind named."""
    rows = list(spec.rows)
    if slip == "drop_constraint" and rows:
        rows.pop(int(rng.integers(len(rows))))
    elif slip == "sign_slip" and rows:
        i = int(rng.integers(len(rows)))
        rows[i] = replace(rows[i], sense=_FLIP[rows[i].sense])
    elif slip == "coefficient_slip":
        target = int(rng.integers(len(rows) + 1))  # len(rows): the objective
        coeffs = dict(spec.objective if target == len(rows) else rows[target].coeffs)
        name = list(coeffs)[int(rng.integers(len(coeffs)))]
        coeffs[name] = coeffs[name] + int(rng.choice([-1, 1])) * max(1, round(abs(coeffs[name]) / 2))
        if target == len(rows):
            return replace(spec, objective=coeffs, slips=spec.slips + (slip,))
        rows[target] = replace(rows[target], coeffs=coeffs)
    elif slip == "wrong_sense":
        return replace(spec, sense="min" if spec.sense == "max" else "max", slips=spec.slips + (slip,))
    elif slip == "truncated_program":
        return replace(spec, truncated=True, slips=spec.slips + (slip,))
    elif slip not in SLIPS:
        raise ValueError(f"unknown slip {slip!r}; slips: {', '.join(SLIPS)}")
    return replace(spec, rows=tuple(rows), slips=spec.slips + (slip,))


# -- the program ------------------------------------------------------------------------------

def _linear(coeffs: dict) -> str:
    return " + ".join(f"{c!r} * x[{n!r}]" for n, c in coeffs.items()) or "0"


def render(spec: ModelSpec) -> str:
    """The solver program: prints ``NEMO-RESULT:`` and JSON (status, objective, solution)."""
    lines = ["import json", "import math"]
    if spec.solver == "highs":
        lines += ["import highspy", "", "h = highspy.Highs()", "h.silent()", "x = {}"]
        for name, (kind, lo, hi) in spec.variables.items():
            add = {"cont": "addVariable", "int": "addIntegral", "bin": "addBinary"}[kind]
            bounds = "" if kind == "bin" else f"lb={lo!r}, ub={'math.inf' if hi is None else repr(hi)}, "
            lines.append(f"x[{name!r}] = h.{add}({bounds}name={name!r})")
        lines += [f"h.addConstr({_linear(r.coeffs)} {r.sense} {r.rhs!r})  # {r.label}" for r in spec.rows]
        lines += [f"h.{'maximize' if spec.sense == 'max' else 'minimize'}({_linear(spec.objective)})",
                  "status = h.modelStatusToString(h.getModelStatus()).lower()",
                  "ok = status == 'optimal'",
                  "objective = h.getInfo().objective_function_value if ok else None",
                  "solution = {n: h.val(v) for n, v in x.items()} if ok else {}"]
    else:
        lines += ["from ortools.sat.python import cp_model", "", "m = cp_model.CpModel()", "x = {}"]
        for name, (kind, lo, hi) in spec.variables.items():
            lines.append(f"x[{name!r}] = m.NewBoolVar({name!r})" if kind == "bin"
                         else f"x[{name!r}] = m.NewIntVar({int(lo)}, {int(hi)}, {name!r})")
        lines += [f"m.Add({_linear(r.coeffs)} {r.sense} {int(r.rhs)})  # {r.label}" for r in spec.rows]
        lines += [f"m.{'Maximize' if spec.sense == 'max' else 'Minimize'}({_linear(spec.objective)})",
                  "solver = cp_model.CpSolver()", "solver.parameters.num_workers = 1",
                  "solver.parameters.max_time_in_seconds = 10.0", "code = solver.Solve(m)",
                  "status = solver.StatusName(code).lower()", "ok = status == 'optimal'",
                  "objective = solver.ObjectiveValue() if ok else None",
                  "solution = {n: solver.Value(v) for n, v in x.items()} if ok else {}"]
    lines.append("print('NEMO-RESULT:' + json.dumps({'status': status, 'objective': objective, 'solution': solution}))")
    if spec.truncated:  # cut off in the middle of the objective, as a reply that hit its token limit
        cut = next(i for i, line in enumerate(lines) if "imize(" in line)
        lines = lines[:cut] + [lines[cut][:len(lines[cut]) // 2]]
    return "\n".join(lines) + "\n"


# -- repair ---------------------------------------------------------------------------------------

def repair(spec: ModelSpec, data: dict, feedback: dict) -> ModelSpec:
    """Fix what the feedback names, re-deriving it from the text's data; the rest stays as it was.

    ``feedback``: ``{"violations": [labels]}``, ``{"objective_mismatch": [reported, simulated]}``,
    ``{"solver_status": "infeasible"}`` or ``{"program_error": message}``.
    """
    right = formulate(spec.family, data)
    if "program_error" in feedback:
        return replace(spec, truncated=False)
    if "violations" in feedback:
        named = set(feedback["violations"])
        kept = [r for r in spec.rows if r.label not in named]
        fixed = [r for r in right.rows if r.label in named]
        return replace(spec, rows=tuple(kept + fixed))
    if "objective_mismatch" in feedback:
        return replace(spec, objective=right.objective)
    if "solver_status" in feedback:
        return replace(spec, rows=right.rows)
    raise ValueError(f"feedback must name violations, objective_mismatch, solver_status or program_error; "
                     f"got {sorted(feedback)}")


@dataclass(frozen=True)
class OfflineAgent:
    """Draws candidate models with slips: none with probability ``p_clean``, else one, and a second
    with probability ``p_second``; its simulators miss one kind of check with ``p_sim_gap``."""

    p_clean: float = 0.4
    p_second: float = 0.3
    p_sim_gap: float = 0.1

    def __post_init__(self):
        for name in ("p_clean", "p_second", "p_sim_gap"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"OfflineAgent.{name} must lie in [0, 1], got {getattr(self, name)}")

    def propose(self, text: str, rng: np.random.Generator) -> tuple[ModelSpec, dict]:
        family, data = parse(text)
        spec = formulate(family, data)
        if rng.random() >= self.p_clean:
            for _ in range(2 if rng.random() < self.p_second else 1):
                spec = inject(spec, SLIPS[rng.choice(len(SLIPS), p=SLIP_WEIGHTS)], rng)
        return spec, data

    def simulator(self, text: str, data: dict, rng: np.random.Generator) -> str:
        """The simulator program, written apart from the model (one kind of check missing with ``p_sim_gap``)."""
        from .nemo_simulators import CHECK_KINDS, simulator_program

        family = family_of(text)
        kinds = CHECK_KINDS[family]
        skip = (kinds[int(rng.integers(len(kinds)))],) if rng.random() < self.p_sim_gap else ()
        return simulator_program(family, data, skip)

    def repair(self, spec: ModelSpec, data: dict, feedback: dict) -> ModelSpec:
        return repair(spec, data, feedback)
