"""Block quantization to packed hardware bytes, and back.

``quantize`` turns a float32/float16/bfloat16 array into a :class:`QuantizedTensor`
holding the packed element codes and scale codes in the layout hardware reads;
``dequantize`` turns it back into float32. Both run the Numba kernels in
:mod:`kernels`, parallel over blocks, with no full-size float temporaries.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import ml_dtypes
import numpy as np

from edgekit.utils.parallel import parallel_map

from . import kernels
from .formats import SCALE_RULES, BlockFormat, get_format

INPUT_DTYPES = ("float32", "float16", "bfloat16")
NVFP4_TENSOR_RANGE = 6.0 * 448.0  # E2M1 max times E4M3 max
MIN_TENSOR_SCALE = np.float32(2.0**-126)
MIN_GATHERED_BLOCKS = 256  # gathered blocks are slower, so smaller tasks pay off


@dataclass(frozen=True)
class QuantizedTensor:
    """Packed codes and scales of a tensor quantized along ``axis``.

    ``codes`` has shape ``shape`` without ``axis`` plus ``(row_bytes,)``; each row is
    that slice's blocks one after another. ``scales`` has the same leading shape plus
    ``(n_blocks,)``. ``tensor_scale`` is the FP32 per-tensor scale (NVFP4 only).
    """

    format: BlockFormat
    shape: tuple
    axis: int
    codes: np.ndarray
    scales: np.ndarray
    tensor_scale: np.float32 | None = None
    scale_rule: str = "floor"

    def __post_init__(self):
        shape = tuple(int(d) for d in self.shape)
        object.__setattr__(self, "shape", shape)
        axis = check_axis(self.axis, len(shape))
        object.__setattr__(self, "axis", axis)
        lead = shape[:axis] + shape[axis + 1 :]
        n_blocks = math.ceil(shape[axis] / self.format.block_size)
        for name, width in (("codes", n_blocks * self.format.bytes_per_block), ("scales", n_blocks)):
            buf = np.asarray(getattr(self, name))
            expected = lead + (width,)
            if buf.dtype != np.uint8:
                raise ValueError(f"{name} must be a uint8 array, got dtype {buf.dtype}")
            if buf.size != math.prod(expected):
                raise ValueError(
                    f"{name} holds {buf.size} bytes; {self.format.name} with block size "
                    f"{self.format.block_size} for shape {shape} along axis {axis} needs "
                    f"{math.prod(expected)} (shape {expected})"
                )
            object.__setattr__(self, name, np.ascontiguousarray(buf).reshape(expected))
        if self.format.tensor_scale and self.tensor_scale is None:
            raise ValueError(f"tensor_scale is required for {self.format.name}")

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of codes and scales (plus 4 for an FP32 tensor scale)."""
        return self.codes.nbytes + self.scales.nbytes + (4 if self.format.tensor_scale else 0)

    @property
    def bits_per_element(self) -> float:
        """Stored bits per element, padding, scales and tensor scale included."""
        return 8.0 * self.nbytes / self.numel


def check_axis(axis, ndim: int) -> int:
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) or not -ndim <= axis < ndim:
        raise ValueError(f"axis must be an integer in [{-ndim}, {ndim - 1}] for a {ndim}-d array, got {axis!r}")
    return int(axis) % ndim


def check_scale_rule(scale_rule: str) -> int:
    if scale_rule not in SCALE_RULES:
        raise ValueError(f"scale_rule must be one of {', '.join(SCALE_RULES)}, got {scale_rule!r}")
    return SCALE_RULES.index(scale_rule)


def as_array(x) -> np.ndarray:
    """A NumPy view of ``x`` (NumPy array or torch tensor), checked for the codecs."""
    if type(x).__module__.startswith("torch"):
        x = torch_to_numpy(x)
    if not isinstance(x, np.ndarray):
        raise ValueError(f"x must be a NumPy array or torch tensor, got {type(x).__name__}")  # noqa: TRY004 (callers report ValueErrors)
    if x.dtype.name not in INPUT_DTYPES:
        raise ValueError(f"x must have dtype {', '.join(INPUT_DTYPES)}; got {x.dtype}")
    if x.ndim == 0 or x.size == 0:
        raise ValueError(f"x must be a non-empty array with at least one dimension, got shape {x.shape}")
    if not x.flags.c_contiguous:
        raise ValueError("x must be C-contiguous; pass np.ascontiguousarray(x) (or tensor.contiguous())")
    return x


def torch_to_numpy(t) -> np.ndarray:
    import torch

    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


@cache
def widening_table(dtype_name: str) -> np.ndarray:
    """FP32 bit pattern of every 16-bit code of ``dtype_name`` (exact widening)."""
    dtype = np.float16 if dtype_name == "float16" else ml_dtypes.bfloat16
    return np.arange(1 << 16, dtype=np.uint16).view(dtype).astype(np.float32).view(np.uint32)


