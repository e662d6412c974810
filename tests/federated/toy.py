"""A small workload for engine tests: an MLP regressing a fixed random teacher, one data partition per worker."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from edgekit.federated.workload import Workload

WIDTH = 16


def toy_workload(partitions: int = 4, seed: int = 0, crash: tuple[int, int] | None = None) -> Workload:
    """``crash = (partition, step)``: that worker raises when it reaches that step (a client crashing mid-round)."""
    teacher = torch.Generator().manual_seed(1234)
    w_true = torch.randn(WIDTH, 1, generator=teacher)
    shift = torch.randn(partitions, WIDTH, generator=teacher) * 0.5  # each partition's inputs differ

    def build():
        torch.manual_seed(seed)
        return nn.Sequential(nn.Linear(WIDTH, 32), nn.Tanh(), nn.Linear(32, 1))

    def batch_loss(model, partition, step):
        if crash is not None and (partition, step) == crash:
            raise RuntimeError(f"worker {partition} crashed at step {step}")
        g = torch.Generator().manual_seed(seed * 1_000_003 + partition * 10_007 + step)
        x = torch.randn(32, WIDTH, generator=g) + shift[partition]
        return F.mse_loss(model(x), x @ w_true)

    def evaluate(model):
        g = torch.Generator().manual_seed(99)
        x = torch.randn(256, WIDTH, generator=g)
        return {"loss": float(F.mse_loss(model(x), x @ w_true))}

    return Workload(build, lambda m: torch.optim.AdamW(m.parameters(), lr=1e-2), batch_loss, evaluate,
                    flops_per_step=6 * 32 * (WIDTH * 32 + 32), num_partitions=partitions, seed=seed)


def toy_continual(tasks: int = 3, seed: int = 0):
    """A sequence of regression tasks for continual learning: each task's teacher differs, so
    learning a later task moves the shared weights away from an earlier task's solution."""
    from edgekit.federated.rieselect import ContinualWorkload

    g = torch.Generator().manual_seed(4321)
    teachers = [torch.randn(WIDTH, 1, generator=g) for _ in range(tasks)]
    centres = [torch.randn(WIDTH, generator=g) for _ in range(tasks)]  # each task's inputs sit elsewhere

    def build():
        torch.manual_seed(seed)
        return nn.Sequential(nn.Linear(WIDTH, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 1))

    def data(task, key):
        x = torch.randn(32, WIDTH, generator=torch.Generator().manual_seed(key)) + centres[task]
        return x, torch.tanh(x @ teachers[task])

    def sample_losses(model, task, partition, step):
        x, y = data(task, seed * 1_000_003 + task * 100_003 + partition * 10_007 + step)
        return F.mse_loss(model(x), y, reduction="none")[:, 0]

    def evaluate(model, task):
        x, y = data(task, 99 + task)
        return float(F.mse_loss(model(x), y))

    return ContinualWorkload(build, sample_losses, evaluate, tasks, lr=1e-2, flops_per_step=6 * 32 * 1600)
