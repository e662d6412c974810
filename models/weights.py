"""Weights of a torch model through a simulated number format.

A format is a block format of the simulators' table (``mxfp4``, ``nvfp4`` ...) or a
LiftQuant configuration (``liftquant_24to10``). LiftQuant codes Linear weights only: its
kernels are matrix products, so a model with convolutions has no LiftQuant form.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch import nn

from edgekit.simulators import BlockFormat, liftquant, quantize, quantize_dequantize
from edgekit.simulators import weight_formats as wf
from edgekit.simulators.formats import LiftQuantFormat

QUANTIZED_LAYERS = (nn.Linear, nn.Conv1d, nn.Conv2d)


def quantizable_weights(model: nn.Module) -> dict[str, torch.Tensor]:
    """Weights of the Linear and Conv layers, by module name: what a format applies to."""
    return {name: m.weight for name, m in model.named_modules() if isinstance(m, QUANTIZED_LAYERS)}


def weight_format(format: str | BlockFormat | LiftQuantFormat) -> wf.WeightFormat:
    """The weight-format row of a name or of a simulators' format description."""
    if isinstance(format, BlockFormat):
        return wf.WeightFormat(format.name, "block", block=format)
    if isinstance(format, LiftQuantFormat):
        return wf.WeightFormat(format.name, "liftquant", liftquant=format)
    return wf.resolve(format)


def uncoded_layers(model: nn.Module, format) -> list[str]:
    """Layers of ``model`` that ``format`` cannot code: the convolutions, for LiftQuant."""
    if weight_format(format).family != "liftquant":
        return []
    return [name for name, m in model.named_modules() if isinstance(m, (nn.Conv1d, nn.Conv2d))]


def check_codable(model: nn.Module, format) -> None:
    layers = uncoded_layers(model, format)
    if layers:
        raise ValueError(f"format {format!r}: LiftQuant codes Linear weights only, and this model has "
                         f"{len(layers)} convolution{'s' if len(layers) > 1 else ''} ({', '.join(layers[:3])}"
                         f"{', ...' if len(layers) > 3 else ''}); use a block format for it")


def _rows(weight: torch.Tensor) -> np.ndarray:
    return np.ascontiguousarray(weight.detach().cpu().float().numpy())


def quantized_copy(model: nn.Module, format: str | BlockFormat | LiftQuantFormat) -> nn.Module:
    """A copy of ``model`` whose Linear/Conv weights hold the values ``format`` can represent.

    Blocks run along each weight's input-channel axis (axis 1), the reduction axis of
    the matrix product, as hardware block-scaled matrix units read them. LiftQuant codes
    each Linear weight with the simulators' default pipeline (rotation, row scales,
    default search), the same encoding ``edgekit compile --format liftquant:B`` builds.
    Biases and other parameters stay in float32.
    """
    row = weight_format(format)
    check_codable(model, row.name)
    fake_quant = FAKE_QUANT[row.family]
    out = copy.deepcopy(model)
    with torch.no_grad():
        for weight in quantizable_weights(out).values():
            weight.copy_(torch.from_numpy(fake_quant(_rows(weight), row)))
    return out


def bits_per_weight(model: nn.Module, format: str | BlockFormat | LiftQuantFormat) -> float:
    """Stored bits per Linear/Conv weight in ``format``, every scale included.

    For LiftQuant: codes, scales and rotations of every layer, and each configuration's
    codebook once.
    """
    tensors = [_rows(w) for w in quantizable_weights(model).values()]
    row = weight_format(format)
    check_codable(model, row.name)
    stored = STORED_BYTES[row.family](tensors, row)
    return 8.0 * stored / sum(w.size for w in tensors)


FAKE_QUANT = {
    "float": lambda w, row: w.astype(row.dtype).astype(np.float32),
    "block": lambda w, row: quantize_dequantize(w, row.block, axis=1),
    "liftquant": lambda w, row: liftquant.quantize(w, row.liftquant).dequantize(),
}
"""Each weight-format family's values of rows of weights (blocks along axis 1)."""

STORED_BYTES = {
    "float": lambda tensors, row: sum(w.size for w in tensors) * np.dtype(row.dtype).itemsize,
    "block": lambda tensors, row: sum(quantize(w, row.block, axis=1).nbytes for w in tensors),
    "liftquant": lambda tensors, row: (sum(liftquant.layer_nbytes(row.liftquant, w.shape) for w in tensors)
                                       + liftquant.codebook_bytes(row.liftquant)),
}
"""Each weight-format family's stored bytes of rows of weights, every scale (and LiftQuant's codebook) included."""
