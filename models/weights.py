"""Weights of a torch model through a simulated number format."""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch import nn

from edgekit.simulators import BlockFormat, get_format, quantize_dequantize

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
