"""Numba kernels: block quantize+pack and unpack+dequantize.

The kernels take the constants of ``formats.ElementType.kernel_constants`` and never a
format name, so one compiled kernel serves every row of the format table. The common
case, blocks of 32 with an E8M0 scale (every MX format), gets one loop nest per code
width with the block size, width and scale kind as constants, which LLVM unrolls and
vectorizes; every other case shares one generic nest. Each is compiled once and cached.

Input arrives as FP32 bit patterns: float32 arrays as their ``uint32`` view, 16-bit
floats as ``uint16`` codes widened through a 65536-entry table.

Layout: the quantized axis is moved last. Row ``r`` of ``codes`` holds that row's
blocks one after another, each ``bytes_per_block`` long; FP4/INT4 put two codes per
byte (low nibble first), FP6 four codes in three bytes (little-endian bit order),
8-bit codes one per byte. ``scales[r, b]`` is the code of block ``b``'s scale.

Every kernel works on a range ``[t0, t1)`` of blocks, numbered row-major over
(row, block), and releases the GIL, so callers split the work across threads.
"""

import numpy as np
from numba import njit, types
from numba.extending import overload

FP32_INF = 0x7F800000
E8M0_NAN = 0xFF
E4M3_NAN = 0x7F
RULE_FLOOR, RULE_RCEIL = 0, 2  # indices in formats.SCALE_RULES (1 is ceil)
SCALE_E8M0, SCALE_E4M3 = 0, 1
FAST_BLOCK = 32  # the MX block size, given loop nests of its own
NV_BLOCK = 16  # NVFP4's block of 4-bit codes with an E4M3 scale, given a loop nest of its own too


@njit(inline="always")
def as_f32(bits):
    return np.int32(bits).view(np.float32)


@njit(inline="always")
def as_i64(value):
    return np.int64(np.float32(value).view(np.int32))


def load_bits(x, lut, i):
    """FP32 bit pattern of element ``i`` of ``x`` (int64)."""


@overload(load_bits, inline="always")
def _load_bits(x, lut, i):
    if x.dtype == types.uint32:
        return lambda x, lut, i: np.int64(x[i])
    return lambda x, lut, i: np.int64(lut[x[i]])


@njit(inline="always")
def pow2_f32(e):
    """2^e as float32 for e in [-127, 127] (2^-127 is an FP32 subnormal)."""
    if e == -127:
        return as_f32(0x00400000)
    return as_f32((e + 127) << 23)


@njit(inline="always")
def exponent_of(d):
    """``(floor(log2 d), d is not a power of two)`` for positive FP32 bits ``d``."""
    if d >= 0x00800000:
        return (d >> 23) - 127, (d & 0x7FFFFF) != 0
    db = np.float64(as_f32(d)).view(np.int64)  # FP32 subnormals are FP64 normals
    return ((db >> 52) & 0x7FF) - 1023, (db & 0xFFFFFFFFFFFFF) != 0


@njit(inline="always")
def e8m0_exponent(amax_bits, rule, emax, rcp_max):
    """Unbiased E8M0 exponent for a finite block amax (given as FP32 bits)."""
    d = amax_bits
    if rule == RULE_RCEIL:
        d = as_i64(as_f32(amax_bits) * rcp_max)
    if d == 0:
        return -127
    e, inexact = exponent_of(d)
    if rule != RULE_FLOOR and inexact:
        e += 1
    if rule != RULE_RCEIL:
        e -= emax
    return min(max(e, -127), 127)


