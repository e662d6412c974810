"""Training with every matrix product's operands quantized: MX formats against BF16, and what
symmetric INT clipping does to MXINT8 training.

Every ``nn.Linear`` of the evaluation LM becomes a :class:`QuantizedLinear` whose three
GEMMs (the forward product, and the two backward products for the input's and the weight's
gradients) take operands rounded to a number format along that GEMM's reduction axis, as
hardware that multiplies in the format would: the forward product ``x W^T`` reduces over the
input features, the input gradient ``g W`` over the output features, the weight gradient
``g^T x`` over the tokens. MX formats round through the bit-exact simulators; BF16 is a cast;
the INT8 baselines with one FP32 scale per tensor or per channel (one scale per row of the
operand, shared along the reduction) are the paper's. A forward-only scheme keeps the backward
products in BF16.

The INT range matters: rounding a symmetric distribution into [-128, 127] clips the positive
side only, so the error has a nonzero mean, and in gradients such a bias accumulates over
steps. Symmetric clipping ([-127, 127]) removes it; ``clipping_bias`` measures it directly.

The paper trains billion-parameter LLMs; this trains the byte-level LM of the zoo on CPU, a
few hundred steps, so the figures show the mechanism at small scale.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from edgekit.simulators import quantize_dequantize

from . import lm
from .config_fields import bounded, checked
from .training import fit

# scheme -> (forward format, backward format); a format is an MX name, "bf16", or "int8_tensor" /
# "int8_channel": INT8 with an FP32 scale amax / 127 per tensor or per channel, which never clips, so
# the INT range question does not arise for them
SCHEMES = {
    "bf16": ("bf16", "bf16"),
    "mxfp8_e4m3": ("mxfp8_e4m3", "mxfp8_e4m3"),
    "mxint8": ("mxint8", "mxint8"),
    "mxint8_asym": ("mxint8_asym", "mxint8_asym"),
    "int8_tensor": ("int8_tensor", "int8_tensor"),
    "int8_channel": ("int8_channel", "int8_channel"),
    "mxint4_forward": ("mxint4", "bf16"),
    "mxfp4_forward": ("mxfp4", "bf16"),
}
FP32_SCALE_FORMATS = {"int8_tensor": False, "int8_channel": True}  # format -> one scale per channel


def round_operand(t: torch.Tensor, fmt: str, axis: int) -> torch.Tensor:
    """``t`` (2-D) rounded to ``fmt`` with blocks or scales along ``axis``, the GEMM's reduction axis."""
    if fmt == "bf16":
        return t.to(torch.bfloat16).to(t.dtype)
    if fmt in FP32_SCALE_FORMATS:
        amax = t.abs().amax(dim=axis, keepdim=True) if FP32_SCALE_FORMATS[fmt] else t.abs().amax()
        scale = torch.where(amax > 0, amax / 127.0, torch.ones_like(amax))
        return torch.round(t / scale).clamp(-127, 127) * scale
    out = quantize_dequantize(t.detach().contiguous().numpy(), fmt, axis)
    return torch.from_numpy(out).to(t.dtype)


class QuantizedMatmul(torch.autograd.Function):
    """``x W^T`` with the operands of the forward and both backward GEMMs rounded along their reductions."""

    @staticmethod
    def forward(ctx, x, weight, forward_fmt: str, backward_fmt: str):
        ctx.save_for_backward(x, weight)
        ctx.backward_fmt = backward_fmt
        return round_operand(x, forward_fmt, 1) @ round_operand(weight, forward_fmt, 1).T

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        fmt = ctx.backward_fmt
        grad_x = round_operand(grad, fmt, 1) @ round_operand(weight, fmt, 0)
        grad_w = round_operand(grad, fmt, 0).T @ round_operand(x, fmt, 0)
        return grad_x, grad_w, None, None


class QuantizedLinear(nn.Linear):
    """An ``nn.Linear`` whose products run in a training scheme of ``SCHEMES``."""

    def __init__(self, linear: nn.Linear, scheme: str):
        super().__init__(linear.in_features, linear.out_features, linear.bias is not None)
        self.load_state_dict(linear.state_dict())
        self.forward_fmt, self.backward_fmt = SCHEMES[scheme]

    def forward(self, x):
        flat = x.reshape(-1, self.in_features)
        y = QuantizedMatmul.apply(flat, self.weight, self.forward_fmt, self.backward_fmt)
        y = y if self.bias is None else y + self.bias
        return y.reshape(*x.shape[:-1], self.out_features)


