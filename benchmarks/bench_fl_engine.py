"""The in-process federated engine's own cost, and a 100-client run (run by hand, with nice).

    python benchmarks/bench_fl_engine.py [--lm-rounds 4] [--lm-inner-steps 20] [--clients 100]
                                         [--rounds 100] [-o benchmarks/results/fl_engine.json] [--allow-dirty]

Part 1, overhead: DiLoCo and gossip DiLoCo (k=1, ring) with 8 clients of the byte-level LM
(``edgekit.jobs.fl``'s workload, ``--lm-inner-steps`` a round) on the in-process engine. Every
second of the run is put in one bucket: training compute (inside the workers' inner steps:
forward, backward, AdamW), evaluation (the central validation of the model), and everything
else, the overhead, which is split into the engine proper (the in-process grid's serialization
and delivery, the network grid's sizing, link model and clock) and the rest (client-side
conversion of records to models and back, optimizer state kept in the context, the strategy's
checks and aggregation). The goal: overhead under 5% of training compute.

Part 2, scale: ``--clients`` clients of the digits MLP (hidden width 64, the scikit-learn
digits split across clients) run ``--rounds`` rounds of DiLoCo and of gossip DiLoCo (k=1) on
the in-process engine, one PyTorch thread; wall time and accuracy.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import torch

import edgekit.federated.diloco as diloco_module
from edgekit.federated.apps import RunSettings, run_in_process
from edgekit.federated.workload import Workload
from edgekit.jobs.fl import workload_for
from edgekit.models import digits
from edgekit.utils.files import atomic_write
from edgekit.utils.output import markdown_table
from edgekit.utils.provenance import load_average, provenance, require_clean_tree


class TrainingClock:
    """Seconds spent inside the workers' inner steps (wraps the function the workers call)."""

    def __init__(self):
        self.seconds = 0.0
        self._inner = diloco_module.inner_steps

    def __call__(self, *args, **kwargs):
        began = time.perf_counter()
        try:
            return self._inner(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - began


def overhead(method: str, rounds: int, inner_steps: int, mixing_steps: int) -> dict:
    clock = TrainingClock()
    diloco_module.inner_steps = clock  # the workers of both methods train through diloco.train_inner
    base = workload_for(RunSettings(clients=8, rounds=rounds, inner_steps=inner_steps))
    evaluation = {"seconds": 0.0}

    def timed_evaluate(model):
        began = time.perf_counter()
        try:
            return base.evaluate(model)
        finally:
            evaluation["seconds"] += time.perf_counter() - began

    workload = Workload(base.build_model, base.optimizer, base.batch_loss, timed_evaluate, base.flops_per_step,
                        base.num_partitions, base.lr, base.grad_clip, base.seed)
    settings = RunSettings(method=method, clients=8, rounds=rounds, inner_steps=inner_steps,
                           mixing_steps=mixing_steps)
    try:
        began = time.perf_counter()
        result, grid = run_in_process(settings, lambda _: workload)
        total = time.perf_counter() - began
    finally:
        diloco_module.inner_steps = clock._inner
    engine = grid.engine_seconds + grid.inner.engine_seconds
    other = total - clock.seconds - evaluation["seconds"]
    return {"method": method if method == "diloco" else f"gossip k={mixing_steps}", "rounds": rounds,
            "total_s": total, "training_s": clock.seconds, "evaluation_s": evaluation["seconds"],
            "engine_s": engine, "overhead_s": other, "engine_%": 100 * engine / clock.seconds,
            "overhead_%": 100 * other / clock.seconds, "messages_MB": grid.bytes.total / 1e6,
            "final_loss": result.records[-1].metrics["eval"]["loss"]}


def digits_workload(clients: int, seed: int = 0) -> Workload:
    config = digits.DigitsConfig(hidden=64, seed=seed)
    x, y, xt, yt = digits.load_digits_split(config.test_fraction, config.seed)
    shares = [(torch.from_numpy(x[p::clients]), torch.from_numpy(y[p::clients])) for p in range(clients)]

    def build():
        torch.manual_seed(seed)
        return digits.build(config)

    def batch_loss(model, partition, step):
        xs, ys = shares[partition]
        idx = torch.from_numpy(np.random.default_rng([seed, partition, step]).choice(len(xs), min(8, len(xs)),
                                                                                     replace=False))
        return torch.nn.functional.cross_entropy(model(xs[idx]), ys[idx])

    def evaluate(model):
        logits = model(torch.from_numpy(xt))
        target = torch.from_numpy(yt)
        return {"loss": float(torch.nn.functional.cross_entropy(logits, target)),
                "accuracy": float((logits.argmax(1) == target).float().mean())}

    flops = 6 * 8 * sum(p.numel() for p in build().parameters())
    return Workload(build, lambda m: torch.optim.AdamW(m.parameters(), lr=3e-3), batch_loss, evaluate, flops,
                    clients, seed=seed)


def scale(method: str, clients: int, rounds: int, mixing_steps: int) -> dict:
    workload = digits_workload(clients)
    settings = RunSettings(method=method, clients=clients, rounds=rounds, inner_steps=5, mixing_steps=mixing_steps,
                           eval_every=10)
    began = time.perf_counter()
    result, grid = run_in_process(settings, lambda _: workload)
    total = time.perf_counter() - began
    final = result.records[-1].metrics["eval"]
    return {"method": method if method == "diloco" else f"gossip k={mixing_steps}", "clients": clients,
            "rounds": rounds, "wall_s": total, "s_per_round": total / rounds,
            "engine_s": grid.engine_seconds + grid.inner.engine_seconds,
            "client_s": grid.inner.client_seconds, "messages_MB": grid.bytes.total / 1e6,
            "accuracy": final["accuracy"], "loss": final["loss"],
            "accuracy_round0": result.records[0].metrics["eval"]["accuracy"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lm-rounds", type=int, default=4)
    parser.add_argument("--lm-inner-steps", type=int, default=20, help="each LM client's inner steps a round")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("-o", "--output", type=Path, default=Path("benchmarks/results/fl_engine.json"))
    parser.add_argument("--allow-dirty", action="store_true", help="run on a tree with uncommitted changes")
    args = parser.parse_args()
    require_clean_tree(args.allow_dirty)
    torch.set_num_threads(1)
    meta = provenance(0, threads=1)  # at the start: the code and load the run began with
    os.environ.setdefault("EDGEKIT_CACHE_DIR", "/tmp/fl-cache")
    rows_overhead = [overhead("diloco", args.lm_rounds, args.lm_inner_steps, 0),
                     overhead("gossip", args.lm_rounds, args.lm_inner_steps, 1)]
    print(markdown_table(rows_overhead), flush=True)
    rows_scale = [scale("diloco", args.clients, args.rounds, 0), scale("gossip", args.clients, args.rounds, 1)]
    print(markdown_table(rows_scale), flush=True)
    meta["load_average_after"] = load_average()
    atomic_write(args.output, json.dumps({"meta": meta, "overhead": rows_overhead, "scale": rows_scale},
                                         indent=2) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
