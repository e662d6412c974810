"""CGMMD against an MSE regressor and a conditional GAN on the same generator network and budget.

For each task and method: the learning rate is chosen on the validation split (held-out
nearest-neighbour conditional MMD, training seed = the first seed), then the chosen
configuration is trained with every seed and scored once on the test split
(``cgmmd.evaluate``: conditional MMD, W1 against the true conditional, mode coverage and
conditional-std error for synthetic tasks, PSNR and sample diversity for digits, and
sampling latency).

    python benchmarks/cgmmd.py --seeds 0 1 2 -o benchmarks/results/cgmmd.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import torch
from seed_stats import interval

from edgekit.models import cgmmd, cgmmd_data, registry
from edgekit.utils.files import atomic_write
from edgekit.utils.provenance import load_average, provenance, require_clean_tree

PANEL_METRIC = {"bimodal": "w1", "heteroscedastic": "w1", "ring": "w1", "denoise": "psnr", "superres": "psnr"}


def run_task(task: str, methods, seeds, lrs, overrides, log) -> list[dict]:
    out = []
    for method in methods:
        def config(lr, seed, method=method):
            return registry.make_config("cgmmd", {**overrides, "task": task, "method": method, "lr": lr,
                                                  "seed": seed})

        tuning = {}
        for lr in lrs:
            cfg = config(lr, seeds[0])
            tuning[lr] = cgmmd.conditional_mmd(registry.train("cgmmd", cfg).model, cfg, "val")
        best = min(lrs, key=lambda lr: tuning[lr])
        runs = []
        for seed in seeds:
            cfg = config(best, seed)
            trained = registry.train("cgmmd", cfg)
            runs.append({"seed": seed, "train_seconds": trained.train_seconds, **cgmmd.evaluate(trained.model, cfg)})
        metrics = [k for k in runs[0] if k not in ("seed", "train_seconds")]
        row = {"task": task, "method": method, "validation_cond_mmd": tuning, "lr": best, "runs": runs,
               **{k: interval([r[k] for r in runs]) for k in metrics}}
        log(f"{task} {method}: lr {best} (val {tuning}); " + ", ".join(
            f"{k} {row[k]['mean']:.4g}+-{row[k]['ci95']:.2g}" for k in metrics))
        out.append(row)
    return out


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(dict.fromkeys(r["task"] for r in rows))
    fig, axes = plt.subplots(2, len(tasks), figsize=(3.4 * len(tasks), 6.5), squeeze=False)
    for col, task in enumerate(tasks):
        group = [r for r in rows if r["task"] == task]
        for ax, metric in zip(axes[:, col], ("cond_mmd", PANEL_METRIC[task])):
            ax.bar([r["method"] for r in group], [r[metric]["mean"] for r in group],
                   yerr=[r[metric]["ci95"] for r in group], capsize=4, color=["C0", "C1", "C2"][:len(group)])
            ax.set_title(f"{task}: {metric}")
            ax.grid(axis="y", alpha=0.3)
    fig.suptitle("test split, mean and 95% CI over seeds (cond_mmd, w1: lower is better; psnr: higher)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--tasks", nargs="+", default=list(cgmmd_data.TASKS))
    parser.add_argument("--methods", nargs="+", default=list(cgmmd.METHODS))
    parser.add_argument("--lrs", nargs="+", type=float, default=[1e-3, 3e-3])
    parser.add_argument("--config", nargs="*", default=["steps=600"], metavar="KEY=VALUE",
                        help="cgmmd config overrides shared by every run")
    parser.add_argument("--allow-dirty", action="store_true")
    parser.add_argument("-o", "--output", type=Path, default=Path("benchmarks/results/cgmmd.json"))
    args = parser.parse_args()
    require_clean_tree(args.allow_dirty)
    torch.set_num_threads(1)
    made_with = provenance(seed=args.seeds[0], threads=1)  # at the start: the code the run began with
    overrides = registry.parse_config_items(args.config)
    rows = [row for task in args.tasks for row in run_task(task, args.methods, args.seeds, args.lrs, overrides, print)]
    base = dataclasses.asdict(registry.make_config("cgmmd", overrides))
    for key in ("task", "method", "lr", "seed"):
        base.pop(key)
    made_with["load_average_after"] = load_average()
    result = {"provenance": made_with, "command": " ".join(sys.argv), "seeds": args.seeds, "lrs": args.lrs,
              "config": base, "rows": rows}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(args.output, json.dumps(result, indent=2) + "\n")
    plot(rows, args.output.with_suffix(".png"))
    print(f"wrote {args.output} and {args.output.with_suffix('.png')}")


if __name__ == "__main__":
    main()
