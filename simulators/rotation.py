"""Hadamard rotations that spread outliers across a block before quantization."""

from __future__ import annotations

from functools import cache

import numpy as np


@cache
def hadamard(n: int) -> np.ndarray:
    """The orthonormal Sylvester Hadamard matrix of order ``n`` (a power of two), float64."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1 or n & (n - 1):
        raise ValueError(f"n must be a power of two (1, 2, 4, ..., 32, ...), got {n!r}")
    h = np.ones((1, 1))
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    h = h / np.sqrt(n)
    h.setflags(write=False)
    return h


def walsh_hadamard(x) -> np.ndarray:
    """``x @ hadamard(n)`` along the last axis (float64) by the fast transform: n log2(n) additions
    instead of the dense product's n^2 multiply-adds, which dominate at layer widths in the thousands."""
    y = np.array(x, np.float64)
    n = y.shape[-1] if y.ndim else 0
    if n < 1 or n & (n - 1):
        raise ValueError(f"the last axis must have a power-of-two length (1, 2, 4, ...), got shape {y.shape}")
    shape = y.shape
    half = 1
    while half < n:  # butterflies (a, b) -> (a + b, a - b) of elements half apart, in blocks of 2 * half
        y = y.reshape(-1, n // (2 * half), 2, half)
        y = np.stack((y[:, :, 0] + y[:, :, 1], y[:, :, 0] - y[:, :, 1]), axis=2)
        half *= 2
    return y.reshape(shape) / np.sqrt(n)


def rotate_blocks(x: np.ndarray, size: int = 32, axis: int = -1) -> np.ndarray:
    """Apply the orthonormal ``size`` x ``size`` Hadamard to each run of ``size`` elements along ``axis``.

    The rotation is orthogonal, so it preserves the signal's energy and the
    quantization error measured after it equals the error in the original basis.
    Returns float32 (computed in float64).
    """
    h = hadamard(size)
    x = np.asarray(x)
    if x.ndim == 0:
        raise ValueError("x must have at least one dimension")
    moved = np.moveaxis(x, axis, -1)
    if moved.shape[-1] % size:
        raise ValueError(f"the length along axis {axis} ({moved.shape[-1]}) must be a multiple of size={size}")
    groups = moved.astype(np.float64).reshape(*moved.shape[:-1], -1, size)
    return np.moveaxis((groups @ h.T).reshape(moved.shape), -1, axis).astype(np.float32)
