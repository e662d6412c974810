"""RieSelect as the paper states it, its variants as ablations, against full upload and random and
top-k layers, over task orders and seeds (run by hand, with nice).

    OMP_NUM_THREADS=1 nice python benchmarks/fl_rieselect_study.py [--orders 3] [--seeds 0,1,2,3,4]
        [--tune-seed 100] [--budgets 0.25,0.05] [--jobs 2] [-o benchmarks/results/fl_rieselect_study.json]

The byte-level LM (LMConfig.tiny) learns three stdlib packages (email, asyncio, encodings) one
after another across 4 clients, 5 rounds of 10 local AdamW steps per task, in ``--orders``
cyclic orders of the three. Rows:

* ``full``: every layer every round, the standard protocol (budget 1);
* ``random``, ``topk``: each client's layers at random or by update norm while they fit the budget;
  ``random, coordinated`` and ``topk, coordinated``: the same, each client taking this round's
  share of the layers first (the coverage rule without RieSelect's knapsack), the baselines that
  ``+ coverage`` is to be measured against;
* ``rieselect (paper)``: the knapsack of utility against Fisher risk, each client on its own
  (overlap weight 1), the server's step certified to keep the model in the fixed safe basin
  ``P <= radius``;
* ``+ coverage``: the same, each client's knapsack valuing its share of the round (overlap 0);
* ``+ coverage, moving basin``: the step certified to raise ``P`` by at most ``growth`` per round
  (the default of ``edgekit fl run rieselect``).

Budgets are matched per round (``--budgets``: each selective client sends at most that fraction of
the full update's bytes, RieSelect's Fisher uploads included). Every row gets the same tuning
budget, six runs on ``--tune-seed`` in the first order at the first budget, scored by validation
loss: rows without a knob of their own choose the local AdamW learning rate from ``LRS``;
RieSelect's rows choose their basin's knob (radius or growth, ``KNOBS``) and the learning rate
from ``RIESELECT_LRS``. The seeds reported are scored on test data once (the held-out files'
second half, :func:`edgekit.jobs.fl.continual_lm_workload`). Reported per row: average final
test loss over tasks, forgetting, total uplink; per pair, RieSelect less the baseline over the
(order, seed) pairs with a 95% t-interval and the paired t-test's p. For the fixed basin, the
diagnosis: the fraction of server steps below 0.05, the penalty ``P`` against the radius, and
each earlier task's penalty (the loss increase the quadratic model predicts) against its
measured forgetting, and a sweep of the radius (``SWEEP_RADII``, at the LM's default learning
rate) on the tuning seed. Finished runs are kept in ``<output stem>_runs/`` and reused when their
job is the same.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from kept_runs import kept_path, kept_run
from seed_stats import interval, paired_difference

DEFAULT_LR = 3e-3  # the tiny LM's
# The tuning budget, six validation runs per row: a row without a knob of its own spends it on the
# learning rate, RieSelect's rows on their basin's knob (nats: the fixed basin's radius, the
# moving basin's growth per round) and three learning rates spanning the same range.
LRS = (7.5e-4, 1.1e-3, 1.5e-3, 2.1e-3, 3e-3, 6e-3)
RIESELECT_LRS = (1.5e-3, 3e-3, 6e-3)
KNOBS = {"fixed": ("radius", (0.3, 1.0)), "moving": ("growth", (0.03, 0.1))}
SWEEP_RADII = (0.03, 0.1, 0.3, 1.0)  # why a tight fixed basin stalls, at the default learning rate
PAPER = {"selection": "rieselect", "basin": "fixed", "overlap_weight": 1.0}
VARIANTS = {"rieselect (paper)": PAPER,
            "+ coverage": {**PAPER, "overlap_weight": 0.0},
            "+ coverage, moving basin": {"selection": "rieselect", "basin": "moving", "overlap_weight": 0.0}}
BASELINES = {"random": {"selection": "random"}, "topk": {"selection": "topk"},
             "random, coordinated": {"selection": "random", "coordinated": True},
             "topk, coordinated": {"selection": "topk", "coordinated": True}}
FULL = {"selection": "full"}
STALLED_STEP = 0.05


def candidates(settings: dict) -> list[dict]:
    """A row's tuning candidates (settings and ``lr``), as many for every row."""
    if settings["selection"] != "rieselect":
        return [{"lr": lr} for lr in LRS]
    knob, values = KNOBS[settings["basin"]]
    return [{knob: value, "lr": lr} for value in values for lr in RIESELECT_LRS]


