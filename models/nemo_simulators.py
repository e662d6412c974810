"""NEMO's simulators: plain-Python checks of a proposed solution, one per problem family.

A simulator is written from the problem text, apart from the optimisation model: it takes a
solution (variable name -> value, in the names every family fixes below) and returns the labels
of the constraints it breaks and the objective it achieves, computed directly (no solver).
``simulator_program`` renders one as a standalone program for the sandbox (data inlined, the
solution read as JSON on stdin); a simulator can be generated with some checks missing
(``skip``), as a real generated simulator may be. ``judge`` runs the complete simulator on the
true data in-process: the reference that decides whether an answer is right.

Variable names: production ``make_P``; transport ``ship_PLANT_CITY``; knapsack ``take_ITEM``;
assignment ``assign_W_T``; facility location ``open_S`` and ``serve_S_C``; scheduling ``end_J``.
Constraint labels are ``kind:item`` (``hours:carpentry``, ``demand:Avon``, ``capacity``, ...).
"""

from __future__ import annotations

import inspect
import json

from .nemo_problems import TOL, WordProblem

CHECK_KINDS = {"production": ("hours", "nonneg"), "transport": ("supply", "demand", "nonneg"),
               "knapsack": ("capacity", "binary"), "assignment": ("worker", "task", "binary"),
               "facility_location": ("serve", "link", "binary"), "scheduling": ("start", "overlap")}


def simulate(family, data, x, skip=()):
    """(violated constraint labels, objective) of solution ``x`` for a problem of ``family``."""
    tol = 1e-6
    bad = []

    def val(name):
        return float(x.get(name, 0.0))

    def binary(names):
        if "binary" not in skip:
            bad.extend("binary:" + n for n in names if min(abs(val(n)), abs(val(n) - 1)) > tol)

    if family == "production":
        products = data["products"]
        for r in data["resources"]:
            used = sum(data["usage"][r][p] * val("make_" + p) for p in products)
            if "hours" not in skip and used > data["hours"][r] + tol:
                bad.append("hours:" + r)
        if "nonneg" not in skip:
            bad.extend("nonneg:" + p for p in products if val("make_" + p) < -tol)
        return bad, sum(data["profit"][p] * val("make_" + p) for p in products)
    if family == "transport":
        plants, cities = data["plants"], data["cities"]
        for p in plants:
            if "supply" not in skip and sum(val(f"ship_{p}_{c}") for c in cities) > data["supply"][p] + tol:
                bad.append("supply:" + p)
        for c in cities:
            if "demand" not in skip and sum(val(f"ship_{p}_{c}") for p in plants) < data["demand"][c] - tol:
                bad.append("demand:" + c)
        if "nonneg" not in skip:
            bad.extend(f"nonneg:{p}_{c}" for p in plants for c in cities if val(f"ship_{p}_{c}") < -tol)
        return bad, sum(data["cost"][p][c] * val(f"ship_{p}_{c}") for p in plants for c in cities)
    if family == "knapsack":
        items = data["items"]
        binary(["take_" + i for i in items])
        if "capacity" not in skip and sum(data["weight"][i] * val("take_" + i) for i in items) > data["capacity"] + tol:
            bad.append("capacity")
        return bad, sum(data["value"][i] * val("take_" + i) for i in items)
    if family == "assignment":
        workers, tasks = data["workers"], data["tasks"]
        binary([f"assign_{w}_{t}" for w in workers for t in tasks])
        for w in workers:
            if "worker" not in skip and abs(sum(val(f"assign_{w}_{t}") for t in tasks) - 1) > tol:
                bad.append("worker:" + w)
        for t in tasks:
            if "task" not in skip and abs(sum(val(f"assign_{w}_{t}") for w in workers) - 1) > tol:
                bad.append("task:" + t)
        return bad, sum(data["cost"][w][t] * val(f"assign_{w}_{t}") for w in workers for t in tasks)
    if family == "facility_location":
        sites, customers = data["sites"], data["customers"]
        binary(["open_" + s for s in sites] + [f"serve_{s}_{c}" for s in sites for c in customers])
        for c in customers:
            if "serve" not in skip and abs(sum(val(f"serve_{s}_{c}") for s in sites) - 1) > tol:
                bad.append("serve:" + c)
            for s in sites:
                if "link" not in skip and val(f"serve_{s}_{c}") > val("open_" + s) + tol:
                    bad.append(f"link:{s}_{c}")
        return bad, (sum(data["fixed"][s] * val("open_" + s) for s in sites)
                     + sum(data["cost"][s][c] * val(f"serve_{s}_{c}") for s in sites for c in customers))
    if family == "scheduling":
        jobs = sorted(data["jobs"], key=lambda j: val("end_" + j))
        for j in jobs:
            if "start" not in skip and val("end_" + j) < data["duration"][j] - tol:
                bad.append("start:" + j)
        for a, b in zip(jobs, jobs[1:]):
            if "overlap" not in skip and val("end_" + b) - data["duration"][b] < val("end_" + a) - tol:
                bad.append("overlap:" + "_".join(sorted((a, b))))
        return bad, sum(data["weight"][j] * val("end_" + j) for j in jobs)
    raise ValueError(f"unknown problem family {family!r}; families: {', '.join(CHECK_KINDS)}")


def simulator_program(family: str, data: dict, skip: tuple[str, ...] = ()) -> str:
    """A standalone program: reads ``{"solution": {...}}`` on stdin, prints one JSON line
    ``{"violations": [...], "objective": ...}``."""
    if family not in CHECK_KINDS:
        raise ValueError(f"unknown problem family {family!r}; families: {', '.join(CHECK_KINDS)}")
    return (f"import json, sys\n\n{inspect.getsource(simulate)}\n"
            f"FAMILY = {family!r}\nDATA = {data!r}\nSKIP = {tuple(skip)!r}\n"
            "x = json.loads(sys.stdin.read())['solution']\n"
            "violations, objective = simulate(FAMILY, DATA, x, SKIP)\n"
            "print(json.dumps({'violations': violations, 'objective': objective}))\n")


def judge(problem: WordProblem, solution: dict | None) -> bool:
    """Right answer: the solution breaks no constraint of the text and reaches the known optimum."""
    if not solution:
        return False
    violations, objective = simulate(problem.family, problem.data, solution)
    return not violations and abs(objective - problem.optimum) <= TOL * max(1.0, abs(problem.optimum))


def solution_payload(solution: dict) -> str:
    return json.dumps({"solution": solution})
