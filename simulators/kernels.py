"""Numba kernels: block quantize+pack and unpack+dequantize.

The kernels take the constants of ``formats.ElementType.kernel_constants`` and never a
format name, so one kernel serves every row of the format table, whatever its code width.
The contiguous-row kernels compile a loop nest with the block size, code width and scale
kind as constants, which LLVM unrolls and vectorizes, for the shapes of the standard rows
(blocks of 32 with E8M0 scales and 4-, 6- or 8-bit codes; blocks of 16 with E4M3 scales
and 4-bit codes): a speed choice, not a format switch, since every other shape runs the
same loops with run-time values. Each is compiled once and cached.

Input arrives as FP32 bit patterns: float32 arrays as their ``uint32`` view, 16-bit
floats as ``uint16`` codes widened through a 65536-entry table.

Layout: the quantized axis is moved last. Row ``r`` of ``codes`` holds that row's
blocks one after another, each ``bytes_per_block`` long; FP4/INT4 put two codes per
byte (low nibble first), FP6 four codes in three bytes (little-endian bit order),
8-bit codes one per byte: in general the smallest whole-byte group of codes
(``formats.code_group``) as one little-endian word. ``scales[r, b]`` is the code of
block ``b``'s scale.

Every kernel works on a range ``[t0, t1)`` of blocks, numbered row-major over
(row, block), and releases the GIL, so callers split the work across threads. It
cuts the range into contiguous stretches of a row and hands each, as views, to
``encode_span`` or ``decode_span``, which work a CHUNK of blocks at a time.
"""

import numpy as np
from numba import njit, types
from numba.extending import intrinsic, overload

FP32_INF = 0x7F800000
E8M0_NAN = 0xFF
E4M3_NAN = 0x7F
RULE_FLOOR, RULE_RCEIL = 0, 2  # indices in formats.SCALE_RULES (1 is ceil)
SCALE_E8M0, SCALE_E4M3 = 0, 1
MX_BLOCK = 32  # every MX format's block, compiled in for its code widths
NV_BLOCK = 16  # NVFP4's block of 4-bit codes with an E4M3 scale, compiled in too
CHUNK = 64  # blocks per pass of the span kernels: their scratch stays in L1 between passes
TILE = 16  # rows gathered side by side along a non-last quantized axis: a cache line of FP32
GATHER_CHUNK = 16  # blocks per gathered tile, which then fits in L1


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


@intrinsic
def ashr32(typingctx, value, amount):
    """``value >> amount`` on int32 (amount below 32).

    Numba widens every shift to 64 bits, and with a run-time amount LLVM cannot narrow
    it back, so the rounding loops ran at half the vector width behind a wall of
    widen/narrow shuffles; this shift stays 32 bits wide.
    """
    def codegen(context, builder, signature, args):
        return builder.ashr(args[0], args[1])

    return types.int32(types.int32, types.int32), codegen


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
    neg = ashr32(np.int32(vb), np.int32(31))  # all ones for a negative value, else zero
    normal = ashr32(np.int32(a - rebias + half + np.int32(ashr32(a, shift) & np.int32(1))), shift)
    sub = np.int32(np.float32(as_f32(a) + as_f32(magic)).view(np.int32) - magic)
    limit = np.int32(max_pos ^ np.int32(np.int32(max_pos ^ max_neg) & neg))
    mag = np.int32(min(sub if a < min_normal else normal, limit))
    if twos:
        return np.int32(np.int32(np.int32(mag ^ neg) - neg) & np.int32(np.int32(1 << bits) - np.int32(1)))
    return np.int32(mag | np.int32(np.int32(1 << (bits - 1)) & neg))


@njit(inline="always")
def element_value(code, ek):
    """FP32 value of a non-negative float code: the inverse of ``round_element``."""
    if code >= (1 << (23 - ek[7])):
        return as_f32((code << ek[7]) + ek[9])
    return np.float32(np.float32(code) * as_f32(ek[6])) * np.float32(2.0**-23)