def task_orders(tasks: tuple[str, ...], count: int) -> list[tuple[str, ...]]:
    """The first ``count`` cyclic rotations of ``tasks``: each task first once, last once."""
    if not 1 <= count <= len(tasks):
        raise ValueError(f"--orders must be between 1 and {len(tasks)}, got {count}")
    return [tuple(tasks[(i + k) % len(tasks)] for k in range(len(tasks))) for i in range(count)]


def one_run(job: dict, done_dir: str) -> dict:
    import torch

    from edgekit.federated.rieselect import ContinualSettings, run_continual
    from edgekit.jobs.fl import continual_lm_workload
    from edgekit.utils.files import atomic_write

    kept = kept_path(done_dir, job)
    if (saved := kept_run(kept, job)) is not None:
        return saved
    torch.set_num_threads(1)
    workload = dataclasses.replace(continual_lm_workload(job["settings"]["clients"], tuple(job["tasks"]),
                                                         seed=job["settings"]["seed"]), lr=job["lr"])
    _, _, summary = run_continual(ContinualSettings(**job["settings"]), workload)
    out = {"job": job, **summary}
    atomic_write(kept, json.dumps(out) + "\n")
    print(f"{job['row']} lr {job['lr']:g} budget {job['settings']['budget_fraction']} order {'>'.join(job['tasks'])} seed "
          f"{job['settings']['seed']}: validation {summary['average_loss']:.4f}, test {summary['test']['average_loss']:.4f}, "
          f"uplink {summary['uplink_bytes'] / 1e6:.2f} MB", flush=True)
    return out


def paired(mine: list[dict], theirs: list[dict]) -> dict:
    """RieSelect's test loss less the baseline's, over the same (order, seed) pairs."""
    key = lambda r: (tuple(r["job"]["tasks"]), r["job"]["settings"]["seed"])
    theirs = {key(r): r["test"]["average_loss"] for r in theirs}
    out = paired_difference([r["test"]["average_loss"] for r in mine], [theirs[key(r)] for r in mine])
    out["lower_on"] = out.pop("below")
    return out


