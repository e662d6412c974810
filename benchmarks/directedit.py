"""DirectEdit against plain Euler inversion, null-text optimisation and ablations on the same rectified-flow transformer.

For each seed: the network is trained on one-object base scenes (cached), each method's
classifier-free guidance scale (and DirectEdit's value-injection depth) is chosen on validation
scenes, and test scenes are edited once (recolour the object): background PSNR outside the mask,
edit success by a colour classifier trained here, forward evaluations (inversion + optimisation +
edit path) and backward passes; the reconstruction error of each inversion with float32, MXFP8
and MXFP4 weights, and under guidance. Paired per-seed differences of edit success against
DirectEdit are summarised beside the per-method figures.

    python benchmarks/directedit.py --seeds 0 1 2 3 4 -o benchmarks/results/directedit.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import torch
from seed_stats import interval

from edgekit.models import directedit, registry
from edgekit.utils.files import atomic_write
from edgekit.utils.provenance import load_average, provenance, require_clean_tree


def plot(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = list(directedit.METHODS)
    fig, axes = plt.subplots(1, 4, figsize=(18, 4))
    for ax, metric in zip(axes[:2], ("edit_success", "bg_psnr")):
        rows = [summary[f"{metric}_{m}"] for m in methods]
        ax.bar(methods, [r["mean"] for r in rows], yerr=[r["ci95"] for r in rows], capsize=4)
        ax.set_title(metric)
        ax.tick_params(axis="x", rotation=25)
        ax.grid(axis="y", alpha=0.3)
    fmts = ("float", "mxfp8", "mxfp4")
    for k, method in enumerate(("directedit", "plain")):
        vals = [max(summary[f"recon_err_{method}_{f}"]["mean"], 1e-9) for f in fmts]
        axes[2].bar([i + 0.4 * k for i in range(3)], vals, width=0.4, label=method)
    axes[2].set_xticks([i + 0.2 for i in range(3)], fmts)
    axes[2].set_yscale("log")
    axes[2].set_title("max reconstruction error, no guidance")
    axes[2].legend()
    guided = ("plain", "directedit", "nulltext")
    axes[3].bar(guided, [summary[f"recon_err_{m}_guided"]["mean"] for m in guided],
                yerr=[summary[f"recon_err_{m}_guided"]["ci95"] for m in guided], capsize=4)
    axes[3].set_title("max reconstruction error under guidance")
    fig.suptitle("Editing by inversion on a small rectified-flow transformer, mean and 95% CI over seeds")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--config", nargs="*", default=[], metavar="KEY=VALUE", help="directedit config overrides")
    parser.add_argument("--allow-dirty", action="store_true")
    parser.add_argument("-o", "--output", type=Path, default=Path("benchmarks/results/directedit.json"))
    args = parser.parse_args()
    require_clean_tree(args.allow_dirty)
    torch.set_num_threads(1)
    made_with = provenance(seed=args.seeds[0], threads=1)  # at the start: the code the run began with
    overrides = registry.parse_config_items(args.config)
    runs = []
    for seed in args.seeds:
        config = registry.make_config("directedit", {**overrides, "seed": seed})
        trained = registry.train("directedit", config)
        result = {"seed": seed, "train_seconds": trained.train_seconds, **directedit.evaluate(trained.model, config)}
        print(f"seed {seed}: " + ", ".join(f"{k} {v:.4g}" for k, v in result.items() if k != "seed"), flush=True)
        runs.append(result)
    summary = {k: interval([r[k] for r in runs]) for k in runs[0] if k != "seed"}
    for method in directedit.METHODS:  # paired by seed: the same network, judge and scenes
        if method != "directedit":
            summary[f"edit_success_directedit_minus_{method}"] = interval(
                [r["edit_success_directedit"] - r[f"edit_success_{method}"] for r in runs])
    made_with["load_average_after"] = load_average()
    result = {"provenance": made_with, "command": " ".join(sys.argv), "seeds": args.seeds,
              "config": dataclasses.asdict(config), "methods": directedit.METHODS, "guidances": directedit.GUIDANCES,
              "summary": summary, "runs": runs}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(args.output, json.dumps(result, indent=2) + "\n")
    plot(summary, args.output.with_suffix(".png"))
    print(f"wrote {args.output} and {args.output.with_suffix('.png')}")


if __name__ == "__main__":
    main()
