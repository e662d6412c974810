"""OSSD ablation: the base detector, each part alone and all together, per seed, on the same tiny CLIP.

For each seed: the tiny CLIP (32x32, the one PhaseAlign uses) is trained on base scenes (cached), the
base-class detector is trained and serves as the spatial-distillation teacher of the same seed, each
variant is trained on base scenes only, the quality weight ``alpha`` is chosen on validation novel scenes,
and the test scenes (novel and base) are scored once (``ossd.evaluate``: AP50). Seeds run in parallel
processes, one thread each.

    python benchmarks/ossd.py --seeds 0 1 2 -o benchmarks/results/ossd.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch
from seed_stats import interval

from edgekit.models import ossd, registry
from edgekit.utils.files import atomic_write
from edgekit.utils.provenance import load_average, provenance, require_clean_tree


def run_seed(seed: int, overrides: dict) -> dict:
    torch.set_num_threads(1)
    result = {"seed": seed}
    for variant in ossd.VARIANTS:  # "base" first: it is the teacher of "spatial" and "full"
        config = registry.make_config("ossd", {**overrides, "variant": variant, "seed": seed})
        trained = registry.train("ossd", config)
        metrics = ossd.evaluate(trained.model, config)
        result.update({f"{k}_{variant}": v for k, v in metrics.items()})
        result[f"train_seconds_{variant}"] = trained.train_seconds
        print(f"seed {seed} {variant}: novel AP50 {metrics['novel_ap50']:.3f} base AP50 {metrics['base_ap50']:.3f} "
              f"alpha {metrics['alpha']}", flush=True)
    for variant in list(ossd.VARIANTS)[1:]:  # paired by seed: the same CLIP, teacher and scenes
        result[f"novel_ap50_{variant}_minus_base"] = result[f"novel_ap50_{variant}"] - result["novel_ap50_base"]
    return result


def plot(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants = list(ossd.VARIANTS)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, metric in zip(axes, ("novel_ap50", "base_ap50")):
        rows = [summary[f"{metric}_{v}"] for v in variants]
        ax.bar(variants, [r["mean"] for r in rows], yerr=[r["ci95"] for r in rows], capsize=4,
               color=["C7", "C0", "C0", "C0", "C3"])
        ax.set_title(f"{metric} (test, 36-name vocabulary)")
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle("OSSD ablation on 64x64 shape scenes, mean and 95% CI over seeds (base = no part)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--config", nargs="*", default=[], metavar="KEY=VALUE", help="ossd config overrides")
    parser.add_argument("--jobs", type=int, default=3, help="seeds trained at once (one process, one thread each)")
    parser.add_argument("--allow-dirty", action="store_true")
    parser.add_argument("-o", "--output", type=Path, default=Path("benchmarks/results/ossd.json"))
    args = parser.parse_args()
    require_clean_tree(args.allow_dirty)
    made_with = provenance(seed=args.seeds[0], threads=1)  # at the start: the code and load the runs began
    overrides = registry.parse_config_items(args.config)
    registry.make_config("ossd", overrides)  # a bad override fails here, before any training
    with ProcessPoolExecutor(max(1, args.jobs)) as pool:
        runs = list(pool.map(run_seed, args.seeds, [overrides] * len(args.seeds)))
    summary = {k: interval([r[k] for r in runs]) for k in runs[0] if k != "seed"}
    config = registry.make_config("ossd", {**overrides, "seed": args.seeds[0]})
    made_with["load_average_after"] = load_average()
    result = {"provenance": made_with, "command": " ".join(sys.argv),
              "seeds": args.seeds, "config": dataclasses.asdict(config), "variants": ossd.VARIANTS,
              "summary": summary, "runs": runs}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(args.output, json.dumps(result, indent=2) + "\n")
    plot(summary, args.output.with_suffix(".png"))
    print(f"wrote {args.output} and {args.output.with_suffix('.png')}")


if __name__ == "__main__":
    main()
