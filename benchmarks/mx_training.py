"""The evaluation LM trained with every GEMM operand in a number format, against BF16, per seed.

    python benchmarks/mx_training.py [--seeds 0 1 2] [--config steps=300 ...] [-o benchmarks/results/mx_training.json]

For each seed, every scheme of ``mx_training.SCHEMES`` trains the same LM recipe (the BF16
recipe, not tuned per scheme) from the same initialisation and batches; the validation split
(held-out files) is scored once at the end. Reported per scheme: the validation
cross-entropy's mean and 95% interval over seeds, its excess over BF16 paired by seed, the
loss curves, and the mean rounding error of a Gaussian input in each INT8 scheme (the bias
symmetric clipping removes).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import torch
from seed_stats import interval

from edgekit.models import mx_training, registry
from edgekit.utils.files import atomic_write
from edgekit.utils.provenance import load_average, provenance, require_clean_tree


def plot(runs: list[dict], schemes: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, scheme in enumerate(schemes):
        curves = np.array([r["loss_history"] for r in runs if r["scheme"] == scheme])
        window = 20
        smooth = np.array([np.convolve(c, np.ones(window) / window, mode="valid") for c in curves])
        steps = np.arange(smooth.shape[1]) + window
        ax.plot(steps, smooth.mean(0), label=scheme, color=f"C{i}", lw=1.2,
                ls="--" if scheme == "bf16" else "-")
    ax.set_xlabel("step")
    ax.set_ylabel(f"training loss (mean over seeds, {window}-step average)")
    ax.set_title("The evaluation LM with every GEMM's operands in a format")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--config", nargs="*", default=[], metavar="KEY=VALUE", help="MXTrainingConfig overrides")
    parser.add_argument("--allow-dirty", action="store_true")
    parser.add_argument("-o", "--output", type=Path, default=Path("benchmarks/results/mx_training.json"))
    args = parser.parse_args()
    require_clean_tree(args.allow_dirty)
    torch.set_num_threads(1)
    meta = {"command": "python " + " ".join(sys.argv), **provenance(args.seeds[0], threads=1)}
    overrides = registry.parse_config_items(args.config)
    fields = {f.name: f for f in dataclasses.fields(mx_training.MXTrainingConfig)}
    unknown = sorted(set(overrides) - set(fields))
    if unknown:
        parser.error(f"--config keys {unknown} are not MXTrainingConfig fields: {sorted(fields)}")
    parsed = {k: (tuple(v.split(",")) if k == "schemes" else type(fields[k].default)(v)) for k, v in overrides.items()}
    runs = []
    for seed in args.seeds:
        config = mx_training.MXTrainingConfig(**{**parsed, "seed": seed})
        for scheme in config.schemes:
            run = {"seed": seed, **mx_training.train_scheme(config, scheme)}
            runs.append(run)
            print(f"seed {seed} {scheme:18s} validation cross-entropy {run['validation_cross_entropy']:.4f} "
                  f"({run['seconds']} s)", flush=True)
    schemes = list(config.schemes)
    summary = {}
    for scheme in schemes:
        ce = {r["seed"]: r["validation_cross_entropy"] for r in runs if r["scheme"] == scheme}
        summary[scheme] = {"validation_cross_entropy": interval([ce[s] for s in args.seeds])}
        if "bf16" in schemes and scheme != "bf16":
            base = {r["seed"]: r["validation_cross_entropy"] for r in runs if r["scheme"] == "bf16"}
            summary[scheme]["excess_over_bf16"] = interval([ce[s] - base[s] for s in args.seeds])
    for scheme, row in summary.items():
        excess = row.get("excess_over_bf16")
        print(f"{scheme:18s} {row['validation_cross_entropy']['mean']:.4f} +- {row['validation_cross_entropy']['ci95']:.4f}"
              + (f"  excess over bf16 {excess['mean']:+.4f} +- {excess['ci95']:.4f}" if excess else ""))
    meta["load_average_after"] = load_average()
    result = {"meta": meta, "config": dataclasses.asdict(config) | {"seed": args.seeds}, "schemes": mx_training.SCHEMES,
              "summary": summary, "clipping_bias": mx_training.clipping_bias(), "runs": runs}
    atomic_write(args.output, json.dumps(result, indent=2) + "\n")
    plot(runs, schemes, args.output.with_suffix(".png"))
    print(f"wrote {args.output} and {args.output.with_suffix('.png')}")


if __name__ == "__main__":
    main()
