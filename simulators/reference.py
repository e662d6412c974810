"""Plain NumPy reference of the block quantization rules, for tests.

Written independently of the Numba kernels: scales come from ``np.frexp`` instead of
bit fields, elements round by searching the format's value table instead of by bit
tricks, and packing uses whole-array shifts. It allocates freely and is slow; its
only job is to agree with :mod:`codec` bit for bit.
"""

from __future__ import annotations

import math

import numpy as np

from .codec import (
    QuantizedTensor,
    as_array,
    check_axis,
    check_scale_rule,
    nvfp4_tensor_scale,
)
from .formats import BlockFormat, ElementType, code_group, get_format


def round_to_grid(v: np.ndarray, elem: ElementType) -> np.ndarray:
    """Element codes of ``v`` (float64): nearest value, ties to the even code, saturating."""
    mags = elem.magnitudes[: elem.max_magnitude_code + 1]
    a = np.abs(v)
    hi = np.clip(np.searchsorted(mags, a), 1, len(mags) - 1)
    lo = hi - 1
    d_lo, d_hi = a - mags[lo], mags[hi] - a
    up = (d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0))
    mag = np.where(a >= mags[-1], len(mags) - 1, np.where(up, hi, lo))
    neg = np.signbit(v)
    if elem.kind == "float":
        return (mag | (neg.astype(np.int64) << (elem.bits - 1))).astype(np.uint8)
    # INT: the negative side may reach -2^(b-1) when clipping is asymmetric
    neg_mag = np.minimum(np.rint(a * 2.0**elem.frac_bits), -elem.int_min).astype(np.int64)
    k = np.where(neg, -neg_mag, mag)
    return (k & ((1 << elem.bits) - 1)).astype(np.uint8)


def e8m0_exponents(amax: np.ndarray, fmt: BlockFormat, rule: str) -> np.ndarray:
    """Unbiased E8M0 exponent per block from the block amax (float64, finite)."""
    elem = fmt.element
    d = amax
    if rule == "rceil":
        d = (amax.astype(np.float32) * np.float32(1.0 / elem.max_normal)).astype(np.float64)
    mant, exp = np.frexp(d)  # d = mant * 2^exp, mant in [0.5, 1)
    e = exp - 1
    if rule != "floor":
        e = e + (mant != 0.5)
    if rule != "rceil":
        e = e - elem.emax
    return np.where(d == 0, -127, np.clip(e, -127, 127))


def pack_codes(codes: np.ndarray, bits: int) -> np.ndarray:
    """Pack uint8 ``bits``-bit codes (last axis) into bytes, a :func:`.formats.code_group` at a time:
    2 per byte for 4 bits, 4 per 3 bytes for 6, 1 per byte for 8."""
    per, nbytes = code_group(bits)
    c = codes.astype(np.uint64).reshape(*codes.shape[:-1], -1, per)
    word = np.bitwise_or.reduce([c[..., t] << np.uint64(bits * t) for t in range(per)])
    out = np.stack([(word >> np.uint64(8 * j)) & np.uint64(0xFF) for j in range(nbytes)], axis=-1)
    return out.astype(np.uint8).reshape(*codes.shape[:-1], -1)


def unpack_codes(packed: np.ndarray, bits: int) -> np.ndarray:
    """Inverse of :func:`pack_codes`."""
    if bits == 8:  # a code per byte
        return np.array(packed, dtype=np.uint8)
    per, nbytes = code_group(bits)
    b = packed.astype(np.uint64).reshape(*packed.shape[:-1], -1, nbytes)
    word = np.bitwise_or.reduce([b[..., j] << np.uint64(8 * j) for j in range(nbytes)])
    mask = np.uint64((1 << bits) - 1)
    out = np.stack([(word >> np.uint64(bits * t)) & mask for t in range(per)], axis=-1)
    return out.astype(np.uint8).reshape(*packed.shape[:-1], -1)


