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
from flwr.app import ArrayRecord, ConfigRecord, RecordDict
from torch import nn

from .compression import from_record, to_record
from .wire import typed_record

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
    _SAVED[optimizer] = (state[INNER_OPTIMIZER], state[INNER_STEPS])


def restore_optimizer(state: RecordDict, optimizer: torch.optim.Optimizer) -> int:
    """Load the kept optimizer state into ``optimizer``; the worker's step count (0 the first time)."""
    if typed_record(state, INNER_STEPS, ConfigRecord) is None:
        return 0
    entries: dict[int, dict] = {}
    for name, value in from_record(state[INNER_OPTIMIZER]).items():
        index, key = name.split(".", 1)
        entries.setdefault(int(index), {})[key] = torch.tensor(value)
    optimizer.load_state_dict({"state": entries, "param_groups": optimizer.state_dict()["param_groups"]})
    return int(state[INNER_STEPS]["steps"])


# model -> (its inner optimizer, that optimizer's own hyperparameters); optimizer -> the records it saved last
_OPTIMIZERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_SAVED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def optimizer_holding(workload: Workload, model: nn.Module, state: RecordDict) -> tuple[torch.optim.Optimizer, int]:
    """(``workload``'s inner optimizer of ``model`` holding the state kept in ``state``, the worker's
    step count). In process a worker's context lives on between messages, and when it still holds
    the very records this process's optimizer saved last, that optimizer already holds their
    values (the same float32 tensors): it is reused with its hyperparameters reset to its own,
    as a new one would have them. Loading the state back into a new optimizer was most of a
    small model's per-message cost. Otherwise (a first message, a resumed checkpoint, a context
    that came over a wire) a new optimizer loads the kept state."""
    kept = _OPTIMIZERS.get(model)
    saved = (typed_record(state, INNER_OPTIMIZER, ArrayRecord), typed_record(state, INNER_STEPS, ConfigRecord))
    written = _SAVED.get(kept[0]) if kept is not None else None
    if written is not None and all(a is b for a, b in zip(written, saved)):
        optimizer, hyperparameters = kept
        for group, own in zip(optimizer.param_groups, hyperparameters):
            group.update(own)
        return optimizer, int(saved[1]["steps"])
    optimizer = workload.optimizer(model)
    _OPTIMIZERS[model] = (optimizer, [{k: v for k, v in group.items() if k != "params"}
                                      for group in optimizer.param_groups])
    return optimizer, restore_optimizer(state, optimizer)
