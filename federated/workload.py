"""What the engine trains, given as plain inputs, and the client-side training helpers.

The engine imports no model code: a caller builds a :class:`Workload` (a model factory,
the inner optimizer, a per-worker batch loss, a validation function and the FLOPs of one
step for the simulated clock) and hands it to the apps. Parameters travel as name ->
float32 NumPy arrays (``named_parameters``; buffers stay local).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from flwr.app import ConfigRecord, RecordDict
from torch import nn

from .compression import from_record, to_record

INNER_OPTIMIZER, INNER_STEPS = "inner_optimizer", "inner_steps"


@dataclass(frozen=True)
class Workload:
    """A model and its data, as the federated engine needs them.

    build_model: the initial model, with the same weights on every call.
    optimizer: the inner optimizer of a worker's model.
    batch_loss: ``(model, partition, step) -> loss`` of one batch of that partition's data,
        drawn from ``(partition, step)`` alone, so a worker's data order is reproducible.
    evaluate: validation metrics of a model, with a ``loss`` entry.
    flops_per_step: FLOPs of one inner step (forward and backward): the simulated clock
        charges ``steps * flops_per_step / device FLOP/s`` for a worker's compute.
    num_partitions: how many disjoint data partitions exist (one per worker).
    lr: the inner learning rate at a worker's step (None keeps the optimizer's).
    """

    build_model: Callable[[], nn.Module]
    optimizer: Callable[[nn.Module], torch.optim.Optimizer]
    batch_loss: Callable[[nn.Module, int, int], torch.Tensor]
    evaluate: Callable[[nn.Module], dict]
    flops_per_step: float
    num_partitions: int
    lr: Callable[[int], float] | None = None
    grad_clip: float | None = None
    seed: int = 0


def parameters_of(model: nn.Module) -> dict[str, np.ndarray]:
    """A copy of the model's parameters as float32 arrays."""
    return {name: p.detach().cpu().numpy().astype(np.float32, copy=True) for name, p in model.named_parameters()}


def load_parameters(model: nn.Module, arrays: dict[str, np.ndarray]) -> nn.Module:
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.tensor(arrays[name]))  # a copy: decoded arrays may be read-only views of message bytes
    return model


_MODELS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_INITIAL: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def initial_parameters(workload: Workload) -> dict[str, np.ndarray]:
    """A copy of ``workload``'s initial parameters, built once per workload in this process
    (``build_model`` gives the same weights on every call; every in-process worker needs them)."""
    if workload not in _INITIAL:
        _INITIAL[workload] = parameters_of(workload.build_model())
    return {name: x.copy() for name, x in _INITIAL[workload].items()}


def model_holding(workload: Workload, key, arrays: dict[str, np.ndarray]) -> nn.Module:
    """``workload``'s model with ``arrays`` loaded, reusing this process's model for ``key`` (a
    worker's node id, or the evaluator): building a model (random init and all) costs more than
    loading parameters into one, and every parameter is overwritten."""
    models = _MODELS.setdefault(workload, {})
    if key not in models:
        models[key] = workload.build_model()
    return load_parameters(models[key], arrays)


def evaluate_arrays(workload: Workload, arrays: dict[str, np.ndarray]) -> dict:
    """The workload's validation metrics of a model holding ``arrays``."""
    with torch.no_grad():
        return workload.evaluate(model_holding(workload, "evaluate", arrays).eval())


def _step_seed(seed: int, partition: int, step: int) -> int:
    return int(np.random.SeedSequence([seed, partition, step]).generate_state(1)[0])


def inner_steps(workload: Workload, model: nn.Module, optimizer: torch.optim.Optimizer, partition: int,
                first_step: int, steps: int) -> float:
    """Train ``steps`` steps on ``partition`` from the worker's step ``first_step``; the mean loss."""
    model.train()
    total = 0.0
    for step in range(first_step, first_step + steps):
        if workload.lr is not None:
            for group in optimizer.param_groups:
                group["lr"] = workload.lr(step)
        # Any randomness inside the loss; the CPU generator alone (torch.manual_seed also queues
        # accelerator seeding, which costs milliseconds per call).
        torch.default_generator.manual_seed(_step_seed(workload.seed, partition, step))
        loss = workload.batch_loss(model, partition, step)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if workload.grad_clip is not None:
            nn.utils.clip_grad_norm_(model.parameters(), workload.grad_clip)
        optimizer.step()
        total += float(loss.detach())
    return total / steps if steps else float("nan")


def save_optimizer(state: RecordDict, optimizer: torch.optim.Optimizer, steps_done: int) -> None:
    """Keep a worker's inner optimizer state (its tensors, e.g. AdamW's moments and step counts)
    and its step count in its context state. The hyperparameters are not kept: they are the
    optimizer's own, rebuilt every time."""
    tensors = {f"{index}.{key}": value.detach().cpu().numpy()
               for index, entry in optimizer.state_dict()["state"].items()
               for key, value in entry.items() if isinstance(value, torch.Tensor)}
    state[INNER_OPTIMIZER] = to_record(tensors)
    state[INNER_STEPS] = ConfigRecord({"steps": steps_done})


def restore_optimizer(state: RecordDict, optimizer: torch.optim.Optimizer) -> int:
    """Load the kept optimizer state into ``optimizer``; the worker's step count (0 the first time)."""
    if INNER_STEPS not in state.config_records:
        return 0
    entries: dict[int, dict] = {}
    for name, value in from_record(state[INNER_OPTIMIZER]).items():
        index, key = name.split(".", 1)
        entries.setdefault(int(index), {})[key] = torch.tensor(value)
    optimizer.load_state_dict({"state": entries, "param_groups": optimizer.state_dict()["param_groups"]})
    return int(state[INNER_STEPS]["steps"])
