"""Study configs and ``evaluate`` of the three checker systems: FuzzEval, NEMO and LabBuilder.

Each runs the system's own pipeline at the size its config names and returns its headline
numbers beside its baselines', so ``edgekit study NAME`` and ``edgekit report --studies``
reach them like any study. The benchmarks (``benchmarks/fuzzeval.py``, ``nemo.py``,
``labbuilder.py``) run the same pipelines over several seeds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .config_fields import bounded, checked


@dataclass(frozen=True)
@checked
class FuzzEvalConfig:
    seed: int = bounded(0, low=0)
    problems: int = bounded(164, low=1)  # the first N HumanEval problems
    candidates: int = bounded(5, low=1)  # programs per problem (the canonical solution and AST mutants)
    splits: int = bounded(200, low=1)  # random calibration/test splits
    epsilon: float = bounded(0.1, low=0, high=1, low_open=True, high_open=True)  # FDR target
    # allowed share of splits over the target
    delta: float = bounded(0.1, low=0, high=1, low_open=True, high_open=True)

    @classmethod
    def tiny(cls, **overrides):
        return cls(**{"problems": 6, "candidates": 3, "splits": 20, **overrides})


def evaluate_fuzzeval(config: FuzzEvalConfig) -> dict:
    """Per selection rule: share of splits whose test FDR exceeds epsilon, and the selection rate."""
    from .fuzzeval import evaluate_selection, score_problems
    from .humaneval import load_problems

    scored = score_problems(load_problems()[:config.problems], config.candidates, config.seed)
    result = evaluate_selection(scored, config.epsilon, config.delta, config.splits, config.seed)
    out = {}
    for method, row in result.items():
        out[f"violation_rate_{method}"] = row["violation_rate"]
        out[f"selection_rate_{method}"] = row["selection_rate"]
    return out


@dataclass(frozen=True)
@checked
class NemoConfig:
    seed: int = bounded(0, low=0)
    per_family: int = bounded(5, low=1)  # word problems of each of the six families
    candidates: int = bounded(4, low=1)
    max_rounds: int = bounded(3, low=1)  # repair rounds after a failed validation

    @classmethod
    def tiny(cls, **overrides):
        return cls(**{"per_family": 1, "candidates": 2, "max_rounds": 2, **overrides})


def evaluate_nemo(config: NemoConfig) -> dict:
    """Accuracy (right optimum, no constraint broken) of each selection condition on one generated suite."""
    from .nemo import CONDITIONS, run_suite
    from .nemo_agent import OfflineAgent
    from .nemo_problems import suite

    rows = run_suite(suite(config.per_family, config.seed), OfflineAgent(), config.candidates, config.max_rounds,
                     config.seed)
    return {f"accuracy_{c}": float(np.mean([r[c] for r in rows])) for c in CONDITIONS}


@dataclass(frozen=True)
@checked
class LabBuilderConfig:
    seed: int = bounded(0, low=0)
    specs: int = bounded(10, low=1)  # generated specifications
    iterations: int = bounded(600, low=1)  # annealing steps of the optimised layout

    @classmethod
    def tiny(cls, **overrides):
        return cls(**{"specs": 2, "iterations": 100, **overrides})


def evaluate_labbuilder(config: LabBuilderConfig) -> dict:
    """Mean layout metrics of each placement method over the generated specifications."""
    from .lab_layout import METHODS, metrics, plan
    from .lab_protocol import generate_spec, parse_spec

    out = {}
    per_method = {m: [] for m in METHODS}
    for k in range(config.specs):
        protocol = parse_spec(generate_spec(1000 * (config.seed + 1) + k))
        for method in METHODS:
            per_method[method].append(metrics(plan(protocol, method, config.seed, config.iterations)))
    for method, rows in per_method.items():
        for key in ("collision_rate", "out_of_bounds_rate", "weighted_safety_violations", "reachable_step_fraction"):
            out[f"{key}_{method}"] = float(np.mean([r[key] for r in rows]))
    return out