@njit(inline="always")
def round_element(vb, ek):
    """Code of the scaled value with FP32 bits ``vb``: round half to even, saturate.

    Normals round on the FP32 mantissa with integer half-even; subnormals by adding
    ``2^(emin - mbits + 23)`` so that the FPU's own rounding lands on the grid. All
    arithmetic stays in 32 bits so that LLVM fills whole vector registers.
    """
    twos, bits, max_pos, max_neg, min_normal, magic, shift, half, rebias = (
        np.int32(ek[0]), np.int32(ek[1]), np.int32(ek[3]), np.int32(ek[4]), np.int32(ek[5]),
        np.int32(ek[6]), np.int32(ek[7]), np.int32(ek[8]), np.int32(ek[9]),
    )
    a = np.int32(vb & np.int32(0x7FFFFFFF))
    neg = np.int32(np.int32(vb >> np.int32(31)) & np.int32(1))
    normal = np.int32(np.int32(a - rebias + half + np.int32(np.int32(a >> shift) & np.int32(1))) >> shift)
    sub = np.int32(np.float32(as_f32(a) + as_f32(magic)).view(np.int32) - magic)
    mag = np.int32(min(sub if a < min_normal else normal, max_neg if neg else max_pos))
    if twos:
        return np.int32(np.int32(-mag) & np.int32(np.int32(1 << bits) - np.int32(1))) if neg else mag
    return np.int32(mag | np.int32(neg << np.int32(bits - 1)))


@njit(inline="always")
def element_value(code, ek):
    """FP32 value of a non-negative float code: the inverse of ``round_element``."""
    if code >= (1 << (23 - ek[7])):
        return as_f32((code << ek[7]) + ek[9])
    return np.float32(np.float32(code) * as_f32(ek[6])) * np.float32(2.0**-23)


@njit(inline="always")
def block_scale(amax_bits, scale_kind, sc):
    """(scale code, FP32 multiplier that maps the block onto the element grid).

    On the fast path ``scale_kind`` is a compile-time constant: the E4M3 branch, even
    untaken, would keep LLVM from vectorizing the E8M0 element loops beside it.
    """
    _kind, rule, emax, rcp_max, elem_max, ts, sk = sc
    if amax_bits >= FP32_INF:
        return (E4M3_NAN if scale_kind == SCALE_E4M3 else E8M0_NAN), np.float32(0.0)
    if scale_kind == SCALE_E8M0:
        e = e8m0_exponent(amax_bits, rule, emax, rcp_max)
        return e + 127, pow2_f32(-e)
    # E4M3 block scale: (amax / elem_max) in units of the FP32 tensor scale
    target = np.float32(np.float32(as_f32(amax_bits) / elem_max) / ts)
    code = round_element(as_i64(target), sk)
    decode_scale = np.float32(element_value(code, sk) * ts)
    inv = np.float32(0.0)
    if decode_scale != 0.0:
        inv = np.float32(np.float32(1.0) / decode_scale)
        if inv == np.inf:  # FP32-subnormal decode scale: the block is encoded as zeros
            inv = np.float32(0.0)
    return code, inv


