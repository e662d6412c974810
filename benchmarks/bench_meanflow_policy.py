"""One-step MeanFlow Policy on Meta-World: OMP's costs (training memory and time, success against
flow matching's step counts) over tasks and seeds, and compiled latency (run by hand).

    python benchmarks/bench_meanflow_policy.py [--tasks reach-v3 push-v3 drawer-open-v3] [--seeds 0 1 2 3 4]
        [--nfes 1 2 4 10] [--jobs 2] [--memory-batch 8192] [--memory-steps 5] [--rounds 20] [--threads 2]
        [--formats fp32 mxint8 mxfp4] [--memory-methods meanflow omp flow_matching] [--config KEY=VALUE ...]
        [-o benchmarks/results/meanflow_policy.json]

``--config`` overrides the policy config (MeanFlowPolicyConfig) of all three parts. No
hyperparameter is tuned: every method trains with the same config (the model's defaults),
so no choice is made on the held-out seeds that score it.

Part 1, training memory and step time of the two ways to get du/dt at the same batch and
network (the default config's MLP): ``meanflow`` (``torch.func.jvp``; backward runs through
the JVP's forward-mode graph) against ``omp`` (the DDE: two finite-difference forwards under
``no_grad``). Each variant trains ``--memory-steps`` steps in a fresh Python process, once
per seed, one after another with ``--threads`` threads; reported: the peak resident set size
of that process during training (Linux ``VmHWM``, reset through ``/proc/self/clear_refs``
once imports, demonstrations and model are loaded) minus its resident size at that moment,
the bytes autograd saved for backward in one step (the sizes of the tensors
``torch.autograd.graph.saved_tensors_hooks`` sees), and the mean wall time of a step after
the first. Flow matching is shown for reference.

Part 2, the method table: ``omp``, ``meanflow`` and ``flow_matching`` trained with the config
on each task and seed through ``edgekit.models.registry.train`` (the model cache: a second run
reuses the models and the demonstrations), ``--jobs`` at a time with one thread each,
evaluated on the held-out Meta-World seeds: success rate and action MSE at 1 network
evaluation, flow matching also with each Euler step count of ``--nfes``. The costs table
puts them together: per method and step count, success per task (mean and 95% t-interval
over seeds), training time, peak memory and step time; and OMP at 1 NFE less flow matching at
each step count, paired by task and seed.

Part 3, inference latency of the trained OMP policy (the first task's, first seed's) after
compile: for fp32, mxint8 and mxfp4 weights, ``edgekit bench`` on its checkpoint for the
``host`` target: the TVM build of edgekit's passes (time_evaluator), onnxruntime on the float
and quantized ONNX export, and torch eager, on the same input, interleaved rounds.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from seed_stats import interval, paired_difference

from edgekit.models.meanflow_policy import METHODS, MeanFlowPolicyConfig

FORMATS = ("fp32", "mxint8", "mxfp4")
MEMORY_METHODS = ("meanflow", "omp", "flow_matching")  # the first, the JVP, is what the others are compared with
MIB = 1024 * 1024


def process_memory(key: str) -> int:
    """Bytes of ``VmRSS`` (resident now) or ``VmHWM`` (peak resident) of this process."""
    return 1024 * int(re.search(rf"^{key}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.MULTILINE).group(1))


def memory_worker(base: MeanFlowPolicyConfig, method: str, batch: int, steps: int, threads: int) -> dict:
    """Train ``steps`` steps of ``method`` (``base`` otherwise) in this (fresh) process; its memory and time figures."""
    import numpy as np
    import torch

    from edgekit.models import meanflow_policy
    from edgekit.models.training import step_rng

    torch.set_num_threads(threads)
    config = dataclasses.replace(base, method=method, batch=batch)
    torch.manual_seed(config.seed)
    model = meanflow_policy.build(config)
    spec = meanflow_policy.train_spec(config)
    optimizer = spec.optimizer(model)
    saved = []  # bytes per step; functorch's dual tensors hide their storage, so sizes add up per saved tensor

    def pack(tensor):
        saved[-1] += tensor.nelement() * tensor.element_size()
        return tensor

    Path("/proc/self/clear_refs").write_text("5")  # Linux: reset the peak (VmHWM) to the resident size now
    before = process_memory("VmRSS")
    times = []
    for step in range(steps):
        saved.append(0)
        start = time.perf_counter()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            loss = spec.loss(model, step_rng(config.seed, step), step)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        times.append(time.perf_counter() - start)
    peak = process_memory("VmHWM")
    return {"method": method, "batch": batch, "steps": steps, "threads": threads,
            "peak_rss_increase_mib": (peak - before) / MIB, "saved_for_backward_mib": float(np.mean(saved)) / MIB,
            "step_ms": 1e3 * float(np.mean(times[1:] if steps > 1 else times))}


def memory_table(base: MeanFlowPolicyConfig, methods: list[str], seeds: list[int], batch: int, steps: int,
                 threads: int) -> list[dict]:
    rows = []
    for seed in seeds:
        config = json.dumps(dataclasses.asdict(dataclasses.replace(base, seed=seed)))
        mine = []
        for method in methods:
            command = [sys.executable, __file__, "--memory-worker", method, "--memory-batch", str(batch),
                       "--memory-steps", str(steps), "--threads", str(threads), "--memory-config", config]
            result = subprocess.run(command, check=False, capture_output=True, text=True)
            if result.returncode:
                raise RuntimeError(f"the memory run of {method} (seed {seed}) failed:\n{result.stderr[-3000:]}")
            mine.append({**json.loads(result.stdout.strip().splitlines()[-1]), "seed": seed})
            print(f"memory {method} seed {seed}: {mine[-1]}", flush=True)
        for row in mine:  # the first method, the JVP, is the reference of its seed
            row["rss_vs_jvp"] = row["peak_rss_increase_mib"] / mine[0]["peak_rss_increase_mib"]
            row["saved_vs_jvp"] = row["saved_for_backward_mib"] / mine[0]["saved_for_backward_mib"]
            row["step_vs_jvp"] = row["step_ms"] / mine[0]["step_ms"]
        rows += mine
    return rows


def method_run(config: MeanFlowPolicyConfig, nfes: tuple[int, ...]) -> list[dict]:
    """Train (or take from the cache) and evaluate one (task, method, seed); one row per step count."""
    import torch

    from edgekit.models.meanflow_policy import evaluate
    from edgekit.models.registry import train

    torch.set_num_threads(1)  # --jobs runs share the cores, one thread each
    steps = sorted(nfes) if config.method == "flow_matching" else [1]  # a mean-velocity policy acts in one step
    trained = train("meanflow_policy", config, progress=False, log=lambda *_: None)
    start = time.perf_counter()
    result = evaluate(trained.model, config, nfes=steps)
    seconds = time.perf_counter() - start
    rows = []
    for nfe in steps:
        suffix = "" if nfe == 1 else f"_{nfe}nfe"
        rows.append({"task": config.task, "method": config.method, "seed": config.seed, "NFE": nfe,
                     "success rate": result["success_rate" + suffix], "action MSE": result["action_mse" + suffix],
                     "mean episode steps": result["mean_episode_steps" + suffix],
                     "expert success rate": result["expert_success_rate"], "held-out seeds": config.eval_episodes,
                     "train s": trained.train_seconds, "eval s": seconds, "cached": trained.cached})
    print(f"{config.task} {config.method} seed {config.seed}: " + ", ".join(
        f"{r['NFE']} NFE success {r['success rate']:g}" for r in rows) + f" (train {trained.train_seconds:.0f} s)",
          flush=True)
    return rows


def method_table(base: MeanFlowPolicyConfig, tasks: list[str], seeds: list[int], nfes: tuple[int, ...],
                 jobs: int) -> list[dict]:
    configs = [dataclasses.replace(base, task=task, method=method, seed=seed)
               for seed in seeds for task in tasks for method in METHODS]
    with ProcessPoolExecutor(jobs) as pool:
        return [row for rows in pool.map(method_run, configs, [nfes] * len(configs)) for row in rows]


def costs_table(methods: list[dict], memory: list[dict], tasks: list[str]) -> tuple[list[dict], list[dict]]:
    """One row per (method, NFE): success per task and over tasks, training time, memory and step time
    (mean and 95% t-interval over seeds); and OMP at 1 NFE less every other row, paired by task and seed."""
    def runs(method, nfe):
        return sorted((r for r in methods if r["method"] == method and r["NFE"] == nfe),
                      key=lambda r: (r["task"], r["seed"]))

    variants = sorted({(r["method"], r["NFE"]) for r in methods}, key=lambda v: (METHODS.index(v[0]), v[1]))
    rows, gaps = [], []
    omp = runs("omp", 1)
    for method, nfe in variants:
        mine = runs(method, nfe)
        seeds = sorted({r["seed"] for r in mine})
        mean_over_tasks = [np.mean([r["success rate"] for r in mine if r["seed"] == s]) for s in seeds]
        spent = [r for r in memory if r["method"] == method]
        row = {"method": method, "NFE": nfe, "seeds": seeds,
               "success": {task: interval([r["success rate"] for r in mine if r["task"] == task]) for task in tasks},
               "success_mean_over_tasks": interval(mean_over_tasks),
               "train_s": interval([r["train s"] for r in mine])}
        for key in ("peak_rss_increase_mib", "step_ms", "rss_vs_jvp", "step_vs_jvp"):
            row[key] = interval([r[key] for r in spent]) if spent else None
        rows.append(row)
        if (method, nfe) != ("omp", 1) and omp:
            gaps.append({"method": method, "NFE": nfe,
                         **paired_difference([r["success rate"] for r in omp], [r["success rate"] for r in mine])})
    return rows, gaps


def latency_table(base: MeanFlowPolicyConfig, task: str, formats: list[str], rounds: int,
                  threads: int) -> tuple[list[dict], list[dict]]:
    from edgekit.jobs.bench import bench_model
    from edgekit.models.registry import train

    trained = train("meanflow_policy", dataclasses.replace(base, task=task, method="omp"), progress=True, log=print)
    rows, setups = [], []
    for fmt in formats:
        result = bench_model(str(trained.checkpoint), fmt, "host", repeat=rounds, threads=threads)
        for row in result["results"]:
            row["run"] = f"{fmt} plan"  # each plan is one interleaved bench run with its own float references
            row["max |diff|"] = next(s["max_abs_diff"] for s in result["samples"] if s["backend"] == row["backend"]
                                     and s["format"] == row["format"])
        rows += result["results"]
        setups += result["setup"]
    return rows, setups


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=["reach-v3", "push-v3", "drawer-open-v3"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4], help="training seeds")
    parser.add_argument("--nfes", nargs="+", type=int, default=[1, 2, 4, 10],
                        help="Euler step counts flow matching is evaluated with (1 among them)")
    parser.add_argument("--jobs", type=int, default=2, help="(task, method, seed) runs trained at once")
    parser.add_argument("--memory-batch", type=int, default=8192)
    parser.add_argument("--memory-steps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=20, help="latency rounds per format")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--memory-methods", nargs="+", choices=MEMORY_METHODS, default=list(MEMORY_METHODS),
                        help="methods of the memory table, meanflow (the JVP, the ratios' reference) among them")
    parser.add_argument("--formats", nargs="+", choices=FORMATS, default=list(FORMATS), help="latency weight formats")
    parser.add_argument("--config", nargs="*", default=[], metavar="KEY=VALUE",
                        help="meanflow_policy config overrides (not task or method: the tables set them)")
    parser.add_argument("--allow-dirty", action="store_true")
    parser.add_argument("--memory-worker", choices=METHODS, help=argparse.SUPPRESS)
    parser.add_argument("--memory-config", help=argparse.SUPPRESS)  # the worker's config, as JSON
    parser.add_argument("-o", "--output", type=Path, default=Path("benchmarks/results/meanflow_policy.json"))
    args = parser.parse_args()
    if args.memory_worker:  # the config comes parsed, so the worker imports no more than it measures with
        base = MeanFlowPolicyConfig(**json.loads(args.memory_config))
        print(json.dumps(memory_worker(base, args.memory_worker, args.memory_batch, args.memory_steps, args.threads)))
        return

    from edgekit.models import registry
    from edgekit.utils.provenance import load_average, provenance, require_clean_tree

    try:
        overrides = registry.parse_config_items(args.config)
        fixed = sorted({"task", "method"} & set(overrides))
        if fixed:
            raise ValueError(f"{', '.join(fixed)} is set by the tables (--tasks, and every method in turn)")
        config = registry.make_config("meanflow_policy", overrides)
    except ValueError as error:
        parser.error(f"--config: {error}")
    if any(seed < 0 for seed in args.seeds) or len(set(args.seeds)) != len(args.seeds):
        parser.error(f"--seeds must be distinct non-negative integers, got {args.seeds}")
    if 1 not in args.nfes or any(nfe < 1 for nfe in args.nfes):
        parser.error(f"--nfes must be positive step counts including 1, got {args.nfes}")
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    if MEMORY_METHODS[0] not in args.memory_methods:
        parser.error(f"--memory-methods must include {MEMORY_METHODS[0]} (the JVP, the reference of the ratios)")
    require_clean_tree(args.allow_dirty)

    from edgekit.jobs.bench import configure_tvm_threads

    configure_tvm_threads(args.threads)  # before TVM's pool starts
    import torch

    from edgekit.utils.output import atomic_write, json_safe, markdown_table

    torch.set_num_threads(args.threads)
    made_with = provenance(config.seed, threads=args.threads)  # at the start: the code the run began with
    memory = memory_table(config, [m for m in MEMORY_METHODS if m in args.memory_methods], args.seeds,
                          args.memory_batch, args.memory_steps, args.threads)
    methods = method_table(config, args.tasks, args.seeds, tuple(sorted(set(args.nfes))), args.jobs)
    costs, gaps = costs_table(methods, memory, args.tasks)
    latency, latency_setup = latency_table(dataclasses.replace(config, seed=args.seeds[0]), args.tasks[0],
                                           args.formats, args.rounds, args.threads)

    def pm(summary, digits=3):
        return "" if summary is None else f"{summary['mean']:.{digits}g} ± {summary['ci95']:.2g}"

    cost_rows = [{"method": r["method"], "NFE": r["NFE"], **{task: pm(r["success"][task]) for task in args.tasks},
                  "mean over tasks": pm(r["success_mean_over_tasks"]), "train s": pm(r["train_s"]),
                  "peak RSS MiB": pm(r["peak_rss_increase_mib"]), "step ms": pm(r["step_ms"])} for r in costs]
    gap_rows = [{"OMP (1 NFE) less": f"{g['method']} ({g['NFE']} NFE)", "success difference": pm(g),
                 "p": f"{g['p']:.2g}", "OMP lower on": f"{g['below']} of {g['pairs']}"} for g in gaps]
    text = "\n\n".join([
        (f"### OMP's costs: success over seeds {', '.join(map(str, args.seeds))} (mean ± 95% t-interval; "
         f"{config.eval_episodes} held-out episodes each), training time at batch {config.batch} "
         f"({config.steps} steps, 1 thread, {args.jobs} runs at once), peak memory and step time at batch "
         f"{args.memory_batch} ({args.threads} threads)"),
        markdown_table(cost_rows, ["method", "NFE", *args.tasks, "mean over tasks", "train s", "peak RSS MiB",
                                   "step ms"]),
        "### OMP at 1 NFE against every other row, paired by task and seed",
        markdown_table(gap_rows, ["OMP (1 NFE) less", "success difference", "p", "OMP lower on"]),
        (f"### Methods on Meta-World per seed (config: horizon {config.horizon}, execute {config.execute}, "
         f"MLP {config.depth}x{config.width}, {config.train_episodes} training demonstrations, {config.steps} steps, "
         f"{config.eval_episodes} held-out seeds)"),
        markdown_table(methods, ["task", "method", "seed", "NFE", "success rate", "action MSE", "mean episode steps",
                                 "expert success rate", "train s"]),
        f"### Training memory and step time, batch {args.memory_batch}, fresh process per variant and seed",
        markdown_table(memory, ["method", "seed", "batch", "peak_rss_increase_mib", "rss_vs_jvp",
                                "saved_for_backward_mib", "saved_vs_jvp", "step_ms", "step_vs_jvp"]),
        (f"### One-step OMP policy ({args.tasks[0]}, seed {args.seeds[0]}) after compile, batch 1, "
         f"{args.threads} threads, {args.rounds} rounds"),
        markdown_table(latency, ["run", "format", "backend", "bits/weight", "latency (ms)", "median (ms)",
                                 "x onnxruntime fp32", "max |diff|"]),
    ])
    print(text)
    meta = {**made_with, "command": " ".join(["python", *sys.argv]), "load_average_after":
            load_average(), "logical_cpus": os.cpu_count(), "jobs": args.jobs, "config": config.__dict__,
            "memory_measure": "peak RSS (VmHWM, reset before training) minus RSS before training, fresh process per variant; "
                              "bytes autograd saved for backward per step via saved_tensors_hooks",
            "latency_setup": latency_setup}
    result = {"meta": meta, "seeds": args.seeds, "tasks": args.tasks, "costs": costs, "omp_less": gaps,
              "methods": methods, "memory": memory, "latency": latency}
    atomic_write(args.output, json.dumps(json_safe(result), indent=2) + "\n")
    atomic_write(args.output.with_suffix(".md"), text + "\n")
    print(f"wrote {args.output} and {args.output.with_suffix('.md')}")


if __name__ == "__main__":
    main()
