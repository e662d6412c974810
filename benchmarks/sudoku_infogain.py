"""Info-Gain sampler against greedy samplers of a Sudoku masked diffusion model, at equal forward calls.

For each training seed: train the ``sudoku_mdm`` model (registry config plus ``--config``
overrides), choose the Info-Gain noise scale on validation puzzles (mean solve rate over
the round budgets, fp32 weights), then score every sampler once on the test puzzles at
each round budget, with the weights in fp32, MXINT8 and MXFP4. Every sampler makes the
same number of forward calls at a budget; Info-Gain's calls each evaluate ``candidates``
sequences (``rows``), and its wall time is reported beside the others'.

    python benchmarks/sudoku_infogain.py --seeds 0 1 2 -o benchmarks/results/sudoku_infogain.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
from seed_stats import interval

from edgekit.models import mdm_samplers, registry, sudoku_mdm
from edgekit.models.weights import quantized_copy
from edgekit.simulators import weight_formats as wf
from edgekit.utils.files import atomic_write
from edgekit.utils.provenance import load_average, provenance, require_clean_tree

# the float reference, and the MX formats of 8-bit INT and 4-bit FP elements
FORMATS = (wf.REFERENCE, *wf.names("block", lambda r: r.is_mx and (r.element_kind, r.element_bits) in (("int", 8),
                                                                                                     ("float", 4))))
METRICS = ("solve_rate", "cell_accuracy", "violations", "seconds_per_puzzle")


def run_seed(config, rounds: list[int], temperatures: list[float], val_puzzles: int, log) -> dict:
    began = time.perf_counter()
    trained = registry.train("sudoku_mdm", config, log=log)
    model = trained.model.eval()
    log(f"seed {config.seed}: trained in {trained.train_seconds:.0f} s (cached: {trained.cached})")
    val = sudoku_mdm.puzzles_for(config, "val", val_puzzles)
    tuning = {t: float(np.mean([sudoku_mdm.run_sampler(model, *val, "info_gain", r, candidates=config.candidates,
                                                       temperature=t, seed=config.seed)["solve_rate"]
                                for r in rounds])) for t in temperatures}
    best = max(temperatures, key=lambda t: (tuning[t], -t))
    log(f"seed {config.seed}: validation solve rate by temperature {tuning} -> {best}")
    test = sudoku_mdm.puzzles_for(config, "test")
    rows = []
    for fmt in FORMATS:
        candidate = model if fmt == wf.REFERENCE else quantized_copy(model, fmt)
        for r in rounds:
            for method in mdm_samplers.METHODS:
                result = sudoku_mdm.run_sampler(candidate, *test, method, r, candidates=config.candidates,
                                                temperature=best, seed=config.seed)
                rows.append({"seed": config.seed, "format": fmt, "rounds": r, "method": method, **result})
            log(f"seed {config.seed} {fmt} rounds {r}: " + ", ".join(
                f"{row['method']} {row['solve_rate']:.3f}" for row in rows[-len(mdm_samplers.METHODS):]))
    return {"seed": config.seed, "train_seconds": trained.train_seconds, "validation": tuning, "temperature": best,
            "rows": rows, "seconds": time.perf_counter() - began}


def summarise(rows: list[dict], rounds: list[int]) -> list[dict]:
    """Per (format, rounds, method): each metric over seeds, and Info-Gain minus the method, paired by seed."""
    out = []
    for fmt in FORMATS:
        for r in rounds:
            group = [row for row in rows if row["format"] == fmt and row["rounds"] == r]
            by_method = {m: sorted((row for row in group if row["method"] == m), key=lambda row: row["seed"])
                         for m in mdm_samplers.METHODS}
            for method, runs in by_method.items():
                entry = {"format": fmt, "rounds": r, "method": method, "forward_calls": runs[0]["forward_calls"],
                         "rows": runs[0]["rows"], **{k: interval([run[k] for run in runs]) for k in METRICS}}
                if method != "info_gain":
                    entry["info_gain_minus_this_solve_rate"] = interval(
                        [ig["solve_rate"] - run["solve_rate"] for ig, run in zip(by_method["info_gain"], runs)])
                out.append(entry)
    return out


def plot(summary: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(FORMATS), figsize=(5 * len(FORMATS), 4), sharey=True)
    for ax, fmt in zip(axes, FORMATS):
        for method in mdm_samplers.METHODS:
            pts = sorted((s for s in summary if s["format"] == fmt and s["method"] == method),
                         key=lambda s: s["rounds"])
            ax.errorbar([p["rounds"] for p in pts], [p["solve_rate"]["mean"] for p in pts],
                        yerr=[p["solve_rate"]["ci95"] for p in pts], marker="o", capsize=3, label=method)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("forward calls per puzzle (rounds)")
        ax.set_title(f"{title}, weights {fmt}")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("test solve rate (mean, 95% CI over seeds)")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--rounds", nargs="+", type=int, default=[2, 3, 4, 6, 11])
    parser.add_argument("--temperatures", nargs="+", type=float, default=[0.25, 0.5, 1.0])
    parser.add_argument("--val-puzzles", type=int, default=200)
    parser.add_argument("--config", nargs="*", default=[], metavar="KEY=VALUE", help="sudoku_mdm config overrides")
    parser.add_argument("--allow-dirty", action="store_true")
    parser.add_argument("-o", "--output", type=Path, default=Path("benchmarks/results/sudoku_infogain.json"))
    args = parser.parse_args()
    require_clean_tree(args.allow_dirty)
    torch.set_num_threads(1)
    made_with = provenance(seed=args.seeds[0], threads=1)  # at the start: the code the run began with
    overrides = registry.parse_config_items(args.config)
    configs = [registry.make_config("sudoku_mdm", {**overrides, "seed": s}) for s in args.seeds]
    runs = [run_seed(c, args.rounds, args.temperatures, args.val_puzzles, print) for c in configs]
    rows = [row for run in runs for row in run["rows"]]
    summary = summarise(rows, args.rounds)
    config = dataclasses.asdict(configs[0])
    config.pop("seed")
    made_with["load_average_after"] = load_average()
    result = {"provenance": made_with, "command": " ".join(sys.argv), "seeds": args.seeds, "config": config,
              "rounds": args.rounds, "temperatures": args.temperatures, "val_puzzles": args.val_puzzles,
              "test_puzzles": configs[0].eval_puzzles,
              "runs": [{k: v for k, v in run.items() if k != "rows"} for run in runs], "summary": summary, "rows": rows}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(args.output, json.dumps(result, indent=2) + "\n")
    size = configs[0].size
    plot(summary, args.output.with_suffix(".png"), f"{size}x{size} {configs[0].level}")
    print(f"wrote {args.output} and {args.output.with_suffix('.png')}")


if __name__ == "__main__":
    main()
