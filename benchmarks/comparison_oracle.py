"""Gradient testing and estimation with a comparison oracle: queries, errors, baselines (run by hand).

    python benchmarks/comparison_oracle.py [--seeds 0,1,2,3,4] [-o benchmarks/results/comparison_oracle.json]

* scaling: the estimator's exact query count and its error against n (quadratics,
  epsilon 0.05) and against 1/epsilon (quadratic n=32, logistic loss on digits, the loss of
  the MXFP4 digits MLP as a function of its 64 input pixels), with the bound
  n + (n-1)(1 + ceil(log2(sqrt(n-1)/eps))) and fitted slopes;
* tester: how often it answers wrongly at the two boundaries (||g - v|| = eps, said far;
  ||g - v|| = 2 eps, said close) against the plan's exact worst-case error 0.05, and its
  query count, over n and epsilon;
* equal queries: at the estimator's own query count, the error of forward finite
  differences, the two-point random-direction estimator (both read values) and the
  comparison-based sign average; each baseline's delta chosen on a validation seed (1000).

Writes the JSON (with provenance) and a PNG beside it.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from edgekit.models import comparison_oracle as co
from edgekit.utils.files import atomic_write
from edgekit.utils.provenance import load_average, provenance, require_clean_tree

NS = [4, 8, 16, 32, 64, 128]
EPSILONS = [0.2, 0.1, 0.05, 0.02, 0.01, 0.005, 0.002]
TESTER_EPSILONS = [0.3, 0.1, 0.03, 0.01]
TESTER_NS = [8, 64]
DELTAS = [1e-2, 1e-3, 1e-4, 1e-5]
VALIDATION_SEED = 1000


def problem(function: str, n: int, seed: int, cache: dict) -> co.Problem:
    key = (function, n if function == "quadratic" else 64, seed)
    if key not in cache:
        cache[key] = co.make_problem(function, n, seed)
    return cache[key]


def ci95(values) -> float:
    from scipy import stats

    values = np.asarray(values, dtype=float)
    return float(stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / np.sqrt(len(values)))


def scaling(seeds, cache) -> list[dict]:
    rows = []
    grid = [("quadratic", n, 0.05) for n in NS] + [(f, 32, e) for f in co.FUNCTIONS for e in EPSILONS]
    for function, n, eps in grid:
        for seed in seeds:
            p = problem(function, n, seed, cache)
            oracle = co.ComparisonOracle(p.f)
            estimate = co.estimate_gradient(oracle, p.x, eps)
            rows.append({"function": function, "n": p.x.size, "epsilon": eps, "seed": seed, "queries": oracle.queries,
                         "bound": co.estimator_queries(p.x.size, eps),
                         "error": float(np.linalg.norm(estimate - p.direction))})
    return rows


def slopes(rows) -> dict:
    """log-log slope of queries against n; slope of queries against log2(1/eps) (compare with n - 1)."""
    by_n = sorted({(r["n"], r["queries"]) for r in rows if r["function"] == "quadratic" and r["epsilon"] == 0.05})
    out = {"queries_vs_n_loglog": float(np.polyfit(np.log([n for n, _ in by_n]), np.log([q for _, q in by_n]), 1)[0])}
    for function in co.FUNCTIONS:
        n = 32 if function == "quadratic" else 64
        pts = sorted({(r["epsilon"], r["queries"]) for r in rows if r["function"] == function and r["n"] == n})
        x = np.log2(1 / np.array([e for e, _ in pts]))
        out[f"{function}_queries_per_halving_of_epsilon"] = float(np.polyfit(x, [q for _, q in pts], 1)[0])
    return out


def tester(seeds, cache, trials: int) -> list[dict]:
    rows = []
    cases = [("quadratic", n, e) for n in TESTER_NS for e in TESTER_EPSILONS] + \
            [(f, 64, 0.1) for f in ("logistic", "quantized_net")]
    for function, n, eps in cases:
        plan = co.tester_plan(eps)
        for seed in seeds:
            rng = np.random.default_rng([seed, 17])
            wrong, queries = {"close": 0, "far": 0}, 0
            for t in range(trials):
                # a fresh quadratic per trial; the logistic and network losses at the seed's point
                p = co.quadratic(n, seed * 10_000 + t) if function == "quadratic" else problem(function, n, seed, cache)
                for case, distance in (("close", eps), ("far", 2 * eps)):
                    v = co.rotate_towards_random(p.direction, distance, rng)
                    oracle = co.ComparisonOracle(p.f)
                    wrong[case] += co.gradient_is_close(oracle, p.x, v, eps, rng=rng) != (case == "close")
                    queries = oracle.queries
            rows.append({"function": function, "n": n, "epsilon": eps, "seed": seed, "trials": trials,
                         "queries": queries, "plan_error_close": plan.error_close, "plan_error_far": plan.error_far,
                         "error_close": wrong["close"] / trials, "error_far": wrong["far"] / trials})
    return rows


def equal_queries(seeds, cache) -> tuple[list[dict], dict]:
    chosen, rows = {}, []
    for function in co.FUNCTIONS:
        for eps in (0.2, 0.05, 0.01):
            budget = co.estimator_queries(64, eps)
            p = problem(function, 64, VALIDATION_SEED, cache)
            for name in co.BASELINES:
                errors = {d: np.linalg.norm(co.baseline_estimate(name, p.f, p.x, budget, rng=np.random.default_rng(0),
                                                                 delta=d) - p.direction) for d in DELTAS}
                chosen[f"{function}/{eps}/{name}"] = min(errors, key=errors.get)
            for seed in seeds:
                p = problem(function, 64, seed, cache)
                oracle = co.ComparisonOracle(p.f)
                row = {"function": function, "epsilon": eps, "seed": seed, "queries": budget,
                       "comparison_estimator": float(np.linalg.norm(co.estimate_gradient(oracle, p.x, eps) - p.direction))}
                assert oracle.queries == budget
                for name in co.BASELINES:
                    guess = co.baseline_estimate(name, p.f, p.x, budget, rng=np.random.default_rng([seed, 23]),
                                                 delta=chosen[f"{function}/{eps}/{name}"])
                    row[name] = float(np.linalg.norm(guess - p.direction))
                rows.append(row)
    return rows, chosen


def summarize(rows, keys, metrics) -> list[dict]:
    groups = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in keys), []).append(r)
    out = []
    for key, group in groups.items():
        entry = dict(zip(keys, key), seeds=len(group))
        for m in metrics:
            values = [g[m] for g in group]
            entry[m], entry[f"{m}_ci95"] = float(np.mean(values)), ci95(values)
            entry[f"{m}_max"] = float(np.max(values))
        out.append(entry)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--trials", type=int, default=200, help="tester trials per case and seed")
    parser.add_argument("-o", "--output", type=Path, default=Path("benchmarks/results/comparison_oracle.json"))
    parser.add_argument("--allow-dirty", action="store_true")
    args = parser.parse_args()
    require_clean_tree(args.allow_dirty)
    torch.set_num_threads(1)
    seeds = [int(s) for s in args.seeds.split(",")]
    made_with = provenance(seeds[0], threads=1)  # at the start: the code the run began with
    cache, start = {}, time.perf_counter()
    scale = scaling(seeds, cache)
    print("scaling", slopes(scale), flush=True)
    tests = tester(seeds, cache, args.trials)
    print("tester done", flush=True)
    equal, chosen = equal_queries(seeds, cache)
    result = {
        "meta": {**made_with, "seeds": seeds, "trials": args.trials,
                 "seconds": time.perf_counter() - start, "load_average_after": load_average()},
        "slopes": slopes(scale),
        "scaling_summary": summarize(scale, ["function", "n", "epsilon"], ["queries", "bound", "error"]),
        "tester_summary": summarize(tests, ["function", "n", "epsilon"],
                                    ["queries", "plan_error_close", "plan_error_far", "error_close", "error_far"]),
        "equal_queries_summary": summarize(equal, ["function", "epsilon", "queries"],
                                           ["comparison_estimator", *co.BASELINES]),
        "baseline_delta": chosen, "scaling": scale, "tester": tests, "equal_queries": equal,
    }
    for section in ("slopes", "tester_summary", "equal_queries_summary"):
        print(section, json.dumps(result[section], indent=None)[:3000])
    atomic_write(args.output, json.dumps(result, indent=1) + "\n")
    plot(result, args.output.with_suffix(".png"))
    print(f"wrote {args.output}")


def plot(result: dict, path: Path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(19, 4))
    rows = [r for r in result["scaling_summary"] if r["function"] == "quadratic" and r["epsilon"] == 0.05]
    ax = axes[0]
    ax.plot([r["n"] for r in rows], [r["queries"] for r in rows], "o-", label="measured queries")
    ax.plot([r["n"] for r in rows], [r["bound"] for r in rows], "k--", label="n + (n-1)(1 + ceil(log2(sqrt(n-1)/eps)))")
    ax.set(xscale="log", yscale="log", xlabel="n", ylabel="comparisons", title="estimator, quadratic, eps = 0.05")
    ax.legend(fontsize=7)
    ax = axes[1]
    for function in co.FUNCTIONS:
        rows = sorted((r for r in result["scaling_summary"] if r["function"] == function
                       and r["n"] == (32 if function == "quadratic" else 64)), key=lambda r: r["epsilon"])
        ax.plot([1 / r["epsilon"] for r in rows], [r["error_max"] for r in rows], "o-", label=f"{function} (n={rows[0]['n']})")
    ax.plot([1 / e for e in EPSILONS], EPSILONS, "k--", label="epsilon")
    ax.set(xscale="log", yscale="log", xlabel="1/epsilon", ylabel="max error over seeds", title="estimator error")
    ax.legend(fontsize=7)
    ax = axes[2]
    rows = [r for r in result["tester_summary"] if r["function"] == "quadratic"]
    labels = [f"n={r['n']}\neps={r['epsilon']}\nk={int(r['queries'])}" for r in rows]
    x = np.arange(len(rows))
    ax.bar(x - 0.2, [r["error_close"] for r in rows], 0.4, yerr=[r["error_close_ci95"] for r in rows], label="close, said far")
    ax.bar(x + 0.2, [r["error_far"] for r in rows], 0.4, yerr=[r["error_far_ci95"] for r in rows], label="far, said close")
    ax.axhline(0.05, color="k", ls="--", label="plan's bound")
    ax.set_xticks(x, labels, fontsize=6)
    ax.set(ylabel="error rate at the boundary", title="tester (quadratic)")
    ax.legend(fontsize=7)
    ax = axes[3]
    rows = result["equal_queries_summary"]
    x = np.arange(len(rows))
    for i, name in enumerate(["comparison_estimator", *co.BASELINES]):
        ax.bar(x + (i - 1.5) * 0.2, [r[name] for r in rows], 0.2, yerr=[r[f"{name}_ci95"] for r in rows], label=name)
    ax.set_xticks(x, [f"{r['function']}\nQ={r['queries']}" for r in rows], fontsize=6, rotation=45)
    ax.set(yscale="log", ylabel="||estimate - g||", title="equal queries (n=64)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
