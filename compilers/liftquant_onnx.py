"""The ONNX decode subgraph of a LiftQuant weight, in standard ops.

The file stores what :class:`~edgekit.simulators.liftquant.LiftQuantTensor` stores: the
packed sign bits, the float16 row scales, the E4M3 group-scale codes, the float16 input
multipliers, the rotation's signs as bits and its dense factor (float32), and the
configuration's codebook ``M`` once per model. The graph computes the Linear weight
``W_hat`` (N, K) from them:

1. unpack the little-endian bitstream of each row (``BitShift`` / ``BitwiseAnd``),
   keep the ``C * D`` code bits, and map bit b to the sign ``2b - 1``;
2. each chunk's ``M c`` as the decoder sums it: the D terms ``+-M[:, i]`` added one
   after another from +0.0 in float32, then times ``row_scale * group_scale`` (exact in
   float32), so ``W'`` is bit-exact with :func:`edgekit.simulators.liftquant.layout.decode`;
3. drop the padding columns and undo the rotation, ``H^T``: the dense factor as a
   ``MatMul``, the Hadamard as log2(p) butterfly stages (``Gather`` both halves,
   ``Add`` / ``Sub``, ``Concat``) and a scale by 1/sqrt(p), then the signs; then times
   the input multipliers. The simulator undoes the rotation in float64, so this part
   matches it to float32 rounding, not bit for bit.

The output takes the weight's name, so the exporter's MatMul/Gemm read it unchanged.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto

from edgekit.simulators.liftquant import LiftQuantTensor, group_scale_values

from .onnx_nodes import DecodeBuilder

BYTE_BITS = np.arange(8, dtype=np.uint8)


def _bits(b: DecodeBuilder, packed: str, rows: int, count: int, tag: str) -> str:
    """float32 {0, 1} (rows, count): the first ``count`` bits of each little-endian packed row."""
    column = b.op("Unsqueeze", [packed, b.i64([-1])], f"{tag}_bytes")
    shifted = b.op("BitShift", [column, b.const("u8_bit_positions", BYTE_BITS)], f"{tag}_shifted", direction="RIGHT")
    bits = b.op("BitwiseAnd", [shifted, b.u8(1)], f"{tag}_bits")
    bits = b.reshape(bits, (rows, -1), f"{tag}_bitstream")
    bits = b.op("Slice", [bits, b.i64([0]), b.i64([count]), b.i64([1])], f"{tag}_kept")
    return b.op("Cast", [bits], f"{tag}_float", to=TensorProto.FLOAT)


def _signs(b: DecodeBuilder, bits: str, tag: str) -> str:
    """2b - 1: exact in float32."""
    two = b.const("f32_2", np.array(2.0, np.float32))
    one = b.const("f32_1", np.array(1.0, np.float32))
    return b.op("Sub", [b.op("Mul", [bits, two], f"{tag}_doubled"), one], f"{tag}_signs")


def _hadamard_transpose(b: DecodeBuilder, x: str, lead: int, p: int) -> str:
    """``x @ H_p`` over the last axis of ``x`` (lead, p): H_p = H_2 kron ... kron H_2, symmetric."""
    out = x
    for stage in range(p.bit_length() - 1):
        span = p >> stage  # butterflies of the Sylvester recursion [[H, H], [H, -H]] on blocks of this size
        view = b.reshape(out, (lead, p // span, 2, span // 2), f"h{stage}_view")
        first = b.op("Gather", [view, b.scalar_i64(0)], f"h{stage}_a", axis=2)
        second = b.op("Gather", [view, b.scalar_i64(1)], f"h{stage}_b", axis=2)
        total = b.op("Unsqueeze", [b.op("Add", [first, second], f"h{stage}_sum"), b.i64([2])], f"h{stage}_sum2")
        diff = b.op("Unsqueeze", [b.op("Sub", [first, second], f"h{stage}_diff"), b.i64([2])], f"h{stage}_diff2")
        out = b.reshape(b.op("Concat", [total, diff], f"h{stage}_pair", axis=2), (lead, p), f"h{stage}_out")
    norm = b.const(f"f32_inv_sqrt_{p}", np.array(1.0 / np.sqrt(p), np.float32))
    return b.op("Mul", [out, norm], "hadamard")


def liftquant_weight_nodes(name: str, q: LiftQuantTensor) -> tuple[list[onnx.NodeProto], list, str]:
    """``(nodes, initializers, output_name)`` of the decode subgraph of ``q``.

    The codebook is a shared initializer (one per configuration in a file); the other
    initializers are the tensor's own and hold ``q.nbytes`` bytes.
    """
    if not isinstance(q, LiftQuantTensor):
        raise ValueError(f"q must be a LiftQuantTensor, got {type(q).__name__}")  # noqa: TRY004
    fmt = q.format
    rows, width = q.shape
    chunks, d, lifted = q.chunks, fmt.chunk, fmt.lifted
    b = DecodeBuilder(name)

    signs = _signs(b, _bits(b, b.own("codes", q.codes), rows, chunks * lifted, "code"), "code")
    signs = b.reshape(signs, (rows, chunks, lifted), "chunk_signs")
    terms = b.op("Mul", [b.op("Unsqueeze", [signs, b.i64([-1])], "sign_col"),
                         b.const(f"codebook_{fmt.label}_t", q.codebook.matrix.T.astype(np.float32))], "terms")
    acc = b.const("f32_0", np.array(0.0, np.float32))
    for i in range(lifted):  # the decoder's order of additions, for bit-exactness
        acc = b.op("Add", [acc, b.op("Gather", [terms, b.scalar_i64(i)], f"term{i}", axis=2)], f"acc{i}")

    row_scale = b.op("Cast", [b.own("row_scales", q.row_scales)], "row_scale", to=TensorProto.FLOAT)
    scale = b.reshape(row_scale, (rows, 1, 1), "row_scale_col")
    if q.group_scales is not None:
        table = b.const(f"group_scale_values_{fmt.group_scale.name}",
                        group_scale_values(fmt, np.arange(256, dtype=np.uint8)))
        group = b.op("Gather", [table, b.op("Cast", [b.own("group_scales", q.group_scales)], "group_index",
                                                 to=TensorProto.INT32)], "group_scale", axis=0)
        of_chunk = (np.arange(chunks) * d) // q.group_size
        group = b.op("Gather", [group, b.i64(of_chunk)], "chunk_group_scale", axis=1)
        scale = b.op("Mul", [scale, b.op("Unsqueeze", [group, b.i64([-1])], "chunk_group_col")], "chunk_scale")
    w = b.reshape(b.op("Mul", [acc, scale], "scaled"), (rows, chunks * d), "rotated_rows")
    if chunks * d != width:
        w = b.op("Slice", [w, b.i64([0]), b.i64([width]), b.i64([1])], "trimmed")

    if q.rotation is not None:  # W_hat = W' H: per row, F^T (q x p view) H_p, then the signs
        r = q.rotation
        p, factor = r.power, r.factor_size
        grid = b.reshape(w, (rows, factor, p), "rotation_grid")
        if factor > 1:
            grid = b.op("MatMul", [b.own("rotation_factor_t", r.factor.T.astype(np.float32)), grid], "factor_applied")
        w = b.reshape(_hadamard_transpose(b, b.reshape(grid, (rows * factor, p), "hadamard_in"), rows * factor, p),
                      (rows, width), "unrotated")
        packed = np.packbits(r.signs > 0, bitorder="little")[None, :]  # K bits: the side data the format counts
        sign_bits = _bits(b, b.own("rotation_signs_packed", packed), 1, width, "rotation_sign")
        w = b.op("Mul", [w, _signs(b, sign_bits, "rotation")], "signed")
    if q.input_scales is not None:
        m = b.op("Cast", [b.own("input_scales", q.input_scales)], "input_scale", to=TensorProto.FLOAT)
        w = b.op("Mul", [w, m], "input_scaled")
    return b.nodes, list(b.inits.values()), b.finish(w)