def fp32_bits(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(flat bit view of x, table that widens it to FP32 bits) for the kernels."""
    if x.dtype == np.float32:
        return x.reshape(-1).view(np.uint32), np.empty(0, np.uint32)
    return x.reshape(-1).view(np.uint16), widening_table(x.dtype.name)


@cache
def kernel_tables(fmt: BlockFormat) -> tuple[np.ndarray, np.ndarray]:
    """(element value table, scale value table) as float32 for the decoder."""
    return fmt.element.values.astype(np.float32), fmt.scale.values.astype(np.float32)


def scale_constants(fmt: BlockFormat, rule: int, tensor_scale: float) -> tuple:
    """The ``sc`` tuple of the encode kernels."""
    elem = fmt.element
    return (
        fmt.scale_kind,
        rule,
        elem.emax,
        np.float32(1.0 / elem.max_normal),
        np.float32(elem.max_normal),
        np.float32(tensor_scale),
        (fmt.scale.element or elem).kernel_constants(),
    )


def nvfp4_tensor_scale(amax: float) -> np.float32:
    """FP32 decode scale ``amax / (6 * 448)``, at least 2^-126 (1.0 for an all-zero tensor)."""
    if amax == 0.0:
        return np.float32(1.0)
    return max(np.float32(amax) / np.float32(NVFP4_TENSOR_RANGE), MIN_TENSOR_SCALE)


def split_shape(shape: tuple, axis: int) -> tuple[int, int, int]:
    return math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1 :])


def quantize(x, format: str | BlockFormat = "mxfp4", axis: int = -1, *, scale_rule: str = "floor",
             block_size: int | None = None) -> QuantizedTensor:
    """Quantize ``x`` along ``axis`` in blocks and pack the codes.

    format: a name from the format table (``mxfp4``, ``mxint8``, ``nvfp4``, ...).
    scale_rule: ``floor`` (OCP), ``ceil`` or ``rceil`` (see ``formats.SCALE_RULES``);
    NVFP4's E4M3 scales are always rounded to nearest.
    block_size: overrides the format's block size.
    """
    fmt = get_format(format)
    if block_size is not None:
        fmt = fmt.with_block_size(block_size)
    rule = check_scale_rule(scale_rule)
    if fmt.scale.element is not None and scale_rule != "floor":
        raise ValueError(f"scale_rule chooses E8M0 exponents; {fmt.name}'s {fmt.scale.name} block scales are "
                         f"rounded to nearest, so leave scale_rule at 'floor' (got {scale_rule!r})")
    x = as_array(x)
    axis = check_axis(axis, x.ndim)
    bits, lut = fp32_bits(x)
    outer, n, inner = split_shape(x.shape, axis)
    B = fmt.block_size
    n_blocks = math.ceil(n / B)
    rows = outer * inner
    codes = np.empty((rows, n_blocks * fmt.bytes_per_block), np.uint8)
    scales = np.empty((rows, n_blocks), np.uint8)
    tensor_scale = None
    if fmt.tensor_scale:
        amax = max(parallel_map(bits.size, lambda i0, i1: kernels.finite_amax(bits, lut, i0, i1), 1 << 16))
        tensor_scale = nvfp4_tensor_scale(float(np.int32(amax).view(np.float32)))
    ek = fmt.element.kernel_constants()
    sc = scale_constants(fmt, rule, tensor_scale or 1.0)
    full = n // B if inner == 1 else 0
    parallel_map(rows * full, lambda t0, t1: kernels.encode(
        bits, lut, n, B, fmt.element.bits, fmt.scale_kind, t0, t1, ek, sc, codes, scales))
    parallel_map(rows * (n_blocks - full), lambda t0, t1: kernels.encode_gathered(
        bits, lut, n, inner, B, fmt.element.bits, fmt.scale_kind, full, t0, t1, ek, sc, codes, scales),
        MIN_GATHERED_BLOCKS)
    return QuantizedTensor(fmt, x.shape, axis, codes, scales, tensor_scale, scale_rule)


def dequantize(q: QuantizedTensor) -> np.ndarray:
    """Unpack and dequantize to float32 in the original shape."""
    if not isinstance(q, QuantizedTensor):
        raise ValueError(f"q must be a QuantizedTensor, got {type(q).__name__}")  # noqa: TRY004 (callers report ValueErrors)
    fmt = q.format
    values, scale_values = kernel_tables(fmt)
    outer, n, inner = split_shape(q.shape, q.axis)
    out = np.empty(q.numel, np.float32)
    rows = outer * inner
    B, width = fmt.block_size, fmt.element.bits
    codes, scales = q.codes.reshape(rows, -1), q.scales.reshape(rows, -1)
    ts = np.float32(q.tensor_scale or 1.0)
    full = n // B if inner == 1 else 0
    parallel_map(rows * full, lambda t0, t1: kernels.decode(
        codes, scales, n, B, width, t0, t1, values, scale_values, ts, out))
    parallel_map(rows * (math.ceil(n / B) - full), lambda t0, t1: kernels.decode_scattered(
        codes, scales, n, inner, B, width, full, t0, t1, values, scale_values, ts, out), MIN_GATHERED_BLOCKS)
    return out.reshape(q.shape)


def quantize_dequantize(x, format: str | BlockFormat = "mxfp4", axis: int = -1, **options) -> np.ndarray:
    """``dequantize(quantize(x, ...))``: the values the hardware format can hold, as float32."""
    return dequantize(quantize(x, format, axis, **options))