def blocks_of(x: np.ndarray, axis: int, block: int) -> np.ndarray:
    """x (float64) with ``axis`` last, zero-padded and split into (rows, n_blocks, block)."""
    moved = np.moveaxis(x.astype(np.float64), axis, -1)
    rows = moved.reshape(-1, moved.shape[-1])
    n_blocks = math.ceil(rows.shape[1] / block)
    padded = np.zeros((rows.shape[0], n_blocks * block))
    padded[:, : rows.shape[1]] = rows
    return padded.reshape(rows.shape[0], n_blocks, block)


def quantize_reference(x, format: str | BlockFormat = "mxfp4", axis: int = -1, *, scale_rule: str = "floor",
                       block_size: int | None = None) -> QuantizedTensor:
    """The same result as :func:`codec.quantize`, computed the slow, obvious way."""
    fmt = get_format(format)
    if block_size is not None:
        fmt = fmt.with_block_size(block_size)
    check_scale_rule(scale_rule)
    x = as_array(x)
    axis = check_axis(axis, x.ndim)
    blk = blocks_of(x, axis, fmt.block_size)
    bad = ~np.isfinite(blk).all(axis=-1)
    amax = np.where(bad, 0.0, np.abs(np.where(np.isfinite(blk), blk, 0.0)).max(axis=-1))
    tensor_scale = None
    if fmt.tensor_scale:
        finite = np.abs(blk[np.isfinite(blk)])
        tensor_scale = nvfp4_tensor_scale(float(finite.max()) if finite.size else 0.0)
        target = (amax.astype(np.float32) / np.float32(fmt.element.max_normal)) / tensor_scale
        scale_codes = round_to_grid(target.astype(np.float64), fmt.scale.element)
        decode_scale = fmt.scale.values[scale_codes].astype(np.float32) * tensor_scale
        with np.errstate(divide="ignore"):
            inv = np.float32(1.0) / decode_scale
        inv = np.where(np.isfinite(inv), inv, np.float32(0.0)).astype(np.float32)
        with np.errstate(invalid="ignore"):  # Inf * 0 in blocks whose scale is NaN anyway
            scaled = (blk.astype(np.float32) * inv[..., None]).astype(np.float64)
        nan_code = 0x7F
    else:
        e = e8m0_exponents(amax, fmt, scale_rule)
        scale_codes = (e + 127).astype(np.uint8)
        scaled = blk / 2.0 ** e[..., None]
        nan_code = 0xFF
    scale_codes = np.where(bad, nan_code, scale_codes).astype(np.uint8)
    codes = np.where(bad[..., None], 0, round_to_grid(np.where(np.isfinite(scaled), scaled, 0.0), fmt.element))
    packed = pack_codes(codes.astype(np.uint8), fmt.element.bits)
    lead = x.shape[:axis] + x.shape[axis + 1 :]
    return QuantizedTensor(fmt, x.shape, axis, packed.reshape(lead + (-1,)), scale_codes.reshape(lead + (-1,)),
                           tensor_scale, scale_rule)


def dequantize_reference(q: QuantizedTensor) -> np.ndarray:
    """The same result as :func:`codec.dequantize`, computed with whole-array NumPy."""
    fmt = q.format
    rows = q.codes.reshape(-1, q.codes.shape[-1])
    codes = unpack_codes(rows, fmt.element.bits).reshape(rows.shape[0], -1, fmt.block_size)
    values = fmt.element.values.astype(np.float32)[codes]
    scales = fmt.scale.values.astype(np.float32)[q.scales.reshape(rows.shape[0], -1)]
    with np.errstate(invalid="ignore", over="ignore"):
        out = (values * scales[..., None]) * np.float32(q.tensor_scale or 1.0)
    n = q.shape[q.axis]
    out = out.reshape(rows.shape[0], -1)[:, :n]
    moved_shape = q.shape[: q.axis] + q.shape[q.axis + 1 :] + (n,)
    return np.moveaxis(out.reshape(moved_shape), -1, q.axis).astype(np.float32)
