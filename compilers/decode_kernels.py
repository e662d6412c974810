"""Tensor-expression kernels over packed weights: decode-only, dense and conv2d.

Each kernel reads the codes and scales of a weight quantized along its input-channel
axis, in a layout from ``simulators.layouts``, and decodes them inside the reduction
(``tir_decode.weight_value``), so no float copy of the weight is ever stored. The
kernels come out unscheduled; ``schedules`` makes them fast per target.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from tvm import te, tirx

from edgekit.simulators import BlockFormat
from edgekit.simulators import weight_formats as wf

from .plan import block_format
from .tir_decode import weight_value


def reduction_block(fmt: str | BlockFormat, k_size: int) -> int:
    """The block a kernel's reduction is split into: the format's, or for a float baseline
    the largest divisor of ``k_size`` up to 64 (``k_size`` itself below 8)."""
    if isinstance(fmt, str) and wf.resolve(fmt).is_float:
        block = math.gcd(k_size, 64)
        return block if block >= 8 else k_size
    return (fmt if isinstance(fmt, BlockFormat) else block_format(fmt)).block_size


@dataclass(frozen=True)
class WeightReader:
    """How a kernel reads its weight: input buffers, and the float32 value at (row, block, j)."""

    buffers: list
    block_size: int
    value: Callable


def weight_reader(fmt: str | BlockFormat, layout: str, rows: tuple, k_size: int,
                  tensor_scale: float | None = None) -> WeightReader:
    """Rows of ``k_size`` weights: packed codes + scales for a block format, a float array for a baseline.

    A float baseline has no blocks; its reduction is still split into blocks (of up to
    64 elements) so that every kernel shares one loop structure and one schedule.
    """
    if isinstance(fmt, str) and wf.resolve(fmt).is_float:
        dtype = wf.resolve(fmt).dtype
        weight = te.placeholder((*rows, k_size), dtype, name="weight")
        block = reduction_block(fmt, k_size)

        def read_float(row, b, j):
            return tirx.Cast("float32", weight[(*row, b * block + j)])

        return WeightReader([weight], block, read_float)
    fmt = fmt if isinstance(fmt, BlockFormat) else block_format(fmt)
    n_blocks = math.ceil(k_size / fmt.block_size)
    codes = te.placeholder((*rows, n_blocks * fmt.bytes_per_block), "uint8", name="codes")
    scales = te.placeholder((*rows, n_blocks), "uint8", name="scales")

    def read_codes(row, b, j):
        return weight_value(fmt, layout, codes, scales, row, b, j, tensor_scale)

    return WeightReader([codes, scales], fmt.block_size, read_codes)


def decode_kernel(fmt: str | BlockFormat, layout: str, n: int, k_size: int, tensor_scale: float | None = None):
    """``W[n, k]``: the dequantized weight of ``n`` rows, the kernel that proves the decode."""
    reader = weight_reader(fmt, layout, (n,), k_size, tensor_scale)
    B = reader.block_size
    w = te.compute((n, k_size), lambda i, k: reader.value((i,), k // B, k % B), name="decode")
    return te.create_prim_func([*reader.buffers, w])


def batch_extent(size: int | None):
    """A batch size as a kernel's extent: the number, or for ``None`` a symbolic ``m`` bound by the input."""
    return tirx.Var("m", "int64") if size is None else size


def dense_kernel(fmt: str | BlockFormat, layout: str, m: int | None, n: int, k_size: int,
                 tensor_scale: float | None = None):
    """``Y[m, n] = sum_k X[m, k] * W[n, k]`` with ``W`` decoded from codes in the reduction.

    The reduction runs over (block, element in block) so that code addresses are
    affine in the loop variables and vectorize; a partial last block is masked. ``m``
    None: any number of rows, read from the input's shape when the kernel runs.
    """
    m = batch_extent(m)
    x = te.placeholder((m, k_size), "float32", name="x")
    reader = weight_reader(fmt, layout, (n,), k_size, tensor_scale)
    B = reader.block_size
    b = te.reduce_axis((0, math.ceil(k_size / B)), name="b")
    j = te.reduce_axis((0, B), name="j")
    where = None if k_size % B == 0 else b * B + j < k_size

    def body(i, o):
        return te.sum(x[i, b * B + j] * reader.value((o,), b, j), axis=[b, j], where=where)

    y = te.compute((m, n), body, name="dense")
    return te.create_prim_func([x, *reader.buffers, y])


def conv2d_kernel(fmt: str | BlockFormat, layout: str, data_shape: tuple, weight_shape: tuple, strides: tuple,
                  padding: tuple, dilation: tuple, tensor_scale: float | None = None):
    """NCHW / OIHW conv2d (groups = 1) with the weight decoded in the reduction.

    The weight was quantized along its input-channel axis, so the codecs stored it as
    rows ``(o, kh, kw)`` of ``C`` elements: that is the row the decode reads. A batch of
    None in ``data_shape`` is symbolic: any batch, read from the input when the kernel runs.
    """
    batch, channels, height, width = data_shape
    batch = batch_extent(batch)
    data_shape = (batch, channels, height, width)
    out_channels, in_channels, kh_size, kw_size = weight_shape
    if in_channels != channels:
        raise ValueError(f"conv2d weight has {in_channels} input channels, data has {channels}")
    pad_top, pad_left, pad_bottom, pad_right = padding
    sh, sw = strides
    dh, dw = dilation
    out_h = (height + pad_top + pad_bottom - dh * (kh_size - 1) - 1) // sh + 1
    out_w = (width + pad_left + pad_right - dw * (kw_size - 1) - 1) // sw + 1
    x = te.placeholder(data_shape, "float32", name="x")
    reader = weight_reader(fmt, layout, (out_channels, kh_size, kw_size), channels, tensor_scale)
    B = reader.block_size
    padded = te.compute(
        (batch, channels, height + pad_top + pad_bottom, width + pad_left + pad_right),
        lambda n, c, y, xx: tirx.if_then_else(
            tirx.all(y >= pad_top, y < pad_top + height, xx >= pad_left, xx < pad_left + width),
            x[n, c, y - pad_top, xx - pad_left], tirx.const(0.0, "float32")),
        name="pad")
    c = te.reduce_axis((0, channels), name="c")
    ry = te.reduce_axis((0, kh_size), name="ry")
    rx = te.reduce_axis((0, kw_size), name="rx")

    def body(n, o, y, xx):
        w = reader.value((o, ry, rx), c // B, c % B)
        return te.sum(padded[n, c, y * sh + ry * dh, xx * sw + rx * dw] * w, axis=[c, ry, rx])

    out = te.compute((batch, out_channels, out_h, out_w), body, name="conv2d")
    return te.create_prim_func([x, *reader.buffers, out])
