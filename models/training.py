"""The one training loop of the zoo: seeded, resumable, with a progress bar.

A model module describes its training as a :class:`TrainSpec` (a loss over one step's
random draws, an optimizer, a learning-rate schedule); :func:`fit` runs it. Every step
draws its randomness from generators seeded by ``(seed, step)`` alone, so a run that
was interrupted and resumed from a checkpoint ends with the same weights, bit for bit,
as one that ran straight through. Progress is checkpointed every ``checkpoint_seconds``
and when the run is interrupted (Ctrl-C or SIGTERM, taken at the next step boundary so
a checkpoint never holds half a step); the finished model goes into the cache.
"""

from __future__ import annotations

import signal
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from .cache import CheckpointError, ensure_writable, quarantine, read_checkpoint, write_checkpoint

MODEL_FILE = "model.pt"
PROGRESS_FILE = "progress.pt"


@dataclass
class TrainSpec:
    """How a model trains. ``loss(model, rng, step)`` draws its batch from ``rng`` (a NumPy
    generator seeded by ``(seed, step)``; torch's global generator is seeded the same way
    before each step) and returns a scalar tensor to minimise."""

    steps: int
    optimizer: Callable[[nn.Module], torch.optim.Optimizer]
    loss: Callable[[nn.Module, np.random.Generator, int], torch.Tensor]
    lr: Callable[[int], float] | None = None  # the learning rate at a step; None keeps the optimizer's
    grad_clip: float | None = None


@dataclass
class Trained:
    """A trained model and where it came from."""

    model: nn.Module
    checkpoint: Path | None  # the cache file, or None when training ran without a cache
    cached: bool  # loaded whole from the cache, no step run
    resumed_from: int  # the step training resumed at (0: from the start)
    steps: int
    train_seconds: float  # over every session that trained it
    loss_history: list[float] = field(repr=False, default_factory=list)


def progress_interval() -> float:
    """Seconds between progress-bar updates: live on a terminal, a handful of lines when stderr is a file."""
    return 0.1 if sys.stderr.isatty() else 30.0


def step_rng(seed: int, step: int) -> np.random.Generator:
    return np.random.default_rng([seed, step])


def _torch_seed(seed: int, step: int) -> int:
    return int(np.random.SeedSequence([seed, step, 1]).generate_state(1)[0])


class _StopFlag:
    """Turns SIGINT/SIGTERM into a flag the loop reads at step boundaries; a second signal stops at once."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.raised = False
        self.previous = {}

    def _handle(self, signum, frame):
        if self.raised:
            raise KeyboardInterrupt
        self.raised = True

    def __enter__(self):
        try:
            self.previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
        except ValueError:  # not the main thread: signals stay with their owner
            self.previous = {}
        return self

    def __exit__(self, *exc):
        for s, handler in self.previous.items():
            signal.signal(s, handler)


def fit(name: str, config, build: Callable, spec_for: Callable, code: str, *, directory: Path | None = None,
        progress: bool = True, checkpoint_seconds: float = 30.0,
        on_step: Callable[[int, float], None] | None = None, log: Callable[[str], None] | None = None) -> Trained:
    """Train ``build(config)`` with ``spec_for(config)``, resuming from and saving into ``directory``.

    ``directory`` is the cache entry of this (name, config, code); None trains without
    saving anything. A finished model there is loaded instead of trained. A corrupt
    file there is moved aside (``*.corrupt``) with a warning and the work is redone.
    """
    log = log or (lambda msg: None)
    final = progress_file = None
    if directory is not None:
        ensure_writable(directory)
        final, progress_file = directory / MODEL_FILE, directory / PROGRESS_FILE
        loaded = _load_final(final, name, config, build)
        if loaded is not None:
            return loaded
    torch.manual_seed(config.seed)
    model = build(config)
    spec = spec_for(config)
    optimizer = spec.optimizer(model)
    start, seconds, history = 0, 0.0, []
    if progress_file is not None and progress_file.exists():
        state = _read_or_quarantine(progress_file)
        if state is not None:
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            start, seconds, history = state["step"], state["seconds"], list(state["loss_history"])
            log(f"{name}: resuming at step {start} of {spec.steps} from {progress_file}")

    def save_progress(done: int, elapsed: float):
        if progress_file is not None and start < done < spec.steps:
            write_checkpoint(progress_file, model=name, config=config, code=code, kind="progress",
                             payload={"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                                      "step": done, "seconds": elapsed, "loss_history": history})

    model.train()
    from tqdm import tqdm

    bar = tqdm(total=spec.steps, initial=start, desc=f"train {name}", unit="step", disable=not progress,
               leave=False, dynamic_ncols=True, mininterval=progress_interval())
    began = last_save = time.perf_counter()
    done = start
    with _StopFlag() as stop:
        for step in range(start, spec.steps):
            if spec.lr is not None:
                for group in optimizer.param_groups:
                    group["lr"] = spec.lr(step)
            torch.manual_seed(_torch_seed(config.seed, step))
            loss = spec.loss(model, step_rng(config.seed, step), step)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if spec.grad_clip is not None:
                nn.utils.clip_grad_norm_(model.parameters(), spec.grad_clip)
            optimizer.step()
            value = float(loss.detach())
            history.append(value)
            done = step + 1
            bar.update(1)
            if step % 10 == 0:
                bar.set_postfix(loss=f"{value:.4g}", refresh=False)  # shown at the next timed update
            if on_step is not None:
                on_step(step, value)
            now = time.perf_counter()
            if stop.raised:
                save_progress(done, seconds + now - began)
                bar.close()
                log(f"{name}: interrupted after step {done}; progress saved to {progress_file}"
                    if progress_file is not None and done > start else f"{name}: interrupted after step {done}")
                raise KeyboardInterrupt
            if now - last_save > checkpoint_seconds:
                save_progress(done, seconds + now - began)
                last_save = now
    bar.close()
    seconds += time.perf_counter() - began
    model.eval()
    if final is not None:
        write_checkpoint(final, model=name, config=config, code=code, kind="model",
                         payload={"state_dict": model.state_dict(), "steps": spec.steps,
                                  "train_seconds": seconds, "loss_history": history})
        progress_file.unlink(missing_ok=True)
    return Trained(model, final, False, start, spec.steps, seconds, history)


def _read_or_quarantine(path: Path) -> dict | None:
    try:
        return read_checkpoint(path)[1]
    except CheckpointError as err:
        moved = quarantine(path)
        warnings.warn(f"{err}; moved to {moved.name} and starting over", stacklevel=3)
        return None


def _load_final(path: Path, name: str, config, build: Callable) -> Trained | None:
    if not path.exists():
        return None
    payload = _read_or_quarantine(path)
    if payload is None:
        return None
    model = build(config)
    model.load_state_dict(payload["state_dict"])
    return Trained(model.eval(), path, True, payload["steps"], payload["steps"], payload["train_seconds"],
                   list(payload["loss_history"]))
