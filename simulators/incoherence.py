"""Incoherence processing: a seeded orthogonal rotation of a weight's input axis.

``H = (H_p kron Q_q) diag(s)`` for an input width ``n = p * q``, ``p`` the largest power
of two dividing ``n``: ``s`` are seeded random signs, ``H_p`` the orthonormal Sylvester
Hadamard of order ``p`` and ``Q_q`` a seeded random orthogonal ``q x q`` factor (absent
when ``n`` is a power of two). Applied to a vector ``x`` of length n: multiply by the
signs, view it as a (q, p) row-major matrix ``X``, and form ``Q_q X H_p`` (H_p is
symmetric). A layer ``y = W x`` keeps its output when its rows are rotated the same way:
``W x = (W H^T)(H x)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .rotation import walsh_hadamard


@dataclass(frozen=True)
class Incoherence:
    """The rotation of an input axis of ``size`` elements, fixed by ``seed``."""

    size: int
    seed: int = 0

    def __post_init__(self):
        for name in ("size", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < (1 if name == "size" else 0):
                raise ValueError(f"{name} must be a {'positive' if name == 'size' else 'non-negative'} integer, "
                                 f"got {value!r}")

    @property
    def power(self) -> int:
        """p: the Hadamard order, the largest power of two dividing ``size``."""
        return self.size & -self.size

    @property
    def factor_size(self) -> int:
        """q = size / p: the order of the dense orthogonal factor (1: none)."""
        return self.size // self.power

    @cached_property
    def signs(self) -> np.ndarray:
        """The random signs ``s`` (float64, +-1)."""
        return np.random.default_rng([self.seed, self.size]).choice([-1.0, 1.0], self.size)

    @cached_property
    def factor(self) -> np.ndarray:
        """``Q_q`` (float64): the orthogonal factor of a QR decomposition of a seeded Gaussian matrix."""
        q = self.factor_size
        if q == 1:  # no factor is stored, so it must be exactly 1 (a 1 x 1 QR can give -1)
            return np.ones((1, 1))
        g = np.random.default_rng([self.seed, self.size, 1]).standard_normal((q, q))
        qm, r = np.linalg.qr(g)
        return qm * np.sign(np.diag(r))  # the sign fix makes the factor unique

    @property
    def side_bytes(self) -> int:
        """Bytes a kernel reads besides the codes: the signs as bits, the factor as float32."""
        q = self.factor_size
        return -(-self.size // 8) + (4 * q * q if q > 1 else 0)

    def apply(self, x, axis: int = -1) -> np.ndarray:
        """``H x`` along ``axis`` (float64)."""
        return self._transform(x, axis, inverse=False)

    def invert(self, x, axis: int = -1) -> np.ndarray:
        """``H^T x`` along ``axis`` (float64): the inverse rotation."""
        return self._transform(x, axis, inverse=True)

    def _transform(self, x, axis: int, inverse: bool) -> np.ndarray:
        moved = np.moveaxis(np.asarray(x, np.float64), axis, -1)
        if moved.shape[-1] != self.size:
            raise ValueError(f"the length along axis {axis} must be the rotation size {self.size}, got {moved.shape[-1]}")
        p, q = self.power, self.factor_size
        f = self.factor
        if inverse:
            grid = walsh_hadamard(f.T @ moved.reshape(*moved.shape[:-1], q, p))
            out = grid.reshape(moved.shape) * self.signs
        else:
            grid = (moved * self.signs).reshape(*moved.shape[:-1], q, p)
            out = walsh_hadamard(f @ grid).reshape(moved.shape)
        return np.moveaxis(out, -1, axis)
