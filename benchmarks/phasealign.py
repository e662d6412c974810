"""PhaseAlign against the MaskCLIP cosine baseline (and ablations) on the same tiny CLIP, per seed.

For each seed: the tiny CLIP is trained on base scenes (cached), every method's knobs are chosen
on validation base scenes, and the held-out-combination test scenes are scored once
(``phasealign.evaluate``: mIoU and boundary F). The tiny CLIP's zero-shot accuracy is recorded too.

    python benchmarks/phasealign.py --seeds 0 1 2 -o benchmarks/results/phasealign.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import torch
from seed_stats import interval

from edgekit.models import phasealign, registry, tiny_clip
from edgekit.models.studies import get_study
from edgekit.utils.files import atomic_write
from edgekit.utils.provenance import load_average, provenance, require_clean_tree


def plot(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = list(phasealign.METHODS)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, metric in zip(axes, ("miou", "boundary_f")):
        rows = [summary[f"{metric}_{m}"] for m in methods]
        ax.bar(methods, [r["mean"] for r in rows], yerr=[r["ci95"] for r in rows], capsize=4,
               color=["C0", "C0", "C1", "C1", "C3"])
        ax.set_title(f"{metric} on held-out colour-shape scenes")
        ax.tick_params(axis="x", rotation=25)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle("tiny CLIP, mean and 95% CI over seeds (cosine = MaskCLIP baseline)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--config", nargs="*", default=[], metavar="KEY=VALUE", help="phasealign config overrides")
    parser.add_argument("--allow-dirty", action="store_true")
    parser.add_argument("-o", "--output", type=Path, default=Path("benchmarks/results/phasealign.json"))
    args = parser.parse_args()
    require_clean_tree(args.allow_dirty)
    torch.set_num_threads(1)
    made_with = provenance(seed=args.seeds[0], threads=1)  # at the start: the code the run began with
    overrides = registry.parse_config_items(args.config)
    runs = []
    for seed in args.seeds:
        config = registry.make_config(get_study("phasealign"), {**overrides, "seed": seed})
        trained = registry.train("tiny_clip", config.clip_config())
        result = {"seed": seed, "clip_train_seconds": trained.train_seconds,
                  **tiny_clip.evaluate(trained.model, config.clip_config()),
                  **phasealign.evaluate(config, trained.model)}
        print(f"seed {seed}: " + ", ".join(f"{m} mIoU {result[f'miou_{m}']:.3f} bF {result[f'boundary_f_{m}']:.3f}"
                                           for m in phasealign.METHODS), flush=True)
        runs.append(result)
    summary = {k: interval([r[k] for r in runs]) for k in runs[0] if k != "seed"}
    made_with["load_average_after"] = load_average()
    result = {"provenance": made_with, "command": " ".join(sys.argv),
              "seeds": args.seeds, "config": dataclasses.asdict(config), "methods": phasealign.METHODS,
              "summary": summary, "runs": runs}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(args.output, json.dumps(result, indent=2) + "\n")
    plot(summary, args.output.with_suffix(".png"))
    print(f"wrote {args.output} and {args.output.with_suffix('.png')}")


if __name__ == "__main__":
    main()