@njit(inline="always")
def block_scale(amax_bits, scale_kind, sc):
    """(scale code, FP32 multiplier that maps the block onto the element grid).

    In ``encode`` ``scale_kind`` is a compile-time constant: the E4M3 branch, even
    untaken, would keep LLVM from vectorizing the E8M0 element loops beside it.
    """
    _kind, rule, emax, rcp_max, elem_max, ts, sk = sc
    if scale_kind == SCALE_E8M0:
        if amax_bits >= FP32_INF:
            return E8M0_NAN, np.float32(0.0)
        e = e8m0_exponent(amax_bits, rule, emax, rcp_max)
        return e + 127, pow2_f32(-e)
    # E4M3 block scale: (amax / elem_max) in units of the FP32 tensor scale. Written with
    # no early exit and no zero test before the division (the encode kernels use NumPy's
    # error model), so that LLVM vectorizes it across the blocks of a chunk.
    target = np.float32(np.float32(as_f32(amax_bits) / elem_max) / ts)
    code = round_element(as_i64(target), sk)
    inv = np.float32(np.float32(1.0) / np.float32(element_value(code, sk) * ts))
    finite = amax_bits < FP32_INF
    # A zero or FP32-subnormal decode scale has no finite inverse: the block is encoded as zeros.
    return (code if finite else E4M3_NAN), (inv if finite and inv != np.inf else np.float32(0.0))


