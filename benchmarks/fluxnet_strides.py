"""FluxNet against the flux-rate surrogate at model strides of 1 to 16 solver-sampled steps, on four PDEs, per seed.

One model step is ``stride`` of the problem's surrogate steps (``FluxNetConfig.stride``); a
FluxNet cell sends up to ``reach * stride`` cells (``REACH`` per problem), the flux-rate
surrogate keeps its 4 Euler substeps of face fluxes. At every stride both train on the same
trajectories (the stride-1 ones, every ``stride``-th state, ``horizon`` solver-sampled steps
long) with the same budget (optimizer steps, batch, unroll). The learning rate of each
(problem, surrogate, stride) is chosen among ``--lrs`` on validation rollouts with the first
seed; then every seed trains with it and the test rollouts, over the same ``horizon``, are
scored once: rollout relative L2, mass drift, share of values out of bounds. Persistence
(never moving) gives the scale; a surrogate "breaks down" at the first stride where its mean
rollout error is no better than persistence's, or not finite.

    python benchmarks/fluxnet_strides.py --seeds 0 1 2 -o benchmarks/results/fluxnet_strides.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch
from seed_stats import interval

from edgekit.models import fluxnet, pde
from edgekit.models.registry import train
from edgekit.utils.output import atomic_write, json_safe
from edgekit.utils.provenance import load_average, provenance, require_clean_tree

ARCHS = ("fluxnet", "flux_rate")  # FluxNet with its default L head; the flux-rate surrogate of fluxnet_study
SMALL = {1: {"cells": 64, "hidden": 32, "layers": 3, "kernel": 5},
         2: {"cells": 24, "hidden": 32, "layers": 2, "kernel": 3}}
COMMON = {"unroll": 2, "batch": 8, "train_trajectories": 16, "test_trajectories": 4, "substeps": 4}
# cells a FluxNet cell sends per solver-sampled step: the fastest signal times the problem's step (traffic 1 x 3,
# convection 1 x 2); in 2D the 24-cell grid holds only 1 x 16 at stride 16 (shallow-water waves cross ~1.9)
REACH = {"traffic": 3, "convection_diffusion": 2, "shallow_water": 1, "cahn_hilliard": 1}
METRICS = ("rollout_rel_l2", "rel_l2_final", "mass_drift", "out_of_bounds", "max_bound_excess")


def make_config(name: str, arch: str, stride: int, args, lr: float, seed: int) -> fluxnet.FluxNetConfig:
    steps = args.horizon // stride
    return fluxnet.FluxNetConfig(pde=name, arch=arch, stride=stride, reach=REACH[name], trajectory_steps=steps,
                                 rollout_steps=steps, steps=args.steps, lr=lr, seed=seed,
                                 **SMALL[pde.get_problem(name).dims], **COMMON)


def scored(model, config, split: str) -> dict:
    metrics = fluxnet.evaluate(model, config, split)
    metrics["out_of_bounds"] = metrics["lower_violations"] + metrics["upper_violations"]
    return metrics


def error_of(metrics: dict) -> float:
    value = metrics["rollout_rel_l2"]
    return value if math.isfinite(value) else math.inf


def persistence(config) -> dict:
    """The rollout error of never moving, on the test trajectories."""
    reference = torch.from_numpy(fluxnet.held_out_data(config).copy())
    problem = config.problem
    metrics = fluxnet.rollout_metrics(reference[:, :1].expand_as(reference), reference, None, True,
                                      problem.lower, problem.upper)
    return {k: metrics[k] for k in ("rollout_rel_l2", "rel_l2_final")}


def breakdown(summary: list[dict], still: list[dict], name: str, arch: str) -> int | None:
    """The first stride whose mean test rollout error is not finite or no better than persistence's."""
    scale = {r["stride"]: r["rollout_rel_l2"] for r in still if r["pde"] == name}
    for row in summary:
        if row["pde"] == name and row["arch"] == arch:
            mean = row["rollout_rel_l2"]["mean"]
            if not math.isfinite(mean) or mean >= scale[row["stride"]]:
                return row["stride"]
    return None


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r["pde"] for r in result["summary"]))
    rows = (("rollout_rel_l2", "test rollout rel. L2"), ("mass_drift", "mass drift (relative)"),
            ("out_of_bounds", "share of values out of bounds"))
    fig, axes = plt.subplots(len(rows), len(names), figsize=(3.6 * len(names), 8.4), squeeze=False)
    for j, name in enumerate(names):
        for i, (key, label) in enumerate(rows):
            ax = axes[i][j]
            for arch, colour in zip(ARCHS, ("C0", "C3")):
                mine = [r for r in result["summary"] if r["pde"] == name and r["arch"] == arch]
                means = [r[key]["mean"] if math.isfinite(r[key]["mean"]) else math.nan for r in mine]
                ax.errorbar([r["stride"] for r in mine], means, yerr=[r[key]["ci95"] for r in mine], capsize=3,
                            marker="o", color=colour, label="FluxNet (L)" if arch == "fluxnet" else "flux rate")
            if key == "rollout_rel_l2":
                still = [r for r in result["persistence"] if r["pde"] == name]
                ax.plot([r["stride"] for r in still], [r["rollout_rel_l2"] for r in still], "k--", label="persistence")
                ax.set_yscale("log")
                ax.set_title(name)
            else:  # exact zeros are common: a linear stretch near 0, nothing below it
                ax.set_yscale("symlog", linthresh=1e-8 if key == "mass_drift" else 1e-4)
                ax.set_ylim(bottom=0)
            ax.set_xscale("log", base=2)
            ax.set_xticks(result["strides"], [str(s) for s in result["strides"]])
            ax.set_xlabel("stride")
            if j == 0:
                ax.set_ylabel(label)
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"FluxNet vs flux-rate surrogate against stride; mean and 95% CI over seeds "
                 f"{', '.join(map(str, result['seeds']))}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pdes", default=",".join(pde.PROBLEMS), help="comma-separated problems")
    parser.add_argument("--strides", default="1,2,4,8,16", help="comma-separated model strides")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=200, help="optimizer steps, every surrogate and stride")
    parser.add_argument("--lrs", default="1e-3,3e-3", help="learning rates tried on the validation split")
    parser.add_argument("--horizon", type=int, default=64, help="solver-sampled steps per trajectory and rollout")
    parser.add_argument("--allow-dirty", action="store_true")
    parser.add_argument("-o", "--output", type=Path, default=Path("benchmarks/results/fluxnet_strides.json"))
    args = parser.parse_args()
    names = args.pdes.split(",")
    for name in names:
        pde.get_problem(name)
    strides = [int(s) for s in args.strides.split(",")]
    lrs = [float(x) for x in args.lrs.split(",")]
    if any(s < 1 or args.horizon % s for s in strides):
        parser.error(f"--strides must be positive divisors of --horizon {args.horizon}, got {args.strides}")
    require_clean_tree(args.allow_dirty)
    meta = provenance(seed=args.seeds[0], threads=1)  # now: the tree this run imported
    torch.set_num_threads(1)
    began = time.perf_counter()

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - began:7.1f} s] {message}", flush=True)

    selection, runs, summary, still = [], [], [], []
    for name in names:
        for stride in strides:
            still.append({"pde": name, "stride": stride,
                          **persistence(make_config(name, "fluxnet", stride, args, lrs[0], args.seeds[0]))})
            for arch in ARCHS:
                # the learning rate on validation rollouts, first seed; its model is scored on test with the rest
                tried = {}
                for lr in lrs:
                    config = make_config(name, arch, stride, args, lr, args.seeds[0])
                    trained = train("fluxnet", config, cache_dir=False)
                    tried[lr] = (trained, scored(trained.model, config, "validation"))
                lr = min(lrs, key=lambda x: error_of(tried[x][1]))
                selection.append({"pde": name, "arch": arch, "stride": stride, "lr": lr,
                                  "validation_rollout_rel_l2": {str(x): tried[x][1]["rollout_rel_l2"] for x in lrs}})
                mine = []
                for seed in args.seeds:
                    config = make_config(name, arch, stride, args, lr, seed)
                    trained = tried[lr][0] if seed == args.seeds[0] else train("fluxnet", config, cache_dir=False)
                    mine.append({"pde": name, "arch": arch, "stride": stride, "seed": seed, "lr": lr,
                                 "train_seconds": trained.train_seconds, **scored(trained.model, config, "test")})
                runs += mine
                summary.append({"pde": name, "arch": arch, "stride": stride, "lr": lr,
                                **{k: interval([r[k] for r in mine]) for k in (*METRICS, "train_seconds")}})
                row = summary[-1]
                log(f"{name} stride {stride} {arch} lr {lr:g}: test rollout rel L2 {row['rollout_rel_l2']['mean']:.4g}"
                    f" +- {row['rollout_rel_l2']['ci95']:.2g} (persistence {still[-1]['rollout_rel_l2']:.4g}), "
                    f"drift {row['mass_drift']['mean']:.2g}, out of bounds {row['out_of_bounds']['mean']:.3g}")
    breaks = {name: {arch: breakdown(summary, still, name, arch) for arch in ARCHS} for name in names}
    meta["load_average_after"] = load_average()
    result = {"provenance": meta, "command": " ".join(["python", *sys.argv]),
              "seeds": args.seeds, "strides": strides, "horizon": args.horizon, "steps": args.steps, "lrs": lrs,
              "reach": {n: REACH[n] for n in names}, "small": SMALL, "common": COMMON,
              "configs": {n: asdict(make_config(n, "fluxnet", strides[0], args, lrs[0], args.seeds[0])) for n in names},
              "seconds": time.perf_counter() - began, "breakdown": breaks, "persistence": still,
              "selection": selection, "summary": summary, "runs": runs}
    atomic_write(args.output, json.dumps(json_safe(result), indent=2) + "\n")
    plot(result, args.output.with_suffix(".png"))
    log(f"breakdown strides (None: not up to {strides[-1]}): {breaks}")
    print(f"wrote {args.output} and {args.output.with_suffix('.png')}")


if __name__ == "__main__":
    main()