def diagnosis(runs: list[dict], radius: float) -> dict:
    """Why a fixed basin stalls: how many steps it refused, where P ends against the radius, and
    whether the quadratic model's predicted loss increase of each earlier task matches its forgetting."""
    steps = [s for r in runs for s in r["steps"] if s is not None]
    predicted = [p for r in runs for p in r["penalty_by_task"][:-1]]  # the last task is never forgotten
    measured = [f for r in runs for f in r["test"]["forgetting_by_task"]]
    return {"radius": radius, "stalled_fraction": float(np.mean([s < STALLED_STEP for s in steps])),
            "final_penalty": interval([sum(r["penalty_by_task"]) for r in runs]),
            "predicted_increase": interval(predicted), "measured_forgetting": interval(measured),
            "measured_over_predicted": float(np.mean(measured) / np.mean(predicted)) if np.mean(predicted) else None}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=3)
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--tune-seed", type=int, default=100)
    parser.add_argument("--budgets", default="0.25,0.05")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--rounds-per-task", type=int, default=5)
    parser.add_argument("--local-steps", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("-o", "--output", type=Path, default=Path("benchmarks/results/fl_rieselect_study.json"))
    parser.add_argument("--allow-dirty", action="store_true", help="run on a tree with uncommitted changes")
    args = parser.parse_args()
    from edgekit.federated.rieselect import ContinualSettings
    from edgekit.jobs.fl import CONTINUAL_TASKS
    from edgekit.utils.files import atomic_write
    from edgekit.utils.output import markdown_table
    from edgekit.utils.provenance import load_average, provenance, require_clean_tree

    require_clean_tree(args.allow_dirty)
    meta = provenance(0, threads=1)  # at the start: the code and load the runs began with
    seeds = [int(s) for s in args.seeds.split(",")]
    budgets = [float(b) for b in args.budgets.split(",")]
    if args.tune_seed in seeds:
        parser.error("--tune-seed must not be one of --seeds: choices are made on data the scores do not use")
    try:
        orders = task_orders(CONTINUAL_TASKS, args.orders)
        for budget in budgets:
            ContinualSettings(budget_fraction=budget)
    except ValueError as error:
        parser.error(str(error))
    done_dir = args.output.with_name(f"{args.output.stem}_runs")
    done_dir.mkdir(parents=True, exist_ok=True)
    base = {"clients": args.clients, "rounds_per_task": args.rounds_per_task, "local_steps": args.local_steps}

    def job(row, settings, order, seed, budget):
        settings = dict(settings)
        lr = settings.pop("lr")
        budget = 1.0 if settings["selection"] == "full" else budget
        return {"row": row, "tasks": list(order), "lr": lr,
                "settings": {**base, **settings, "budget_fraction": budget, "seed": seed}}

    row_settings = {"full": FULL, **BASELINES, **VARIANTS}

    with ProcessPoolExecutor(args.jobs) as pool:
        def run(jobs):
            return list(pool.map(one_run, jobs, [str(done_dir)] * len(jobs)))

        # choices on validation: the tune seed, the first order, the first budget
        tuning = run([job(row, {**settings, **candidate}, orders[0], args.tune_seed, budgets[0])
                      for row, settings in row_settings.items() for candidate in candidates(settings)])
        chosen = {}
        for row, settings in row_settings.items():
            best = min((t for t in tuning if t["job"]["row"] == row), key=lambda t: t["average_loss"])
            chosen[row] = {k: (best["job"] if k == "lr" else best["job"]["settings"])[k]
                           for k in candidates(settings)[0]}
        print("chosen on validation:", chosen, flush=True)
        sweep = run([job(row, {**variant, "radius": radius, "lr": DEFAULT_LR}, orders[0], args.tune_seed, budgets[0])
                     for row, variant in VARIANTS.items() if variant["basin"] == "fixed" for radius in SWEEP_RADII])

        rows = [("full", {**FULL, **chosen["full"]}, 1.0)]
        for budget in budgets:
            rows += [(row, {**settings, **chosen[row]}, budget) for row, settings in {**BASELINES, **VARIANTS}.items()]
        runs = run([job(row, settings, order, seed, budget)
                    for row, settings, budget in rows for order in orders for seed in seeds])

    def of(row, budget):
        return [r for r in runs if r["job"]["row"] == row and r["job"]["settings"]["budget_fraction"] == budget]

    full = of("full", 1.0)
    table, comparisons, diagnoses = [], [], []
    for row, settings, budget in rows:
        mine = of(row, budget)
        table.append({"row": row, "budget": budget, "settings": settings,
                      "test_loss": interval([r["test"]["average_loss"] for r in mine]),
                      "forgetting": interval([r["test"]["forgetting"] for r in mine]),
                      "uplink_mb": float(np.mean([r["uplink_bytes"] for r in mine])) / 1e6,
                      "uplink_vs_full": float(np.mean([r["uplink_bytes"] for r in full]) / np.mean(
                          [r["uplink_bytes"] for r in mine])),
                      "layers_covered": float(np.mean([r["layers_covered"] for r in mine]))})
        if settings["selection"] == "rieselect":
            for other in ("full", *BASELINES, *(v for v in VARIANTS if v != row)):
                theirs = full if other == "full" else of(other, budget)
                comparisons.append({"row": row, "budget": budget, "against": other, **paired(mine, theirs)})
            if settings["basin"] == "fixed":
                diagnoses.append({"row": row, "budget": budget, **diagnosis(mine, settings["radius"])})
    fixed_radii = [{"row": t["job"]["row"], "radius": t["job"]["settings"]["radius"], "lr": t["job"]["lr"],
                    **diagnosis([t], t["job"]["settings"]["radius"]), "validation_loss": t["average_loss"]}
                   for t in sweep]

    print(markdown_table([{"row": t["row"], "budget": t["budget"],
                           "test loss": f"{t['test_loss']['mean']:.4f} ± {t['test_loss']['ci95']:.4f}",
                           "forgetting": f"{t['forgetting']['mean']:.3f}", "uplink MB": f"{t['uplink_mb']:.2f}",
                           "x less uplink": f"{t['uplink_vs_full']:.1f}"} for t in table]))
    print(markdown_table([{k: (f"{v:.4f}" if isinstance(v, float) else v) for k, v in c.items()
                           if k not in ("values", "std")} for c in comparisons]))
    meta["load_average_after"] = load_average()
    protocol = {"orders": orders, "seeds": seeds, "tune_seed": args.tune_seed, "budgets": budgets, **base,
                "lrs": LRS, "rieselect_lrs": RIESELECT_LRS, "knobs": KNOBS, "sweep_radii": SWEEP_RADII,
                "chosen": chosen, "stalled_step": STALLED_STEP}
    atomic_write(args.output, json.dumps({"meta": meta, "protocol": protocol, "table": table, "comparisons": comparisons,
                                          "diagnosis": diagnoses, "radius_sweep": fixed_radii, "tuning": tuning,
                                          "runs": runs}, indent=1) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
