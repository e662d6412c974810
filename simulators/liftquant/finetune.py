"""Block-output fine-tuning of LiftQuant codes and scales, through a straight-through estimator.

A *unit* is a torch module holding some quantized Linear layers (a transformer block, or
one layer). Each of its layers gets a latent real per code sign, initialised to
``sign * LATENT_INIT``; the forward pass uses ``sign(latent)`` and the gradient passes
straight through (where ``|latent| <= 1``). Row scales and group factors train with
them. The loss is the mean squared error of the unit's output against the float unit's
output on calibration inputs, relative to the target's energy. The state with the lowest
loss over the whole calibration set (checked every ``eval_every`` steps, and at the
start) is kept, so fine-tuning never makes a unit worse on its calibration data.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import nn
from torch.func import functional_call

from edgekit.simulators.liftquant import (
    LiftQuantTensor,
    group_index,
    group_scale_codes,
    group_scale_values,
    round_row_scales,
)

from .layout import pack_codes
from .search import signs_of

LATENT_INIT = 0.05


class SignSTE(torch.autograd.Function):
    """sign (+1 at zero) forward; the identity backward, clipped to |x| <= 1."""

    @staticmethod
    def forward(ctx, latent):
        ctx.save_for_backward(latent)
        return torch.where(latent >= 0, 1.0, -1.0).to(latent.dtype)

    @staticmethod
    def backward(ctx, grad):
        (latent,) = ctx.saved_tensors
        return grad * (latent.abs() <= 1).to(grad.dtype)


class TrainableWeight(nn.Module):
    """The weight a :class:`LiftQuantTensor` decodes to, as a differentiable function of its latents."""

    def __init__(self, q: LiftQuantTensor):
        super().__init__()
        self.q = q
        rows, width = q.shape
        fmt = q.format
        signs = signs_of(q.masks().reshape(-1), fmt.lifted).reshape(rows, q.chunks, fmt.lifted)
        self.latent = nn.Parameter(torch.from_numpy(signs * LATENT_INIT))
        self.row_scale = nn.Parameter(torch.from_numpy(q.row_scales.astype(np.float32)))
        self.group = None
        if q.group_scales is not None:
            self.group = nn.Parameter(torch.from_numpy(group_scale_values(fmt, q.group_scales)))
            self.register_buffer("groups", torch.from_numpy(group_index(q.chunks, fmt.chunk, q.group_size)))
        self.register_buffer("matrix", torch.from_numpy(q.codebook.matrix.copy()))
        basis = np.eye(width)
        if q.rotation is not None:
            basis = q.rotation.invert(basis, axis=1)  # row i is H^T e_i, so (r @ basis) = H^T r
        if q.input_scales is not None:
            basis = basis * q.input_scales.astype(np.float64)
        self.register_buffer("basis", torch.from_numpy(basis.astype(np.float32)))

    def forward(self) -> torch.Tensor:
        rows, width = self.q.shape
        points = SignSTE.apply(self.latent) @ self.matrix.T  # (rows, chunks, d)
        w = points.reshape(rows, -1)
        scale = self.row_scale[:, None]
        if self.group is not None:
            scale = scale * self.group[:, self.groups]
        return (w * scale)[:, :width] @ self.basis

    def to_tensor(self) -> LiftQuantTensor:
        """The stored tensor of the current state: signs of the latents, scales rounded to their formats."""
        q = self.q
        bits = (self.latent.detach() >= 0).numpy().astype(np.uint32)
        masks = (bits << np.arange(q.format.lifted, dtype=np.uint32)).sum(-1, dtype=np.uint32)
        group = None if self.group is None else group_scale_codes(q.format, self.group.detach().numpy())
        return dataclasses.replace(q, codes=pack_codes(masks, q.format.lifted),
                                   row_scales=round_row_scales(q.format, self.row_scale.detach().numpy()),
                                   group_scales=group)


def finetune_unit(unit: nn.Module, layers: dict[str, LiftQuantTensor], inputs: Sequence[tuple[tuple, dict]],
                  targets: Sequence[torch.Tensor], *, steps: int = 200, lr: float = 1e-3, scale_lr: float = 1e-4,
                  eval_every: int = 50, seed: int = 0,
                  log: Callable[[str], None] | None = None) -> tuple[dict[str, LiftQuantTensor], dict]:
    """Fine-tune the LiftQuant ``layers`` of ``unit`` (parameter paths such as ``"attn.q.weight"``).

    ``inputs[i]`` is the (args, kwargs) of one calibration batch and ``targets[i]`` the
    float unit's output on it. Returns the new tensors and a summary (losses before/after).
    """
    if steps < 0 or eval_every < 1:
        raise ValueError(f"steps must be >= 0 and eval_every >= 1, got {steps} and {eval_every}")
    if len(inputs) != len(targets) or not inputs:
        raise ValueError("inputs and targets must be non-empty and of equal length")
    trainables = {name: TrainableWeight(q) for name, q in layers.items()}
    energy = sum(float((t.double() ** 2).sum()) for t in targets)

    def run(weights: dict[str, TrainableWeight], batch: int) -> torch.Tensor:
        args, kwargs = inputs[batch]
        return functional_call(unit, {name: w() for name, w in weights.items()}, args, kwargs)

    def score(weights: dict[str, TrainableWeight]) -> float:
        with torch.no_grad():
            return sum(float(((run(weights, b) - targets[b]).double() ** 2).sum()) for b in range(len(inputs))) / energy

    best, best_loss = dict(layers), score(trainables)  # the latents start exactly at the stored codes and scales
    start_loss = best_loss
    latents = [w.latent for w in trainables.values()]
    scales = [p for w in trainables.values() for p in (w.row_scale, w.group) if p is not None]
    optimizer = torch.optim.Adam([{"params": latents, "lr": lr}, {"params": scales, "lr": scale_lr}])
    order = np.random.default_rng(seed).integers(0, len(inputs), steps)
    for step, batch in enumerate(order, 1):
        loss = ((run(trainables, int(batch)) - targets[batch]) ** 2).sum() / (energy / len(inputs))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % eval_every == 0 or step == steps:
            current = {name: w.to_tensor() for name, w in trainables.items()}
            trial = score({name: TrainableWeight(q) for name, q in current.items()})  # the stored, rounded state
            if log:
                log(f"  step {step}: relative block error {trial:.5f} (best {best_loss:.5f})")
            if trial < best_loss:
                best_loss, best = trial, current
    return best, {"start_loss": start_loss, "final_loss": best_loss, "steps": steps}
