"""OSSD ablation: the base detector, each part alone and all together, per seed, on the same tiny CLIP.

For each seed: the tiny CLIP (32x32, the one PhaseAlign uses) is trained on base scenes (cached), the
base-class detector is trained and serves as the spatial-distillation teacher of the same seed, each
variant is trained on base scenes only, the quality weight ``alpha`` is chosen on validation novel scenes,
and so is the semantic distillation weight of the variants that distil (each weight of
``--semantic-weights`` trained, the best validation novel AP50 kept); the test scenes (novel and base)
are scored once (``ossd.evaluate``: AP50). Seeds run in parallel processes, one thread each.

    python benchmarks/ossd.py [--seeds 0 1 2] [--semantic-weights 0.1,0.3,1.0] [--config KEY=VALUE ...]
        [-o benchmarks/results/ossd.json]
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


def run_seed(seed: int, overrides: dict, semantic_weights: list[float]) -> dict:
    torch.set_num_threads(1)
    result = {"seed": seed, "validation_by_semantic_weight": {}}
    for variant, (semantic, _, _) in ossd.VARIANTS.items():  # "base" first: the teacher of "spatial" and "full"
        tried = {}
        for weight in semantic_weights if semantic else [None]:
            extra = {} if weight is None else {"semantic_weight": weight}
            config = registry.make_config("ossd", {**overrides, **extra, "variant": variant, "seed": seed})
            trained = registry.train("ossd", config)
            tried[weight] = ossd.evaluate(trained.model, config), trained.train_seconds
        weight = max(tried, key=lambda w: tried[w][0]["validation_novel_ap50"])  # the first of equals
        metrics, seconds = tried[weight]
        result.update({f"{k}_{variant}": v for k, v in metrics.items()})
        result[f"train_seconds_{variant}"] = seconds
        if semantic:
            result[f"semantic_weight_{variant}"] = weight
            result["validation_by_semantic_weight"][variant] = {
                str(w): m["validation_novel_ap50"] for w, (m, _) in tried.items()}
        print(f"seed {seed} {variant}: novel AP50 {metrics['novel_ap50']:.3f} base AP50 {metrics['base_ap50']:.3f} "
              f"alpha {metrics['alpha']}" + (f" semantic weight {weight}" if semantic else ""), flush=True)
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
    parser.add_argument("--semantic-weights", default="0.1,0.3,1.0",
                        help="semantic distillation weights tried for the variants that distil, one chosen per "
                             "seed on validation novel AP50")
    parser.add_argument("--allow-dirty", action="store_true")
    parser.add_argument("-o", "--output", type=Path, default=Path("benchmarks/results/ossd.json"))
    args = parser.parse_args()
    require_clean_tree(args.allow_dirty)
    made_with = provenance(seed=args.seeds[0], threads=1)  # at the start: the code and load the runs began
    overrides = registry.parse_config_items(args.config)
    if "semantic_weight" in overrides:
        parser.error("semantic_weight is chosen per seed from --semantic-weights; set that instead of --config")
    try:
        semantic_weights = [float(w) for w in args.semantic_weights.split(",")]
        for weight in semantic_weights:  # a bad override or weight fails here, before any training
            registry.make_config("ossd", {**overrides, "semantic_weight": weight})
    except ValueError as error:
        parser.error(f"--semantic-weights or --config: {error}")
    with ProcessPoolExecutor(max(1, args.jobs)) as pool:
        runs = list(pool.map(run_seed, args.seeds, [overrides] * len(args.seeds),
                             [semantic_weights] * len(args.seeds)))
    summary = {k: interval([r[k] for r in runs]) for k, v in runs[0].items() if k != "seed" and not isinstance(v, dict)}
    config = registry.make_config("ossd", {**overrides, "seed": args.seeds[0]})
    made_with["load_average_after"] = load_average()
    result = {"provenance": made_with, "command": " ".join(sys.argv),
              "seeds": args.seeds, "semantic_weights": semantic_weights, "config": dataclasses.asdict(config), "variants": ossd.VARIANTS,
              "summary": summary, "runs": runs}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(args.output, json.dumps(result, indent=2) + "\n")
    plot(summary, args.output.with_suffix(".png"))
    print(f"wrote {args.output} and {args.output.with_suffix('.png')}")


if __name__ == "__main__":
    main()