@njit(inline="always")
def code_group(bits):
    """(codes, bytes) of a whole-byte group of ``bits``-bit codes, as ``formats.code_group``.

    Not that function compiled: Numba's on-disk cache of these kernels tracks this file
    only, and this loop folds to constants where ``math.gcd`` stays a run-time loop
    (dequantize ran 15-30% slower with it).
    """
    codes = 8
    while codes % 2 == 0 and (codes // 2) * bits % 8 == 0:
        codes //= 2
    return codes, codes * bits // 8


@njit(inline="always")
def pack_codes(cbuf, out, count, bits):
    """``count`` codes of ``cbuf`` into ``out``, a code group at a time as one little-endian word.

    With ``bits`` a compile-time constant the group loops unroll; LLVM narrows the 64-bit
    word to the bits each byte needs and vectorizes across groups.
    """
    per, nbytes = code_group(bits)
    for g in range(count // per):
        w = np.int64(0)
        for j in range(per):
            w |= np.int64(cbuf[per * g + j]) << (bits * j)
        for j in range(nbytes):
            out[nbytes * g + j] = np.uint8((w >> (8 * j)) & 0xFF)


@njit(inline="always")
def unpack_codes(codes, cbuf, count, bits):
    """Inverse of ``pack_codes``: ``count`` codes from the packed bytes ``codes`` into ``cbuf``."""
    per, nbytes = code_group(bits)
    mask = (1 << bits) - 1
    for g in range(count // per):
        w = np.int64(0)
        for j in range(nbytes):
            w |= np.int64(codes[nbytes * g + j]) << (8 * j)
        for j in range(per):
            cbuf[per * g + j] = np.int32((w >> (bits * j)) & mask)


@njit(inline="always")
def encode_span(src, lut, B, bits, scale_kind, ek, sc, codes, scales, amax, inv, cbuf):
    """Quantize+pack the ``len(scales)`` whole blocks at the start of ``src`` into ``codes``.

    Every array is a view that starts at the span: with a run-time offset in an index,
    Numba guards the index against negative values, and the guard turns each vector
    load and store into a gather or scatter (2-3x slower). The blocks go CHUNK at a
    time through four passes (amax, scale, round, pack) whose loops LLVM vectorizes,
    with ``amax``, ``inv`` and ``cbuf`` as scratch. From ``encode`` ``B``, ``bits`` and
    ``scale_kind`` are constants: a run-time branch on any of them around these loops
    stops LLVM vectorizing them.
    """
    bpb = B * bits // 8
    count = len(scales)
    for c0 in range(0, count, CHUNK):
        m = min(CHUNK, count - c0)
        xs = src[c0 * B:(c0 + m) * B]
        out = codes[c0 * bpb:(c0 + m) * bpb]
        block_scales = scales[c0:c0 + m]
        # The block length as a run-time value: with the constant, LLVM unrolls the inner loop and
        # vectorizes across blocks with strided gathers (3x slower on AMD Zen 4 at 16 elements).
        width = len(xs) // m
        for k in range(m):
            a = np.int32(0)
            for j in range(width):
                a = max(a, np.int32(load_bits(xs, lut, k * width + j) & 0x7FFFFFFF))
            amax[k] = a
        for k in range(m):
            block_scales[k], inv[k] = block_scale(np.int64(amax[k]), scale_kind, sc)
        for k in range(m):
            v = inv[k]
            for j in range(B):
                cbuf[k * B + j] = round_element(np.float32(as_f32(load_bits(xs, lut, k * B + j)) * v).view(np.int32), ek)
        pack_codes(cbuf, out, m * B, bits)
        for k in range(m):
            if amax[k] >= FP32_INF:  # NaN scale: the element codes carry nothing, store zeros
                out[k * bpb:(k + 1) * bpb] = 0


@njit(inline="always")
def encode_run(x, lut, n, B, bits, scale_kind, t0, t1, ek, sc, codes, scales):
    """Full blocks ``t0 .. t1``, numbered row-major over (row, block), read in place a row's stretch at a time."""
    full = n // B
    bpb = B * bits // 8
    amax, inv, cbuf = np.empty(CHUNK, np.int32), np.empty(CHUNK, np.float32), np.empty(CHUNK * B, np.int32)
    t = t0
    while t < t1:
        r = t // full
        b0 = t - r * full
        b1 = min(full, b0 + t1 - t)
        encode_span(x[r * n + b0 * B:r * n + b1 * B], lut, B, bits, scale_kind, ek, sc, codes[r, b0 * bpb:b1 * bpb],
                    scales[r, b0:b1], amax, inv, cbuf)
        t += b1 - b0


@njit(nogil=True, cache=True, error_model="numpy")
def encode(x, lut, n, B, bits, scale_kind, t0, t1, ek, sc, codes, scales):
    """Quantize+pack full blocks ``t0 .. t1`` of rows of length ``n`` stored contiguously.

    ek: element constants; sc: (scale kind, rule index, emax, 1/max_normal, max_normal,
    tensor scale, scale-type constants). The standard rows' shapes get their block size,
    code width and scale kind compiled in as constants, which lets LLVM unroll and vectorize
    the span loops; any other shape runs the same loops with run-time values.
    """
    if B == MX_BLOCK and scale_kind == SCALE_E8M0 and bits == 4:
        encode_run(x, lut, n, MX_BLOCK, 4, SCALE_E8M0, t0, t1, ek, sc, codes, scales)
    elif B == MX_BLOCK and scale_kind == SCALE_E8M0 and bits == 6:
        encode_run(x, lut, n, MX_BLOCK, 6, SCALE_E8M0, t0, t1, ek, sc, codes, scales)
    elif B == MX_BLOCK and scale_kind == SCALE_E8M0 and bits == 8:
        encode_run(x, lut, n, MX_BLOCK, 8, SCALE_E8M0, t0, t1, ek, sc, codes, scales)
    elif B == NV_BLOCK and scale_kind == SCALE_E4M3 and bits == 4:
        encode_run(x, lut, n, NV_BLOCK, 4, SCALE_E4M3, t0, t1, ek, sc, codes, scales)
    else:
        encode_run(x, lut, n, B, bits, scale_kind, t0, t1, ek, sc, codes, scales)


@njit(inline="always")
def gathered_stretch(t, t1, per_row, first, inner):
    """Where the next stretch of gathered blocks starts: (row, first block, end block, rows).

    From the start of a row with at least one whole row left in ``[t, t1)``, the stretch
    covers whole rows, up to TILE of them side by side along ``inner`` (their elements lie
    next to each other in memory); otherwise it is the rest of one row.
    """
    r = t // per_row
    b0 = first + (t - r * per_row)
    if b0 == first and t1 - t >= per_row:
        return r, b0, first + per_row, min(TILE, inner - r % inner, (t1 - t) // per_row)
    return r, b0, min(first + per_row, b0 + t1 - t), 1


@njit(inline="always")
def encode_gathered_run(x, lut, n, inner, B, bits, scale_kind, first, t0, t1, ek, sc, codes, scales):
    """Blocks ``first ..`` of every row (``t`` counts them row-major), via a gather buffer.

    Row ``r`` is ``(o, i) = divmod(r, inner)`` of the input viewed as ``(outer, n, inner)``.
    Up to TILE rows at a time are gathered into ``tile`` by reading their neighbouring
    elements together (a row's own elements are ``inner`` apart, one per cache line), a
    chunk of blocks at a time, zero-padding a partial last block.
    """
    per_row = (n + B - 1) // B - first
    bpb = B * bits // 8
    tile = np.empty((TILE, GATHER_CHUNK * B), np.uint32)
    amax, inv, cbuf = np.empty(CHUNK, np.int32), np.empty(CHUNK, np.float32), np.empty(CHUNK * B, np.int32)
    identity = np.empty(0, np.uint32)
    t = t0
    while t < t1:
        r, b0, b1, lanes = gathered_stretch(t, t1, per_row, first, inner)
        o = r // inner
        base = o * n * inner + (r - o * inner)
        for c0 in range(b0, b1, GATHER_CHUNK):
            c1 = min(b1, c0 + GATHER_CHUNK)
            k0, k1 = c0 * B, min(n, c1 * B)
            for k in range(k1 - k0):
                at = base + (k0 + k) * inner
                for lane in range(lanes):
                    tile[lane, k] = np.uint32(load_bits(x, lut, at + lane))
            tile[:lanes, k1 - k0:(c1 - c0) * B] = 0
            for lane in range(lanes):
                encode_span(tile[lane, :(c1 - c0) * B], identity, B, bits, scale_kind, ek, sc,
                            codes[r + lane, c0 * bpb:c1 * bpb], scales[r + lane, c0:c1], amax, inv, cbuf)
        t += lanes * (b1 - b0)


@njit(nogil=True, cache=True, error_model="numpy")
def encode_gathered(x, lut, n, inner, B, bits, scale_kind, first, t0, t1, ek, sc, codes, scales):
    """``encode_gathered_run`` with the standard rows' code widths compiled in (which the code
    group loops need to unroll); the block size stays a run-time value, as the tile loops
    vectorize better without it."""
    if bits == 4:
        encode_gathered_run(x, lut, n, inner, B, 4, scale_kind, first, t0, t1, ek, sc, codes, scales)
    elif bits == 6:
        encode_gathered_run(x, lut, n, inner, B, 6, scale_kind, first, t0, t1, ek, sc, codes, scales)
    elif bits == 8:
        encode_gathered_run(x, lut, n, inner, B, 8, scale_kind, first, t0, t1, ek, sc, codes, scales)
    else:
        encode_gathered_run(x, lut, n, inner, B, bits, scale_kind, first, t0, t1, ek, sc, codes, scales)


@njit(inline="always")
def decode_span(codes, scales, B, bits, values, scale_values, ts, out, cbuf):
    """Unpack+dequantize the ``len(scales)`` blocks at the start of ``codes`` into ``out``.

    Views that start at the span, for the reason ``encode_span`` gives. Element value
    times block scale is exact; NVFP4 then multiplies by its FP32 tensor scale ``ts``
    (1.0 for MX formats, which leaves every value unchanged).
    """
    bpb = B * bits // 8
    count = len(scales)
    for c0 in range(0, count, CHUNK):
        m = min(CHUNK, count - c0)
        cc = codes[c0 * bpb:(c0 + m) * bpb]
        block_scales = scales[c0:c0 + m]
        o = out[c0 * B:(c0 + m) * B]
        unpack_codes(cc, cbuf, m * B, bits)
        for k in range(m):
            sv = scale_values[block_scales[k]]
            for j in range(B):
                o[k * B + j] = np.float32(np.float32(values[cbuf[k * B + j]] * sv) * ts)


@njit(inline="always")
def decode_run(codes, scales, n, B, bits, t0, t1, values, scale_values, ts, out):
    """Full blocks ``t0 .. t1`` of contiguous rows, numbered row-major, a row's stretch at a time."""
    full = n // B
    bpb = B * bits // 8
    cbuf = np.empty(CHUNK * B, np.int32)
    t = t0
    while t < t1:
        r = t // full
        b0 = t - r * full
        b1 = min(full, b0 + t1 - t)
        decode_span(codes[r, b0 * bpb:b1 * bpb], scales[r, b0:b1], B, bits, values, scale_values, ts,
                    out[r * n + b0 * B:r * n + b1 * B], cbuf)
        t += b1 - b0


@njit(nogil=True, cache=True)
def decode(codes, scales, n, B, bits, t0, t1, values, scale_values, ts, out):
    """Unpack+dequantize full blocks ``t0 .. t1`` of contiguous rows into flat float32 ``out``,
    specialized on the row shapes as ``encode`` is."""
    if B == MX_BLOCK and bits == 4:
        decode_run(codes, scales, n, MX_BLOCK, 4, t0, t1, values, scale_values, ts, out)
    elif B == MX_BLOCK and bits == 6:
        decode_run(codes, scales, n, MX_BLOCK, 6, t0, t1, values, scale_values, ts, out)
    elif B == MX_BLOCK and bits == 8:
        decode_run(codes, scales, n, MX_BLOCK, 8, t0, t1, values, scale_values, ts, out)
    elif B == NV_BLOCK and bits == 4:
        decode_run(codes, scales, n, NV_BLOCK, 4, t0, t1, values, scale_values, ts, out)
    else:
        decode_run(codes, scales, n, B, bits, t0, t1, values, scale_values, ts, out)


@njit(inline="always")
def decode_scattered_run(codes, scales, n, inner, B, bits, first, t0, t1, values, scale_values, ts, out):
    """Blocks ``first ..`` of every row, decoded into a tile of up to TILE rows (as
    ``encode_gathered`` gathers them), then written out strided and cut short at the row end."""
    per_row = (n + B - 1) // B - first
    bpb = B * bits // 8
    cbuf = np.empty(CHUNK * B, np.int32)
    tile = np.empty((TILE, GATHER_CHUNK * B), np.float32)
    t = t0
    while t < t1:
        r, b0, b1, lanes = gathered_stretch(t, t1, per_row, first, inner)
        o = r // inner
        base = o * n * inner + (r - o * inner)
        for c0 in range(b0, b1, GATHER_CHUNK):
            c1 = min(b1, c0 + GATHER_CHUNK)
            for lane in range(lanes):
                decode_span(codes[r + lane, c0 * bpb:c1 * bpb], scales[r + lane, c0:c1], B, bits, values,
                            scale_values, ts, tile[lane, :(c1 - c0) * B], cbuf)
            k0, k1 = c0 * B, min(n, c1 * B)
            for k in range(k1 - k0):
                at = base + (k0 + k) * inner
                for lane in range(lanes):
                    out[at + lane] = tile[lane, k]
        t += lanes * (b1 - b0)


@njit(nogil=True, cache=True)
def decode_scattered(codes, scales, n, inner, B, bits, first, t0, t1, values, scale_values, ts, out):
    """``decode_scattered_run`` with the code widths compiled in as ``encode_gathered`` has them."""
    if bits == 4:
        decode_scattered_run(codes, scales, n, inner, B, 4, first, t0, t1, values, scale_values, ts, out)
    elif bits == 6:
        decode_scattered_run(codes, scales, n, inner, B, 6, first, t0, t1, values, scale_values, ts, out)
    elif bits == 8:
        decode_scattered_run(codes, scales, n, inner, B, 8, first, t0, t1, values, scale_values, ts, out)
    else:
        decode_scattered_run(codes, scales, n, inner, B, bits, first, t0, t1, values, scale_values, ts, out)


@njit(nogil=True, cache=True)
def finite_amax(x, lut, i0, i1):
    """Largest finite magnitude among ``x[i0:i1]`` as FP32 bits (0 if none)."""
    span = x[i0:i1]  # a view, for the reason encode_span gives
    m = np.int32(0)
    for i in range(len(span)):
        a = np.int32(load_bits(span, lut, i) & 0x7FFFFFFF)
        if a < FP32_INF:
            m = max(m, a)
    return m
