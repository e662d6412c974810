"""GPTQ and round-to-nearest for one weight matrix, on an INT or an MX grid.

A torch ``Linear`` weight ``W`` (N outputs, K inputs) is rounded column by column along K.
Round-to-nearest (:func:`rtn`) rounds every weight on its own. GPTQ (:func:`gptq`, Frantar
et al. 2022) rounds the columns in order and, after each, spreads its rounding error over
the columns not yet rounded so that the layer's output error ``(W - Q) H (W - Q)^T`` on the
calibration inputs (``H = E[x x^T]``) stays small: the optimal-brain-quantization update
with the upper Cholesky factor of ``(H + damp * mean(diag H) I)^-1``, applied lazily, a
block of ``block_size`` columns at a time.

Grids (each with its scales per group of columns, fixed when the group's first column is
reached, from the weights as they are then):

* :class:`IntGrid`: asymmetric INT2/3/4, ``q = clip(round((w - z) / s), 0, 2^b - 1) s + z``
  with a float16 scale ``s`` and float16 zero ``z`` per group of ``group_size`` inputs, the
  clipping ratio per group chosen from 1.0 down to 0.5 for the lowest squared error;
* :class:`MXGrid`: an MX format of :mod:`.formats` (MXINT4, MXFP4), the block's E8M0 scale
  computed by the bit-exact codec (:mod:`.codec`) and each element rounded to nearest (ties
  to the even code) on the element grid, saturating: the result is what the codec encodes
  losslessly.

Both functions take and return plain arrays; rotation and input scaling, when wanted, are
applied around them by :func:`quantize_layer`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import weight_formats as wf
from .codec import quantize as mx_quantize
from .formats import BlockFormat, get_format
from .incoherence import Incoherence
from .liftquant import awq_input_scales

INT_BITS = (2, 3, 4)
MX_FORMATS = tuple(wf.names("block", lambda row: row.is_mx and row.element_bits == 4))  # GPTQ's MX roundings
CLIP_RATIOS = np.linspace(1.0, 0.5, 11)
DAMP = 0.01
BLOCK_SIZE = 128
SCALE_BYTES = 4  # float16 scale and float16 zero per INT group


@dataclass(frozen=True)
class IntGrid:
    """Asymmetric ``bits``-bit integers with a float16 scale and zero per ``group_size`` inputs."""

    bits: int
    group_size: int

    def __post_init__(self):
        if self.bits not in INT_BITS:
            raise ValueError(f"bits must be one of {INT_BITS}, got {self.bits!r}")
        if isinstance(self.group_size, bool) or not isinstance(self.group_size, (int, np.integer)) \
                or self.group_size < 1:
            raise ValueError(f"group_size must be a positive integer, got {self.group_size!r}")

    @property
    def name(self) -> str:
        return f"int{self.bits}_g{self.group_size}"

    def params(self, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(scale, zero) (N, 1) each for the group ``g`` (N, group_size), as float16 values."""
        levels = (1 << self.bits) - 1
        best = None
        for ratio in CLIP_RATIOS:
            scale, zero = self._grid(g, ratio, levels)
            err = ((self._round(g, scale, zero, levels) - g) ** 2).sum(1, keepdims=True)
            if best is None:
                best = (scale, zero, err)
            else:
                better = err < best[2]
                best = tuple(np.where(better, new, old) for new, old in zip((scale, zero, err), best, strict=True))
        return best[0], best[1]

    @staticmethod
    def _grid(g, ratio, levels):
        lo, hi = g.min(1, keepdims=True) * ratio, g.max(1, keepdims=True) * ratio
        scale = np.maximum((hi - lo) / levels, 1e-12).astype(np.float16).astype(np.float64)
        return scale, lo.astype(np.float16).astype(np.float64)

    @staticmethod
    def _round(x, scale, zero, levels):
        return np.clip(np.rint((x - zero) / scale), 0, levels) * scale + zero

    def round(self, x: np.ndarray, params) -> np.ndarray:
        """``x`` (N, c) on the grid of ``params``."""
        scale, zero = params
        return self._round(x, scale, zero, (1 << self.bits) - 1)

    def nbytes(self, shape: tuple[int, int]) -> int:
        """Packed codes plus the float16 scale and zero of every group."""
        rows, width = shape
        return math.ceil(rows * width * self.bits / 8) + rows * (width // self.group_size) * SCALE_BYTES


@dataclass(frozen=True)
class MXGrid:
    """The element grid of an MX format under each block's E8M0 scale, as the codec sets it."""

    format: BlockFormat

    def __post_init__(self):
        if self.format.tensor_scale or self.format.scale.element is not None:
            raise ValueError(f"MXGrid takes an E8M0-scaled MX format, not {self.format.name}")

    @classmethod
    def named(cls, name: str) -> MXGrid:
        return cls(get_format(name))

    @property
    def name(self) -> str:
        return self.format.name

    @property
    def group_size(self) -> int:
        return self.format.block_size

    def params(self, g: np.ndarray) -> np.ndarray:
        """The block scale 2^e (N, 1) of ``g`` (N, block) as the codec computes it (float32 input)."""
        codes = mx_quantize(np.ascontiguousarray(g, np.float32), self.format, axis=1).scales
        return self.format.scale.values[codes.reshape(-1, 1)]

    def round(self, x: np.ndarray, scale: np.ndarray) -> np.ndarray:
        """``x`` (N, c) to the nearest element value times ``scale``, ties to the even code, saturating."""
        mags = self.format.element.magnitudes
        top = self.format.element.max_magnitude_code
        grid = mags[: top + 1]  # increasing, finite
        a = np.abs(x) / scale
        hi = np.clip(np.searchsorted(grid, a), 1, top)
        lo = hi - 1
        d_lo, d_hi = a - grid[lo], grid[hi] - a
        pick = np.where((d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0)), hi, lo)
        pick = np.where(a >= grid[top], top, pick)
        return np.sign(x) * grid[pick] * scale

    def nbytes(self, shape: tuple[int, int]) -> int:
        rows, width = shape
        return int(rows * width * self.format.bits_per_element / 8)


