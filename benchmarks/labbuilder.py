"""LabBuilder on generated specifications: optimised placement against random and greedy (run by hand).

    python benchmarks/labbuilder.py --seeds 0 1 2 [--specs 10] [--iterations 600]
        [-o benchmarks/results/labbuilder.json]

Per seed, ``--specs`` specifications from :func:`generate_spec` (seeds 1000 * (seed + 1) + k: apart
from seeds 0-9, on which the annealing cost's weights were set by hand), each laid out by the three
methods; per layout the collision rate, out-of-bounds rate, weighted safety violations and the
fraction of protocol steps a robot reaches by A*. Means per seed, then mean and 95% interval over
seeds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from seed_stats import mean_ci

from edgekit.models.lab_layout import METHODS, metrics, plan
from edgekit.models.lab_protocol import generate_spec, parse_spec
from edgekit.utils.files import atomic_write
from edgekit.utils.provenance import load_average, provenance, require_clean_tree

METRICS = ("collision_rate", "out_of_bounds_rate", "weighted_safety_violations", "reachable_step_fraction")


def plot(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(METRICS), figsize=(14, 3.5))
    for ax, metric in zip(axes, METRICS):
        rows = [summary[m][metric] for m in METHODS]
        ax.bar(METHODS, [r["mean"] for r in rows], yerr=[r["ci95"] for r in rows], capsize=4,
               color=["tab:grey", "tab:orange", "tab:blue"])
        ax.set_title(metric.replace("_", " "), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--specs", type=int, default=10)
    parser.add_argument("--iterations", type=int, default=600)
    parser.add_argument("--allow-dirty", action="store_true")
    parser.add_argument("-o", "--output", type=Path, default=Path("benchmarks/results/labbuilder.json"))
    args = parser.parse_args(argv)
    require_clean_tree(args.allow_dirty)
    prov = provenance(seed=args.seeds[0], threads=1)
    per_seed, started = [], time.perf_counter()
    for seed in args.seeds:
        t0 = time.perf_counter()
        layouts = []
        for k in range(args.specs):
            spec_seed = 1000 * (seed + 1) + k
            protocol = parse_spec(generate_spec(spec_seed))
            row = {"spec_seed": spec_seed, "steps": len(protocol.steps)}
            for method in METHODS:
                m = metrics(plan(protocol, method, seed, args.iterations))
                row[method] = {k: m[k] for k in METRICS}
            layouts.append(row)
        per_seed.append({"seed": seed, "layouts": layouts, "seconds": time.perf_counter() - t0,
                         "mean": {m: {k: float(np.mean([r[m][k] for r in layouts])) for k in METRICS}
                                  for m in METHODS}})
        print(f"seed {seed}: " + "; ".join(f"{m} " + " ".join(f"{per_seed[-1]['mean'][m][k]:.3f}" for k in METRICS)
                                           for m in METHODS), file=sys.stderr)
    summary = {m: {k: mean_ci([s["mean"][m][k] for s in per_seed]) for k in METRICS} for m in METHODS}
    prov["load_average_after"] = load_average()
    result = {"command": "python " + " ".join([sys.argv[0]] + (argv if argv is not None else sys.argv[1:])),
              "provenance": prov, "specs_per_seed": args.specs, "iterations": args.iterations,
              "summary": summary, "per_seed": per_seed, "seconds": time.perf_counter() - started}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(args.output, json.dumps(result, indent=1) + "\n")
    plot(summary, args.output.with_suffix(".png"))
    for m in METHODS:
        print(f"{m:10s} " + "  ".join(f"{k} {summary[m][k]['mean']:.3f}+-{summary[m][k]['ci95']:.3f}" for k in METRICS))


if __name__ == "__main__":
    main()
