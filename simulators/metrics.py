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
