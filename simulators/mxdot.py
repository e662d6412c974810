"""The MX dot product, as the OCP MX v1.0 specification defines it.

``Dot(A, B) = sum over blocks of X_A * X_B * sum_i P_A,i * P_B,i``: element products
are exact (any two element values multiply exactly in FP32), each block's products
are accumulated in FP32 in element order, the block sum is scaled by the product of
the two block scales (exact, then rounded once to FP32) and the blocks are
accumulated in FP32. NVFP4's tensor scales multiply the result once, at the end, as
a GEMM epilogue does. Compiled kernels are checked against this.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from edgekit.utils.parallel import parallel_map

from .codec import QuantizedTensor, kernel_tables
from .reference import unpack_codes


@njit(nogil=True, cache=True)
def dot_rows(ca, sa, cb, sb, va, vb, sva, svb, B, m0, m1, out):
    """``out[m, n]`` for rows ``m0 .. m1`` of A against every row of B (codes unpacked)."""
    n_blocks = sa.shape[1]
    for m in range(m0, m1):
        for n in range(cb.shape[0]):
            acc = np.float32(0.0)
            for k in range(n_blocks):
                part = np.float32(0.0)
                for j in range(k * B, (k + 1) * B):
                    part += np.float32(va[ca[m, j]] * vb[cb[n, j]])
                scale = np.float64(sva[sa[m, k]]) * np.float64(svb[sb[n, k]])
                acc += np.float32(np.float64(part) * scale)
            out[m, n] = acc


def check_operand(q, name: str) -> None:
    if not isinstance(q, QuantizedTensor):
        raise ValueError(f"{name} must be a QuantizedTensor, got {type(q).__name__}")  # noqa: TRY004 (callers report ValueErrors)
    if len(q.shape) != 2 or q.axis != 1:
        raise ValueError(f"{name} must be 2-D and quantized along axis 1 (the reduction axis); "
                         f"got shape {q.shape}, axis {q.axis}")


def mx_matmul(a: QuantizedTensor, b: QuantizedTensor) -> np.ndarray:
    """``C[m, n] = Dot(A[m], B[n])`` for A (M, K) and B (N, K), both quantized along K.

    The two operands may use different element formats but must share the block size.
    """
    check_operand(a, "a")
    check_operand(b, "b")
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"a and b must share the reduction length K; got {a.shape[1]} and {b.shape[1]}")
    if a.format.block_size != b.format.block_size:
        raise ValueError(f"a and b must share the block size; got {a.format.block_size} and {b.format.block_size}")
    B = a.format.block_size
    va, sva = kernel_tables(a.format)
    vb, svb = kernel_tables(b.format)
    ca = unpack_codes(a.codes, a.format.element.bits)
    cb = unpack_codes(b.codes, b.format.element.bits)
    out = np.empty((a.shape[0], b.shape[0]), np.float32)
    parallel_map(a.shape[0], lambda m0, m1: dot_rows(ca, a.scales, cb, b.scales, va, vb, sva, svb, B, m0, m1, out), 1)
    if a.tensor_scale is not None or b.tensor_scale is not None:
        out *= np.float32(a.tensor_scale or 1.0) * np.float32(b.tensor_scale or 1.0)
    return out


def mx_dot(a: QuantizedTensor, b: QuantizedTensor) -> np.float32:
    """Dot product of two 1-D quantized vectors of equal length."""
    for q, name in ((a, "a"), (b, "b")):
        if not isinstance(q, QuantizedTensor) or len(q.shape) != 1:
            raise ValueError(f"{name} must be a 1-D QuantizedTensor")
    def row(q):
        return QuantizedTensor(q.format, (1,) + q.shape, 1, q.codes, q.scales, q.tensor_scale, q.scale_rule)
    return mx_matmul(row(a), row(b))[0, 0]
