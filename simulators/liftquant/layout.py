"""The packed layout of LiftQuant codes, and its bit-exact decoder.

A weight of N rows (outputs) and K columns (inputs, the reduction axis) is coded in the
rotated basis (see :mod:`.liftquant`), zero-padded to ``K_pad = C * d`` columns, ``C``
chunks of d per row. Chunk ``j`` of row ``n`` holds D sign bits ``B[n, j, i]`` (1 means
``c = +1``).

Codes: ``uint8 (N, row_bytes)``, ``row_bytes = 4 * ceil(C * D / 32)``. Row ``n`` is one
little-endian bitstream: bit ``t = j * D + i`` sits at bit ``t % 8`` of byte ``t // 8``
(so bit ``t % 32`` of the little-endian uint32 word ``t // 32``); a chunk may straddle
bytes and words; the bits after ``C * D`` are zero. A row is a whole number of 32-bit words.

Decoding (what a decode-only kernel must reproduce bit for bit), in float32:

    acc = +0.0
    for i in 0 .. D-1:  acc = acc + (M[k, i] if B[n, j, i] else -M[k, i])
    W'[n, j*d + k] = acc * (row_scale[n] * group_scale[n, (j*d) // group])

``row_scale`` is float16 widened to float32; ``group_scale`` an E4M3 code widened to
float32 (1.0 when there are no group scales). Their product is exact in float32 (11 + 4
significand bits), so each weight is rounded twice: by the sum and by the final product.

The fused matrix-vector form needs no decoded weights: with ``z_j = M^T x'_j`` (the lifted
activation, D values per chunk, shared by every row) and ``c = 2B - 1``,
``y[n] = row_scale[n] * sum_groups group_scale * (2 * B[n, group] . z[group] - sum(z[group]))``,
where ``sum(z[group])`` is shared across rows. It equals the decoded product up to
float32 rounding, not bit for bit.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from edgekit.utils.parallel import parallel_map

WORD_BITS = 32


def chunks_per_row(width: int, chunk: int) -> int:
    """C = ceil(K / d): chunks of a row of ``width`` inputs (the last one zero-padded)."""
    return -(-width // chunk)


def row_bytes(chunks: int, lifted: int) -> int:
    """Bytes of one row of codes: C * D bits rounded up to whole 32-bit words."""
    return 4 * math.ceil(chunks * lifted / WORD_BITS)


def pack_codes(masks: np.ndarray, lifted: int) -> np.ndarray:
    """Chunk sign masks (N, C) uint32 -> packed rows (N, row_bytes) uint8."""
    masks = np.asarray(masks, np.uint32)
    n, chunks = masks.shape
    bits = ((masks[:, :, None] >> np.arange(lifted, dtype=np.uint32)) & 1).astype(np.uint8).reshape(n, -1)
    out = np.zeros((n, row_bytes(chunks, lifted) * 8), np.uint8)
    out[:, : bits.shape[1]] = bits
    return np.packbits(out, axis=1, bitorder="little")


def unpack_codes(codes: np.ndarray, lifted: int, chunks: int) -> np.ndarray:
    """Packed rows (N, row_bytes) uint8 -> chunk sign masks (N, C) uint32."""
    codes = np.asarray(codes, np.uint8)
    if codes.ndim != 2 or codes.shape[1] != row_bytes(chunks, lifted):
        raise ValueError(f"codes must be (rows, {row_bytes(chunks, lifted)}) uint8 for {chunks} chunks of "
                         f"{lifted} bits, got shape {codes.shape}")
    bits = np.unpackbits(codes, axis=1, bitorder="little")[:, : chunks * lifted]
    weights = np.uint32(1) << np.arange(lifted, dtype=np.uint32)
    return (bits.reshape(codes.shape[0], chunks, lifted).astype(np.uint32) * weights).sum(-1, dtype=np.uint32)


@njit(nogil=True, cache=True)
def decode_rows(codes, matrix, row_scale, group_scale, chunks_per_group, n0, n1, out):
    """Decode rows ``n0 .. n1`` into ``out`` (N, C * d) float32, by the rule in the module docstring."""
    d, D = matrix.shape
    chunks = out.shape[1] // d
    for n in range(n0, n1):
        for j in range(chunks):
            t = j * D
            word = np.uint64(0)  # the chunk's bits start at bit t % 8 of byte t // 8
            first = t >> 3
            for b in range(min(5, codes.shape[1] - first)):
                word |= np.uint64(codes[n, first + b]) << np.uint64(8 * b)
            mask = word >> np.uint64(t & 7)
            scale = np.float32(row_scale[n] * group_scale[n, j // chunks_per_group])
            for k in range(d):
                acc = np.float32(0.0)
                for i in range(D):
                    if (mask >> np.uint64(i)) & np.uint64(1):
                        acc = np.float32(acc + matrix[k, i])
                    else:
                        acc = np.float32(acc - matrix[k, i])
                out[n, j * d + k] = np.float32(acc * scale)


def check_scales(row_scale, group_scale, rows: int, chunks: int, chunk: int, group: int | None):
    """(row_scale float32 (N,), group_scale float32 (N, G), chunks per group) for the decoders."""
    row_scale = np.ascontiguousarray(row_scale, np.float32)
    if row_scale.shape != (rows,):
        raise ValueError(f"row_scale must have shape ({rows},), got {row_scale.shape}")
    if group is None:
        return row_scale, np.ones((rows, 1), np.float32), chunks
    cpg = group // chunk
    expected = (rows, -(-chunks // cpg))
    group_scale = np.ascontiguousarray(group_scale, np.float32)
    if group_scale.shape != expected:
        raise ValueError(f"group_scale must have shape {expected}, got {group_scale.shape}")
    return row_scale, group_scale, cpg


def decode(codes, matrix, chunks: int, row_scale, group_scale=None, group: int | None = None) -> np.ndarray:
    """Decoded rotated weights (N, C * d) float32 of packed ``codes``; see the module docstring.

    ``group``: weights per group scale along the row (a multiple of d), None for none.
    """
    m = np.ascontiguousarray(matrix, np.float32)
    d, D = m.shape
    codes = np.ascontiguousarray(codes, np.uint8)
    if codes.ndim != 2 or codes.shape[1] != row_bytes(chunks, D):
        raise ValueError(f"codes must be (rows, {row_bytes(chunks, D)}) uint8, got shape {codes.shape}")
    rows = codes.shape[0]
    row_scale, group_scale, cpg = check_scales(row_scale, group_scale, rows, chunks, d, group)
    out = np.empty((rows, chunks * d), np.float32)
    parallel_map(rows, lambda n0, n1: decode_rows(codes, m, row_scale, group_scale, cpg, n0, n1, out), 16)
    return out


def decode_reference(codes, matrix, chunks: int, row_scale, group_scale=None, group: int | None = None) -> np.ndarray:
    """The same as :func:`decode`, written with whole-array NumPy (unpackbits, one float32 add per sign)."""
    m = np.asarray(matrix, np.float32)
    d, D = m.shape
    rows = np.asarray(codes).shape[0]
    row_scale, group_scale, cpg = check_scales(row_scale, group_scale, rows, chunks, d, group)
    bits = np.unpackbits(np.asarray(codes, np.uint8), axis=1, bitorder="little")[:, : chunks * D]
    bits = bits.reshape(rows, chunks, D).astype(bool)
    acc = np.zeros((rows, chunks, d), np.float32)
    for i in range(D):
        acc = (acc + np.where(bits[:, :, i, None], m[:, i], -m[:, i])).astype(np.float32)
    scale = row_scale[:, None] * group_scale[:, np.arange(chunks) // cpg]
    return (acc * scale[:, :, None]).astype(np.float32).reshape(rows, chunks * d)
