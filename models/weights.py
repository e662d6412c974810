"""Weights of a torch model through a simulated number format."""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch import nn

from edgekit.simulators import BlockFormat, get_format, quantize, quantize_dequantize

QUANTIZED_LAYERS = (nn.Linear, nn.Conv1d, nn.Conv2d)


def quantizable_weights(model: nn.Module) -> dict[str, torch.Tensor]:
    """Weights of the Linear and Conv layers, by module name: what a format applies to."""
    return {name: m.weight for name, m in model.named_modules() if isinstance(m, QUANTIZED_LAYERS)}


def quantized_copy(model: nn.Module, format: str | BlockFormat) -> nn.Module:
    """A copy of ``model`` whose Linear/Conv weights hold the values ``format`` can represent.

    Blocks run along each weight's input-channel axis (axis 1), the reduction axis of
    the matrix product, as hardware block-scaled matrix units read them. Biases and
    other parameters stay in float32.
    """
    fmt = get_format(format)
    out = copy.deepcopy(model)
    with torch.no_grad():
        for weight in quantizable_weights(out).values():
            w = np.ascontiguousarray(weight.detach().cpu().float().numpy())
            weight.copy_(torch.from_numpy(quantize_dequantize(w, fmt, axis=1)))
    return out


def bits_per_weight(model: nn.Module, format: str | BlockFormat | None) -> float:
    """Stored bits per Linear/Conv weight in ``format`` (None: float32), every scale included."""
    if format is None:
        return 32.0
    fmt = get_format(format)
    tensors = [w.detach().cpu().float().numpy() for w in quantizable_weights(model).values()]
    return 8.0 * sum(quantize(np.ascontiguousarray(w), fmt, axis=1).nbytes for w in tensors) / sum(
        w.size for w in tensors)
