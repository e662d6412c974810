"""NEMO's agent on a user's own model server: the model writes the optimisation model (as JSON,
rendered to a HiGHS or CP-SAT program by :func:`.nemo_agent.render`), a separate simulator program,
and repairs from feedback. Same interface as :class:`.nemo_agent.OfflineAgent`; no data is parsed
here, so the memory of solved problems (which re-derives constraints from parsed data) is skipped.
"""

from __future__ import annotations

import json
import re

import numpy as np

from .llm_client import extract_code
from .nemo_agent import ModelSpec, Row

NAMING = ("Name variables as the solution will be checked: production make_PRODUCT; transport ship_PLANT_CITY; "
          "knapsack take_ITEM; assignment assign_WORKER_TASK; facility location open_SITE and serve_SITE_STORE; "
          "scheduling end_JOB (completion times); otherwise ROLE_ITEM. Label each constraint KIND:ITEM.")
MODEL_FORMAT = ('Reply with one JSON object: {"solver": "highs" or "cpsat", "sense": "max" or "min", '
                '"variables": {"NAME": ["cont" or "int" or "bin", lower, upper or null]}, '
                '"constraints": [{"label": "KIND:ITEM", "coeffs": {"NAME": number}, "sense": "<=" or ">=" or "==", '
                '"rhs": number}], "objective": {"NAME": number}}. CP-SAT needs integer coefficients and bounds.')
SIMULATOR_FORMAT = ("Write a Python program (standard library only) that reads {\"solution\": {NAME: value}} as JSON "
                    "on stdin, checks every constraint of the problem directly (no solver) and prints one JSON line "
                    "{\"violations\": [labels of broken constraints], \"objective\": value}.")


def spec_from_json(text: str, family: str = "server") -> ModelSpec:
    """A model from the server's JSON; ``ValueError`` naming the field that is wrong."""
    match = re.search(r"\{.*\}", text, re.DOTALL)
    try:
        obj = json.loads(match.group(0) if match else text)
    except ValueError:
        raise ValueError("the model is not JSON") from None
    for key in ("solver", "sense", "variables", "constraints", "objective"):
        if key not in obj:
            raise ValueError(f"the model lacks {key!r}")
    if obj["solver"] not in ("highs", "cpsat"):
        raise ValueError(f"solver must be 'highs' or 'cpsat', got {obj['solver']!r}")
    if obj["sense"] not in ("max", "min"):
        raise ValueError(f"sense must be 'max' or 'min', got {obj['sense']!r}")
    variables = {}
    for name, spec in obj["variables"].items():
        if not (isinstance(spec, list) and len(spec) == 3 and spec[0] in ("cont", "int", "bin")):
            raise ValueError(f"variable {name!r} must be [cont|int|bin, lower, upper], got {spec!r}")
        variables[name] = tuple(spec)
    rows = []
    for row in obj["constraints"]:
        unknown = [n for n in row.get("coeffs", {}) if n not in variables]
        if unknown or row.get("sense") not in ("<=", ">=", "==") or not isinstance(row.get("rhs"), (int, float)):
            raise ValueError(f"constraint {row.get('label')!r} needs known variables (unknown: {unknown}), a sense "
                             f"<=, >= or == and a numeric rhs")
        rows.append(Row(str(row.get("label", "constraint")), dict(row["coeffs"]), row["sense"], row["rhs"]))
    unknown = [n for n in obj["objective"] if n not in variables]
    if unknown:
        raise ValueError(f"the objective names unknown variables {unknown}")
    return ModelSpec(family, variables, tuple(rows), dict(obj["objective"]), obj["sense"], obj["solver"])


def spec_to_json(spec: ModelSpec) -> str:
    return json.dumps({"solver": spec.solver, "sense": spec.sense,
                       "variables": {n: list(v) for n, v in spec.variables.items()},
                       "constraints": [{"label": r.label, "coeffs": r.coeffs, "sense": r.sense, "rhs": r.rhs}
                                       for r in spec.rows], "objective": spec.objective})


class ServerAgent:
    """``client``: anything with ``complete(prompt, seed=None) -> str`` (a :class:`.llm_client.ChatClient`)."""

    def __init__(self, client):
        self.client = client

    def _ask(self, prompt: str, rng: np.random.Generator) -> str:
        return self.client.complete(prompt, seed=int(rng.integers(2 ** 31)))

    def propose(self, text: str, rng: np.random.Generator) -> tuple[ModelSpec, None]:
        reply = self._ask(f"Formulate this optimisation problem.\n\n{text}\n\n{NAMING}\n{MODEL_FORMAT}", rng)
        return spec_from_json(reply), None

    def simulator(self, text: str, data, rng: np.random.Generator) -> str:
        return extract_code(self._ask(f"For this problem:\n\n{text}\n\n{NAMING}\n{SIMULATOR_FORMAT}", rng))

    def repair(self, spec: ModelSpec, data, feedback: dict) -> ModelSpec:
        reply = self.client.complete(f"Your model:\n{spec_to_json(spec)}\n\nValidation against a simulator reported: "
                                     f"{json.dumps(feedback)}\nCorrect the model. {MODEL_FORMAT}")
        return spec_from_json(reply, spec.family)