def quantize_linears(model: nn.Module, scheme: str) -> nn.Module:
    """Every ``nn.Linear`` of ``model`` replaced, in place, by a :class:`QuantizedLinear` of ``scheme``."""
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {', '.join(SCHEMES)}, got {scheme!r}")
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear:
                setattr(parent, name, QuantizedLinear(child, scheme))
    return model


@dataclass(frozen=True)
@checked
class MXTrainingConfig:
    """The LM recipe (``lm.LMConfig``'s defaults, smaller) trained once per scheme."""

    width: int = bounded(128, low=64)
    layers: int = bounded(2, low=1)
    heads: int = bounded(2, low=1)
    mlp: int = bounded(384, low=64)
    seq_len: int = bounded(128, low=1)
    batch: int = bounded(16, low=1)
    steps: int = bounded(300, low=1)
    lr: float = bounded(2e-3, low=0, low_open=True)
    warmup: int = bounded(30, low=0)
    max_train_bytes: int = bounded(2_000_000, low=1)
    eval_windows: int = bounded(64, low=1)
    schemes: tuple[str, ...] = bounded(tuple(SCHEMES), choices=SCHEMES)
    seed: int = bounded(0, low=0)

    @classmethod
    def tiny(cls, **overrides) -> MXTrainingConfig:
        base = {"width": 64, "layers": 1, "heads": 1, "mlp": 128, "seq_len": 32, "batch": 4, "steps": 20,
                "warmup": 5, "max_train_bytes": 200_000, "eval_windows": 8,
                "schemes": ("bf16", "mxint8", "mxint8_asym")}
        base.update(overrides)
        return cls(**base)

    def lm_config(self) -> lm.LMConfig:
        return lm.LMConfig(width=self.width, layers=self.layers, heads=self.heads, mlp=self.mlp, seq_len=self.seq_len,
                           batch=self.batch, steps=self.steps, lr=self.lr, warmup=self.warmup, seed=self.seed,
                           max_train_bytes=self.max_train_bytes, eval_windows=self.eval_windows)


def train_scheme(config: MXTrainingConfig, scheme: str) -> dict:
    """The LM trained with ``scheme``: its loss curve, validation cross-entropy and seconds."""
    lm_config = config.lm_config()
    start = time.perf_counter()
    trained = fit(f"lm[{scheme}]", lm_config, lambda c: quantize_linears(lm.build(c), scheme), lm.train_spec,
                  "mx_training", directory=None, progress=False)
    trained.model.eval()
    scores = lm.evaluate(trained.model, lm_config)
    losses = [float(v) for v in trained.loss_history]
    return {"scheme": scheme, "validation_cross_entropy": scores["cross_entropy"],
            "final_train_loss": float(np.mean(losses[-20:])) if losses else math.nan, "loss_history": losses,
            "seconds": round(time.perf_counter() - start, 1)}


def clipping_bias(size: int = 1 << 20, seed: int = 0) -> list[dict]:
    """Mean rounding error of a symmetric (Gaussian) input in each INT8 scheme, with and without
    symmetric clipping: the bias a gradient would accumulate."""
    x = torch.from_numpy(np.random.default_rng(seed).standard_normal((size // 1024, 1024)).astype(np.float32))
    rows = []
    for fmt in ("mxint8", "mxint8_asym", "mxint4", "mxint4_asym", "int8_tensor", "int8_channel"):
        err = (round_operand(x, fmt, 1) - x).double()
        rows.append({"format": fmt, "mean_error": float(err.mean()), "mean_abs_error": float(err.abs().mean()),
                     "bias_over_mean_abs": float(err.mean() / err.abs().mean())})
    return rows


def evaluate(config: MXTrainingConfig) -> dict:
    """Validation cross-entropy of every scheme, and each one's excess over BF16 (when BF16 ran)."""
    runs = {scheme: train_scheme(config, scheme) for scheme in config.schemes}
    out = {f"val_ce_{s}": r["validation_cross_entropy"] for s, r in runs.items()}
    if "bf16" in runs:
        for scheme, run in runs.items():
            if scheme != "bf16":
                out[f"excess_{scheme}"] = run["validation_cross_entropy"] - runs["bf16"]["validation_cross_entropy"]
    return out
