"""DNAChunker's learned chunking against fixed k-mer and BPE tokenizations in the same network.

For each variant CHUNKING/ENCODER (default: dynamic, kmer and bpe with the convolutional
encoder, and dynamic with the bidirectional GRU; k-mer length and BPE vocabulary 4^k with
k = the dynamic chunker's target mean chunk length): the learning rate is chosen on
validation windows (masked-base accuracy, training seed = the first seed), then the chosen
configuration is trained with every seed and scored once on test windows
(``dnachunker.evaluate``: masked accuracy, chunk length inside motifs, repeats and
background, boundaries moved far from a SNP or a one-base insertion).

    python benchmarks/dnachunker.py --seeds 0 1 2 -o benchmarks/results/dnachunker.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import torch
from seed_stats import interval

from edgekit.models import dnachunker, registry
from edgekit.utils.files import atomic_write
from edgekit.utils.provenance import load_average, provenance, require_clean_tree

REGIONS = ("motif", "repeat", "background")


def run_variant(variant: str, seeds, lrs, overrides, log) -> dict:
    chunking, _, encoder = variant.partition("/")

    def config(lr, seed):
        return registry.make_config("dnachunker", {**overrides, "chunking": chunking, "encoder": encoder or "conv",
                                                   "lr": lr, "seed": seed})

    tuning = {}
    for lr in lrs:
        cfg = config(lr, seeds[0])
        tuning[lr] = dnachunker.masked_accuracy(registry.train("dnachunker", cfg).model, cfg, "val")
    best = max(lrs, key=lambda lr: tuning[lr])
    runs = []
    for seed in seeds:
        cfg = config(best, seed)
        trained = registry.train("dnachunker", cfg)
        runs.append({"seed": seed, "train_seconds": trained.train_seconds,
                     **dnachunker.evaluate(trained.model, cfg)})
    metrics = [k for k in runs[0] if k not in ("seed", "train_seconds")]
    row = {"variant": variant, "validation_masked_accuracy": tuning, "lr": best, "runs": runs,
           **{k: interval([r[k] for r in runs]) for k in metrics}}
    log(f"{variant}: lr {best} (val {tuning}); " + ", ".join(
        f"{k} {row[k]['mean']:.4g}+-{row[k]['ci95']:.2g}" for k in metrics))
    return row


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["variant"] for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    axes[0].bar(names, [r["masked_accuracy"]["mean"] for r in rows],
                yerr=[r["masked_accuracy"]["ci95"] for r in rows], capsize=4,
                color=[f"C{i}" for i in range(len(rows))])
    axes[0].set_ylim(0.25, None)
    axes[0].set_title("test masked-base accuracy")
    width = 0.8 / len(REGIONS)
    for i, region in enumerate(REGIONS):
        key = f"chunk_in_{region}"
        axes[1].bar([j + i * width for j in range(len(rows))], [r[key]["mean"] for r in rows], width,
                    yerr=[r[key]["ci95"] for r in rows], capsize=3, label=region)
    axes[1].set_xticks([j + width for j in range(len(rows))], names)
    axes[1].set_title("mean length of the chunk holding a base")
    axes[1].legend()
    for i, key in enumerate(("snp_far_moves", "insertion_far_moves")):
        axes[2].bar([j + i * 0.4 for j in range(len(rows))], [r[key]["mean"] for r in rows], 0.4,
                    yerr=[r[key]["ci95"] for r in rows], capsize=3, label=key.split("_")[0])
    axes[2].set_xticks([j + 0.2 for j in range(len(rows))], names)
    axes[2].set_title("boundaries moved > 8 bases from a variant, per window")
    axes[2].legend()
    for ax in axes:
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle("synthetic genome, test windows; mean and 95% CI over seeds")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--variants", nargs="+", default=["dynamic/conv", "kmer/conv", "bpe/conv", "dynamic/gru"],
                        metavar="CHUNKING/ENCODER")
    parser.add_argument("--lrs", nargs="+", type=float, default=[1e-3, 3e-3])
    parser.add_argument("--config", nargs="*", default=[], metavar="KEY=VALUE",
                        help="dnachunker config overrides shared by every run")
    parser.add_argument("--allow-dirty", action="store_true")
    parser.add_argument("-o", "--output", type=Path, default=Path("benchmarks/results/dnachunker.json"))
    args = parser.parse_args()
    require_clean_tree(args.allow_dirty)
    torch.set_num_threads(1)
    made_with = provenance(seed=args.seeds[0], threads=1)  # at the start: the code the run began with
    overrides = registry.parse_config_items(args.config)
    rows = [run_variant(v, args.seeds, args.lrs, overrides, print) for v in args.variants]
    base = dataclasses.asdict(registry.make_config("dnachunker", overrides))
    for key in ("chunking", "encoder", "lr", "seed"):
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