Grid = IntGrid | MXGrid


def grid_named(name: str) -> Grid:
    """``int{2,3,4}_g{G}`` or an MX format name (``mxint4``, ``mxfp4``)."""
    text = str(name).strip().lower()
    if text in MX_FORMATS:
        return MXGrid.named(text)
    head, _, group = text.partition("_g")
    if head.startswith("int") and head[3:].isdigit() and group.isdigit() and int(head[3:]) in INT_BITS:
        return IntGrid(int(head[3:]), int(group))
    raise ValueError(f"unknown grid {name!r}; allowed: int2_gG, int3_gG, int4_gG (G: inputs per group scale, "
                     f"e.g. int3_g128) or {', '.join(MX_FORMATS)}")


def check_problem(w, hessian, grid: Grid) -> tuple[np.ndarray, np.ndarray | None]:
    w = np.asarray(w, np.float64)
    if w.ndim != 2 or 0 in w.shape or not np.isfinite(w).all():
        raise ValueError(f"w must be a non-empty finite 2-d weight (outputs, inputs), got shape {w.shape}")
    width = w.shape[1]
    if width % grid.group_size:
        raise ValueError(f"group_size {grid.group_size} of {grid.name} does not divide the layer's {width} inputs")
    if hessian is None:
        return w, None
    h = np.asarray(hessian, np.float64)
    if h.shape != (width, width):
        raise ValueError(f"the calibration Hessian must be ({width}, {width}) for a layer of {width} inputs, "
                         f"got shape {h.shape}: calibration inputs of the wrong width")
    return w, h


def calibration_gram(x, width: int) -> np.ndarray:
    """``E[x x^T]`` (K, K) from calibration inputs ``x`` (..., K)."""
    x = np.asarray(x, np.float64)
    if x.ndim < 1 or x.shape[-1] != width:
        raise ValueError(f"calibration inputs must have {width} features in their last axis, got shape {x.shape}")
    x = x.reshape(-1, width)
    if len(x) == 0:
        raise ValueError("calibration inputs must hold at least one row")
    return x.T @ x / len(x)


def rtn(w, grid: Grid) -> np.ndarray:
    """Round-to-nearest of ``w`` (N, K) on ``grid``, group by group (float64)."""
    w, _ = check_problem(w, None, grid)
    out = np.empty_like(w)
    g = grid.group_size
    for c in range(0, w.shape[1], g):
        out[:, c:c + g] = grid.round(w[:, c:c + g], grid.params(w[:, c:c + g]))
    return out


def inverse_cholesky(h: np.ndarray, damp: float) -> np.ndarray:
    """Upper Cholesky factor of ``(H + damp * mean(diag H) I)^-1``."""
    h = h + damp * np.mean(np.diag(h)) * np.eye(len(h))
    inv = np.linalg.inv(np.linalg.cholesky(h))  # L^-1, so H^-1 = L^-T L^-1
    return np.linalg.cholesky(inv.T @ inv).T


