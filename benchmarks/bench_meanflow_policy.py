"""One-step MeanFlow Policy on Meta-World: training memory, the method table, compiled latency (run by hand).

    python benchmarks/bench_meanflow_policy.py [--tasks reach-v3 push-v3 drawer-open-v3]
        [--memory-batch 8192] [--memory-steps 5] [--rounds 20] [--threads 2] [--formats fp32 mxint8 mxfp4]
        [--memory-methods meanflow omp flow_matching] [--config KEY=VALUE ...]
        [-o benchmarks/results/meanflow_policy.json]

``--config`` overrides the policy config (MeanFlowPolicyConfig) of all three parts.

Part 1, training memory and step time of the two ways to get du/dt at the same batch and
network (the default config's MLP): ``meanflow`` (``torch.func.jvp``; backward runs through
the JVP's forward-mode graph) against ``omp`` (the DDE: two finite-difference forwards under
``no_grad``). Each variant trains ``--memory-steps`` steps in a fresh Python process; reported:
the peak resident set size of that process during training (Linux ``VmHWM``, reset through
``/proc/self/clear_refs`` once imports, demonstrations and model are loaded) minus its resident
size at that moment, the bytes autograd saved for backward in one step (the sizes of the
tensors ``torch.autograd.graph.saved_tensors_hooks`` sees), and the mean wall time of a step
after the first. Flow matching is shown for reference.

Part 2, the method table: ``omp``, ``meanflow`` and ``flow_matching`` trained with the default
config on each task through ``edgekit.models.registry.train`` (the model cache: a second run
reuses the models and the demonstrations), evaluated on the held-out seeds: success rate and
action MSE at 1 network evaluation, flow matching also at ``sample_steps`` (10).

Part 3, inference latency of the trained OMP policy (the first task's) after compile: for
fp32, mxint8 and mxfp4 weights, ``edgekit bench`` on its checkpoint for the ``host`` target:
the TVM build of edgekit's passes (time_evaluator), onnxruntime on the float and quantized
ONNX export, and torch eager, on the same input, interleaved rounds.
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
from pathlib import Path

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


def memory_table(base: MeanFlowPolicyConfig, methods: list[str], batch: int, steps: int, threads: int) -> list[dict]:
    rows = []
    for method in methods:
        command = [sys.executable, __file__, "--memory-worker", method, "--memory-batch", str(batch),
                   "--memory-steps", str(steps), "--threads", str(threads),
                   "--memory-config", json.dumps(dataclasses.asdict(base))]
        result = subprocess.run(command, capture_output=True, text=True, check=True)
        rows.append(json.loads(result.stdout.strip().splitlines()[-1]))
        print(f"memory {method}: {rows[-1]}", flush=True)
    jvp = rows[0]
    for row in rows:
        row["rss_vs_jvp"] = row["peak_rss_increase_mib"] / jvp["peak_rss_increase_mib"]
        row["saved_vs_jvp"] = row["saved_for_backward_mib"] / jvp["saved_for_backward_mib"]
    return rows


def method_table(base: MeanFlowPolicyConfig, tasks: list[str]) -> list[dict]:
    from edgekit.models.meanflow_policy import evaluate
    from edgekit.models.registry import train

    rows = []
    for task in tasks:
        for method in METHODS:
            config = dataclasses.replace(base, task=task, method=method)
            trained = train("meanflow_policy", config, progress=True, log=print)
            start = time.perf_counter()
            result = evaluate(trained.model, config)
            seconds = time.perf_counter() - start
            nfes = (1, config.sample_steps) if method == "flow_matching" else (1,)
            for nfe in nfes:
                suffix = "" if nfe == 1 else f"_{nfe}nfe"
                rows.append({"task": task, "method": method, "NFE": nfe,
                             "success rate": result["success_rate" + suffix],
                             "action MSE": result["action_mse" + suffix],
                             "mean episode steps": result["mean_episode_steps" + suffix],
                             "expert success rate": result["expert_success_rate"],
                             "held-out seeds": config.eval_episodes, "train s": trained.train_seconds,
                             "eval s": seconds, "cached": trained.cached})
                print(rows[-1], flush=True)
    return rows


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
    if MEMORY_METHODS[0] not in args.memory_methods:
        parser.error(f"--memory-methods must include {MEMORY_METHODS[0]} (the JVP, the reference of the ratios)")
    require_clean_tree(args.allow_dirty)

    from edgekit.jobs.bench import configure_tvm_threads

    configure_tvm_threads(args.threads)  # before TVM's pool starts
    import torch

    from edgekit.utils.output import atomic_write, json_safe, markdown_table

    torch.set_num_threads(args.threads)
    made_with = provenance(config.seed, threads=args.threads)  # at the start: the code the run began with
    memory = memory_table(config, [m for m in MEMORY_METHODS if m in args.memory_methods], args.memory_batch,
                          args.memory_steps, args.threads)
    methods = method_table(config, args.tasks)
    latency, latency_setup = latency_table(config, args.tasks[0], args.formats, args.rounds, args.threads)
    text = "\n\n".join([
        (f"### Methods on Meta-World (config: horizon {config.horizon}, execute {config.execute}, "
         f"MLP {config.depth}x{config.width}, {config.train_episodes} training demonstrations, {config.steps} steps, "
         f"{config.eval_episodes} held-out seeds)"),
        markdown_table(methods, ["task", "method", "NFE", "success rate", "action MSE", "mean episode steps",
                                 "expert success rate", "train s"]),
        f"### Training memory and step time, batch {args.memory_batch}, fresh process per variant",
        markdown_table(memory, ["method", "batch", "peak_rss_increase_mib", "rss_vs_jvp", "saved_for_backward_mib",
                                "saved_vs_jvp", "step_ms"]),
        (f"### One-step OMP policy ({args.tasks[0]}) after compile, batch 1, {args.threads} threads, "
         f"{args.rounds} rounds"),
        markdown_table(latency, ["run", "format", "backend", "bits/weight", "latency (ms)", "median (ms)",
                                 "x onnxruntime fp32", "max |diff|"]),
    ])
    print(text)
    meta = {**made_with, "command": " ".join(["python", *sys.argv]), "load_average_after":
            load_average(), "logical_cpus": os.cpu_count(), "config": config.__dict__,
            "memory_measure": "peak RSS (VmHWM, reset before training) minus RSS before training, fresh process per variant; "
                              "bytes autograd saved for backward per step via saved_tensors_hooks",
            "latency_setup": latency_setup}
    result = {"meta": meta, "methods": methods, "memory": memory, "latency": latency}
    atomic_write(args.output, json.dumps(json_safe(result), indent=2) + "\n")
    atomic_write(args.output.with_suffix(".md"), text + "\n")
    print(f"wrote {args.output} and {args.output.with_suffix('.md')}")


if __name__ == "__main__":
    main()