@njit(inline="always")
def encode_block(src, lut, base, B, bits, scale_kind, ek, sc, cbuf, codes, row, off):
    """Quantize ``B`` contiguous elements of ``src`` from ``base``; pack into ``codes[row, off:]``.

    Returns the block's scale code. On the fast path ``B``, ``bits`` and ``scale_kind``
    are constants: a runtime branch on any of them around these loops stops LLVM
    vectorizing them, and so does indexing ``codes`` through a row view.
    """
    amax = np.int32(0)
    for j in range(B):
        amax = max(amax, np.int32(load_bits(src, lut, base + j) & 0x7FFFFFFF))
    scode, inv = block_scale(np.int64(amax), scale_kind, sc)
    for j in range(B):
        cbuf[j] = round_element(np.float32(as_f32(load_bits(src, lut, base + j)) * inv).view(np.int32), ek)
    if bits == 8:
        for q in range(B):
            codes[row, off + q] = np.uint8(cbuf[q])
    elif bits == 4:
        for q in range(B // 2):
            codes[row, off + q] = np.uint8(cbuf[2 * q] | (cbuf[2 * q + 1] << 4))
    else:
        for g in range(B // 4):
            w = cbuf[4 * g] | (cbuf[4 * g + 1] << 6) | (cbuf[4 * g + 2] << 12) | (cbuf[4 * g + 3] << 18)
            codes[row, off + 3 * g] = np.uint8(w & 0xFF)
            codes[row, off + 3 * g + 1] = np.uint8((w >> 8) & 0xFF)
            codes[row, off + 3 * g + 2] = np.uint8(w >> 16)
    if amax >= FP32_INF:  # NaN scale: the element codes carry nothing, store zeros
        for q in range(B * bits // 8):
            codes[row, off + q] = 0
    return scode


@njit(inline="always")
def encode_run(x, lut, n, B, bits, scale_kind, t0, t1, ek, sc, codes, scales):
    """Full blocks ``t0 .. t1``, numbered row-major over (row, block), read in place."""
    full = n // B
    bpb = B * bits // 8
    cbuf = np.empty(B, np.int32)
    r = t0 // full
    b = t0 - r * full
    for _ in range(t1 - t0):
        scales[r, b] = encode_block(x, lut, r * n + b * B, B, bits, scale_kind, ek, sc, cbuf, codes, r, b * bpb)
        b += 1
        if b == full:
            b = 0
            r += 1


@njit(nogil=True, cache=True)
def encode(x, lut, n, B, t0, t1, ek, sc, codes, scales):
    """Quantize+pack full blocks ``t0 .. t1`` of rows of length ``n`` stored contiguously.

    ek: element constants; sc: (scale kind, rule index, emax, 1/max_normal, max_normal,
    tensor scale, scale-type constants).
    """
    bits = ek[1]
    if B == FAST_BLOCK and sc[0] == SCALE_E8M0:
        if bits == 4:
            encode_run(x, lut, n, FAST_BLOCK, 4, SCALE_E8M0, t0, t1, ek, sc, codes, scales)
        elif bits == 8:
            encode_run(x, lut, n, FAST_BLOCK, 8, SCALE_E8M0, t0, t1, ek, sc, codes, scales)
        else:
            encode_run(x, lut, n, FAST_BLOCK, 6, SCALE_E8M0, t0, t1, ek, sc, codes, scales)
    elif B == NV_BLOCK and sc[0] == SCALE_E4M3 and bits == 4:
        encode_run(x, lut, n, NV_BLOCK, 4, SCALE_E4M3, t0, t1, ek, sc, codes, scales)
    else:
        encode_run(x, lut, n, B, bits, sc[0], t0, t1, ek, sc, codes, scales)


@njit(nogil=True, cache=True)
def encode_gathered(x, lut, n, inner, B, first, t0, t1, ek, sc, codes, scales):
    """Blocks ``first ..`` of every row (``t`` counts them row-major), via a gather buffer.

    Row ``r`` is ``(o, i) = divmod(r, inner)`` of the input viewed as ``(outer, n, inner)``;
    the buffer takes the strided elements and zero-pads a partial last block.
    """
    bits = ek[1]
    per_row = (n + B - 1) // B - first
    bpb = B * bits // 8
    src = np.empty(B, np.uint32)
    cbuf = np.empty(B, np.int32)
    identity = np.empty(0, np.uint32)
    for t in range(t0, t1):
        r = t // per_row
        b = first + (t - r * per_row)
        o = r // inner
        i = r - o * inner
        k0 = b * B
        valid = min(B, n - k0)
        base = (o * n + k0) * inner + i
        for j in range(valid):
            src[j] = np.uint32(load_bits(x, lut, base + j * inner))
        for j in range(valid, B):
            src[j] = 0
        scales[r, b] = encode_block(src, identity, 0, B, bits, sc[0], ek, sc, cbuf, codes, r, b * bpb)


@njit(inline="always")
def decode_block(codes, row, off, B, bits, values, sv, ts, cbuf, out, base, step, count):
    """Unpack the block at ``codes[row, off:]``; write ``count`` values to ``out`` by ``step``."""
    if bits == 8:
        for q in range(B):
            cbuf[q] = codes[row, off + q]
    elif bits == 4:
        for q in range(B // 2):
            w = codes[row, off + q]
            cbuf[2 * q] = w & 0xF
            cbuf[2 * q + 1] = w >> 4
    else:
        for g in range(B // 4):
            w = (
                np.int32(codes[row, off + 3 * g])
                | (np.int32(codes[row, off + 3 * g + 1]) << 8)
                | (np.int32(codes[row, off + 3 * g + 2]) << 16)
            )
            cbuf[4 * g] = w & 63
            cbuf[4 * g + 1] = (w >> 6) & 63
            cbuf[4 * g + 2] = (w >> 12) & 63
            cbuf[4 * g + 3] = w >> 18
    for j in range(count):
        out[base + j * step] = np.float32(np.float32(values[cbuf[j]] * sv) * ts)


@njit(inline="always")
def decode_run(codes, scales, n, B, bits, t0, t1, values, scale_values, ts, out):
    """Full blocks ``t0 .. t1`` of contiguous rows, numbered row-major."""
    full = n // B
    bpb = B * bits // 8
    cbuf = np.empty(B, np.int32)
    r = t0 // full
    b = t0 - r * full
    for _ in range(t1 - t0):
        decode_block(codes, r, b * bpb, B, bits, values, scale_values[scales[r, b]], ts, cbuf, out, r * n + b * B,
                     1, B)
        b += 1
        if b == full:
            b = 0
            r += 1


@njit(nogil=True, cache=True)
def decode(codes, scales, n, B, bits, t0, t1, values, scale_values, ts, out):
    """Unpack+dequantize full blocks ``t0 .. t1`` of contiguous rows into flat float32 ``out``.

    Element value times block scale is exact; NVFP4 then multiplies by its FP32 tensor
    scale ``ts`` (1.0 for MX formats, which leaves every value unchanged).
    """
    if B == FAST_BLOCK and bits == 4:
        decode_run(codes, scales, n, FAST_BLOCK, 4, t0, t1, values, scale_values, ts, out)
    elif B == FAST_BLOCK and bits == 8:
        decode_run(codes, scales, n, FAST_BLOCK, 8, t0, t1, values, scale_values, ts, out)
    elif B == FAST_BLOCK:
        decode_run(codes, scales, n, FAST_BLOCK, 6, t0, t1, values, scale_values, ts, out)
    elif B == NV_BLOCK and bits == 4:
        decode_run(codes, scales, n, NV_BLOCK, 4, t0, t1, values, scale_values, ts, out)
    else:
        decode_run(codes, scales, n, B, bits, t0, t1, values, scale_values, ts, out)


@njit(nogil=True, cache=True)
def decode_scattered(codes, scales, n, inner, B, bits, first, t0, t1, values, scale_values, ts, out):
    """Blocks ``first ..`` of every row, written strided and cut short at the row end."""
    per_row = (n + B - 1) // B - first
    bpb = B * bits // 8
    cbuf = np.empty(B, np.int32)
    for t in range(t0, t1):
        r = t // per_row
        b = first + (t - r * per_row)
        o = r // inner
        i = r - o * inner
        k0 = b * B
        decode_block(codes, r, b * bpb, B, bits, values, scale_values[scales[r, b]], ts, cbuf, out,
                     (o * n + k0) * inner + i, inner, min(B, n - k0))


@njit(nogil=True, cache=True)
def finite_amax(x, lut, i0, i1):
    """Largest finite magnitude among ``x[i0:i1]`` as FP32 bits (0 if none)."""
    m = np.int64(0)
    for i in range(i0, i1):
        a = load_bits(x, lut, i) & 0x7FFFFFFF
        if a < FP32_INF:
            m = max(m, a)
    return m