def gptq(w, hessian, grid: Grid, *, damp: float = DAMP, block_size: int = BLOCK_SIZE) -> np.ndarray:
    """GPTQ of ``w`` (N, K) on ``grid`` given ``hessian`` = E[x x^T] (K, K); float64 result on the grid.

    Inputs the calibration never excites (zero diagonal) carry no output error: their
    weights are rounded as they stand and pass no error on.
    """
    w, h = check_problem(w, hessian, grid)
    if h is None:
        raise ValueError("gptq needs the calibration Hessian E[x x^T]")
    if not damp > 0:
        raise ValueError(f"damp must be positive, got {damp!r}")
    if isinstance(block_size, bool) or not isinstance(block_size, (int, np.integer)) or block_size < 1:
        raise ValueError(f"block_size must be a positive integer, got {block_size!r}")
    h = h.copy()
    dead = np.diag(h) == 0
    h[dead, dead] = 1.0
    if (h.diagonal() <= 0).any() or not np.isfinite(h).all():
        raise ValueError("the calibration Hessian must be finite with a non-negative diagonal")
    u = inverse_cholesky(h, damp)  # a dead input's row and column of H are zero: it spreads nothing
    w = w.copy()
    q = np.empty_like(w)
    width, g = w.shape[1], grid.group_size
    params = None
    for b0 in range(0, width, block_size):
        b1 = min(b0 + block_size, width)
        errs = np.zeros((w.shape[0], b1 - b0))
        for j in range(b0, b1):
            if j % g == 0:  # the group's scales from its weights as they are now
                cols = w[:, j:j + g].copy()
                if j + g > b1:  # columns past this block still owe the block's pending updates
                    cols[:, b1 - j:] -= errs[:, : j - b0] @ u[b0:j, b1:j + g]
                params = grid.params(cols)
            q[:, j] = grid.round(w[:, j:j + 1], params)[:, 0]
            err = (w[:, j] - q[:, j]) / u[j, j]
            w[:, j + 1:b1] -= np.outer(err, u[j, j + 1:b1])
            errs[:, j - b0] = err
        w[:, b1:] -= errs @ u[b0:b1, b1:]
    return q


def input_scales(gram: np.ndarray, alpha: float) -> np.ndarray:
    """Activation-aware multipliers ``m`` (K,) from the calibration's per-input RMS (AWQ's rule),
    rounded to float16 as stored; alpha = 0 gives all ones."""
    return awq_input_scales(np.sqrt(np.maximum(np.diag(gram), 0.0)), alpha).astype(np.float16).astype(np.float64)


def quantize_layer(w, gram, grid: Grid, *, method: str, scales: np.ndarray | None = None,
                   rotation: Incoherence | None = None, damp: float = DAMP,
                   block_size: int = BLOCK_SIZE) -> np.ndarray:
    """``W_hat`` (N, K) float64 in the layer's own basis: ``method`` (``gptq`` or ``rtn``) applied to
    ``W_r = (W / m) H^T`` on ``grid``, with calibration ``gram`` = E[x x^T] carried into that basis
    (``H diag(m) G diag(m) H^T``), then rotated back and multiplied by ``m``."""
    w = np.asarray(w, np.float64)
    gram = np.asarray(gram, np.float64)
    if gram.shape != (w.shape[1], w.shape[1]):
        raise ValueError(f"gram must be ({w.shape[1]}, {w.shape[1]}) for a layer of {w.shape[1]} inputs, "
                         f"got shape {gram.shape}: calibration inputs of the wrong width")
    if method not in ("gptq", "rtn"):
        raise ValueError(f"method must be 'gptq' or 'rtn', got {method!r}")
    m = np.ones(w.shape[1]) if scales is None else np.asarray(scales, np.float64)
    w_r, g_r = w / m, gram * m[:, None] * m[None, :]
    if rotation is not None:
        w_r = rotation.apply(w_r, axis=1)
        g_r = rotation.apply(rotation.apply(g_r, axis=0), axis=1)
    q = gptq(w_r, g_r, grid, damp=damp, block_size=block_size) if method == "gptq" else rtn(w_r, grid)
    if rotation is not None:
        q = rotation.invert(q, axis=1)
    return q * m


def layer_nbytes(grid: Grid, shape: tuple[int, int], *, scales: bool, rotate: bool) -> int:
    """Stored bytes of a layer on ``grid``: codes and group scales, float16 input multipliers when
    used, and the rotation's side data (:attr:`.Incoherence.side_bytes`)."""
    width = shape[1]
    return grid.nbytes(shape) + (2 * width if scales else 0) + (Incoherence(width).side_bytes if rotate else 0)
