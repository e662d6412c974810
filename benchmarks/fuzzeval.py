"""FuzzEval on HumanEval: PAC selection by fuzz-test score against its baselines (run by hand).

    python benchmarks/fuzzeval.py --seeds 0 1 2 [--problems 164] [--candidates 6] [--splits 500]
        [--epsilons 0.05 0.1] [--delta 0.1] [-o benchmarks/results/fuzzeval.json]

Per seed: the offline generator writes ``--candidates`` programs per problem (the canonical
solution or AST mutants of it), fuzz tests are built (hypothesis + mutated examples, the canonical
solution as oracle) and every program runs sandboxed on them and on the shipped tests. Then, for
each target FDR epsilon, ``--splits`` random calibration/test halves (over candidates, and over
whole problems): each method's threshold is learnt on the calibration half and scored once on the
test half. Methods: the PAC threshold on the fuzz score (FuzzEval), the same on the docstring
examples alone, the empirical threshold without a bound, "passes every fuzz test", and no
selection. Nothing is tuned: epsilon and delta are targets, the fuzz budget is fixed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from edgekit.models.fuzzeval import METHODS, disagreements, evaluate_selection, score_problems
from edgekit.models.humaneval import load_problems
from edgekit.models.sandbox import isolation_layers
from edgekit.utils.files import atomic_write
from edgekit.utils.provenance import load_average, provenance, require_clean_tree


def summarise(per_seed: list[dict], key: str) -> dict:
    values = np.array([r[key] for r in per_seed], dtype=float)
    half = 1.96 * values.std(ddof=1) / np.sqrt(len(values)) if len(values) > 1 else 0.0
    return {"mean": float(values.mean()), "ci95": float(half), "per_seed": values.tolist()}


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epsilons = result["epsilons"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, split in zip(axes, ("candidate", "problem")):
        for method in METHODS:
            rows = [result["summary"][split][str(e)][method] for e in epsilons]
            ax.errorbar([r["selection_rate"]["mean"] for r in rows], [r["fdr_mean"]["mean"] for r in rows],
                        xerr=[r["selection_rate"]["ci95"] for r in rows], yerr=[r["fdr_mean"]["ci95"] for r in rows],
                        marker="o", capsize=3, label=method)
        for e in epsilons:
            ax.axhline(e, color="grey", lw=0.7, ls="--")
        ax.set_xlabel("selection rate (test half)")
        ax.set_ylabel("false discovery rate (test half, mean over splits)")
        ax.set_title(f"split over {split}s; dashed: targets {epsilons}")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--problems", type=int, default=164)
    parser.add_argument("--candidates", type=int, default=6)
    parser.add_argument("--splits", type=int, default=500)
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.05, 0.1])
    parser.add_argument("--delta", type=float, default=0.1)
    parser.add_argument("--allow-dirty", action="store_true")
    parser.add_argument("-o", "--output", type=Path, default=Path("benchmarks/results/fuzzeval.json"))
    args = parser.parse_args(argv)
    require_clean_tree(args.allow_dirty)
    prov = provenance(seed=args.seeds[0], threads=1)  # at the start: the code that ran
    problems = load_problems()[:args.problems]
    per_seed, started = [], time.perf_counter()
    for seed in args.seeds:
        t0 = time.perf_counter()
        scored = score_problems(problems, args.candidates, seed)
        labels = np.array([s.correct for s in scored])
        row = {"seed": seed, "candidates": len(scored), "base_error_rate": float(1 - labels.mean()),
               "statuses": {k: sum(s.status == k for s in scored) for k in sorted({s.status for s in scored})},
               "mean_fuzz_tests": float(np.mean([s.n_tests for s in scored[::args.candidates]])),
               "disagreements": disagreements(scored), "selection": {}, "seconds": time.perf_counter() - t0,
               "scored": [asdict(s) for s in scored]}
        for split in ("candidate", "problem"):
            row["selection"][split] = {str(e): evaluate_selection(scored, e, args.delta, args.splits, seed, split)
                                       for e in args.epsilons}
        per_seed.append(row)
        print(f"seed {seed}: {len(scored)} candidates, error rate {row['base_error_rate']:.3f}, "
              f"{row['seconds']:.0f} s", file=sys.stderr)
    summary = {split: {str(e): {m: {k: summarise([r["selection"][split][str(e)][m] for r in per_seed], k)
                                    for k in ("violation_rate", "fdr_mean", "selection_rate", "recall", "abstained")}
                                for m in METHODS} for e in args.epsilons} for split in ("candidate", "problem")}
    prov["load_average_after"] = load_average()
    result = {"command": "python " + " ".join([sys.argv[0]] + (argv if argv is not None else sys.argv[1:])),
              "provenance": prov, "sandbox_layers": isolation_layers(),
              "problems": len(problems), "candidates_per_problem": args.candidates, "splits": args.splits,
              "epsilons": args.epsilons, "delta": args.delta, "summary": summary, "per_seed": per_seed,
              "seconds": time.perf_counter() - started}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(args.output, json.dumps(result, indent=1) + "\n")
    plot(result, args.output.with_suffix(".png"))
    for split in ("candidate", "problem"):
        for e in args.epsilons:
            print(f"split={split} epsilon={e}")
            for m in METHODS:
                s = summary[split][str(e)][m]
                print(f"  {m:15s} violations {s['violation_rate']['mean']:.3f} (delta {args.delta})  "
                      f"FDR {s['fdr_mean']['mean']:.3f}+-{s['fdr_mean']['ci95']:.3f}  "
                      f"selected {s['selection_rate']['mean']:.3f}+-{s['selection_rate']['ci95']:.3f}")


if __name__ == "__main__":
    main()
