"""Error measures between a tensor and its quantized version."""

from __future__ import annotations

import math

import numpy as np


def qsnr(x, xq) -> float:
    """Quantization signal-to-noise ratio in dB: ``-10 log10(sum((xq - x)^2) / sum(x^2))``.

    ``inf`` when the two are equal; ``nan`` when either holds a non-finite value.
    """
    return qsnr_over([(x, xq)])


def qsnr_over(pairs) -> float:
    """QSNR of several tensors together: errors and energies summed over ``(x, xq)`` pairs."""
    noise = signal = 0.0
    for x, xq in pairs:
        x = np.asarray(x, dtype=np.float64)
        xq = np.asarray(xq, dtype=np.float64)
        if x.shape != xq.shape:
            raise ValueError(f"x and xq must have the same shape, got {x.shape} and {xq.shape}")
        signal += float(np.sum(x * x))
        noise += float(np.sum((xq - x) ** 2))
    if signal == 0.0:
        raise ValueError("x has no energy (all zeros): the QSNR is undefined")
    if noise == 0.0:
        return math.inf
    return -10.0 * math.log10(noise / signal)


def output_agreement(reference, candidate) -> dict:
    """How closely a model's output under quantized weights follows its float output.

    Cosine similarity of the flattened outputs, max and mean absolute error, and for
    outputs of at least 2 dims the share of rows whose argmax over the last axis (top-1
    class or token) agrees.
    """
    ref = np.asarray(reference, dtype=np.float64)
    out = np.asarray(candidate, dtype=np.float64)
    if ref.shape != out.shape:
        raise ValueError(f"reference and candidate must have the same shape, got {ref.shape} and {out.shape}")
    a, b = ref.ravel(), out.ravel()
    norms = float(np.linalg.norm(a) * np.linalg.norm(b))
    cosine = float(a @ b / norms) if norms else (1.0 if np.array_equal(a, b) else 0.0)
    diff = np.abs(out - ref)
    result = {"cosine": cosine, "max_abs_error": float(diff.max(initial=0.0)), "mean_abs_error": float(diff.mean())}
    if ref.ndim >= 2 and ref.shape[-1] > 1:
        result["top1_agreement"] = float(np.mean(ref.argmax(-1) == out.argmax(-1)))
    return result
