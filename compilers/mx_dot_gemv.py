"""Batch-1 CPU GEMV whose input is quantized to MXINT8 too: the OCP MX dot product in integers.

``y[n] = Dot(q(x), W[n])`` (``simulators.mxdot``), where ``q(x)`` is ``x`` quantized by the codec to
MXINT8 at the weight's block size (:func:`activation_format`), inside the kernel. It is the
product an MX matrix unit computes, with its own numerics: the input is rounded to 8 bits, so
the result is not ``x @ dequantize(W).T``. The result equals ``mx_matmul(quantize(x), W)`` bit for
bit: every element product is an integer times one power of two, a block's sum of them is
exact in int32 (and in the specification's FP32, being below 2^24 in those units), each block
sum is scaled in float64 (exact) and rounded once to float32, and the blocks are accumulated in
float32 in block order, all as ``mx_matmul`` does.

It applies to 4-bit weights whose values are small integers times one power of two (E2M1,
INT4; MXFP4, MXINT4, NVFP4), in the ``row_tiles`` layout of :mod:`.row_tile_gemv`: a vector
lane per weight row, one 32-bit word of eight codes per lane at a time. A ``vpshufb`` looks up
the eight codes' values, offset to unsigned bytes (value * 2^shift + bias), in two lookups (even
codes from low nibbles, odd from high); ``vpmaddubsw`` multiplies each lane's four bytes with the
four input codes of those elements (one broadcast 32-bit word, the input laid out for it) and
adds pairs into int16; int16 sums of a few such products (as many as cannot overflow) go
through ``vpmaddwd`` into int32. The block's bias times the sum of its input codes is subtracted
once per block. No weight is converted to float: four vector operations per eight weights of a
lane instead of the float decode's eight or more.
"""

from __future__ import annotations

from tvm import te, tirx

from edgekit.simulators import BlockFormat
from edgekit.simulators.formats import get_format

from .kernel_schedules import VECTOR_LANES
from .row_tile_gemv import VECTORS, int8_table, table_vector, tile_height
from .row_tile_gemv import applies as row_tiles_fit
from .tir_decode import i32, scale_value

ACTIVATION = "mxint8"
CODE_BITS = 4
CODES_PER_WORD = 8
INT16_MAX = 32767
LOW_SCALE_EXPONENT = 100  # see _gemv_body: the first float32 factor of an input block scale
INPUT_CODE_MAX = 128  # |an MXINT8 code| (127; 128 bounds the asymmetric range too)
PAIR_OPS = {  # (u8 x s8 pairs -> int16, int16 pairs -> int32, 128-bit-lane byte lookup) per ISA
    "avx2": ("llvm.x86.avx2.pmadd.ub.sw", "llvm.x86.avx2.pmadd.wd", "llvm.x86.avx2.pshuf.b"),
    "avx512": ("llvm.x86.avx512.pmaddubs.w.512", "llvm.x86.avx512.pmaddw.d.512", "llvm.x86.avx512.pshuf.b.512"),
}


def activation_format(fmt: BlockFormat) -> BlockFormat:
    """The input's format: MXINT8 at ``fmt``'s block size, as the MX dot product pairs blocks."""
    return get_format(ACTIVATION).with_block_size(fmt.block_size)


def weight_bytes(fmt: BlockFormat) -> tuple[int, int, int] | None:
    """(table shift, bias, products summed in int16) where ``fmt``'s 4-bit values times 2^shift
    plus bias are unsigned bytes small enough that a ``vpmaddubsw`` pair sum leaves int16 room,
    else None."""
    if fmt.element.bits != CODE_BITS or (table := int8_table(fmt.element.values)) is None:
        return None
    ints, shift = table
    bias = -min(ints)
    pair_max = 2 * (max(ints) + bias) * INPUT_CODE_MAX
    return (shift, bias, INT16_MAX // pair_max) if pair_max <= INT16_MAX else None


def applies(fmt: BlockFormat, n: int, k: int, isa: str) -> bool:
    """Whether an ``n x k`` weight in ``fmt`` can take the MX-dot GEMV: 4-bit codes with a byte table
    (:func:`weight_bytes`) and the row-tile layout's shape rules."""
    return weight_bytes(fmt) is not None and row_tiles_fit(fmt, n, k, isa)


def _quantized_input(x, fmt: BlockFormat, table_shift: int):
    """TE stages of the codec's MXINT8 encode of ``x (1, k)`` (floor scale rule, round half to even,
    symmetric saturation; a block with Inf or NaN takes the NaN scale and zero codes):
    (input words, block code sums, (blocks, 2) block scales times 2^-(frac_bits + table_shift) as two
    float32 factors, the first at most 2^LOW_SCALE_EXPONENT)."""
    act = activation_format(fmt)
    elem, block = act.element, act.block_size
    k = int(x.shape[1])
    blocks = k // block
    code_max = round(elem.max_normal * 2**elem.frac_bits)
    j = te.reduce_axis((0, block), name="j")
    amax = te.compute((blocks,), lambda b: te.max(tirx.reinterpret("int32", x[0, b * block + j]) & 0x7FFFFFFF, axis=j),
                      name="amax")
    finite = te.compute((blocks,), lambda b: amax[b] < 0x7F800000, name="finite")

    def exponent(b):  # floor(log2 amax) from its float64 exponent field (FP32 subnormals are FP64 normals)
        bits64 = tirx.reinterpret("int64", tirx.Cast("float64", tirx.reinterpret("float32", amax[b])))
        e = tirx.Cast("int32", (bits64 >> 52) & 0x7FF) - 1023 - elem.emax
        return tirx.Select(amax[b] == 0, -127, tirx.max(tirx.min(e, 127), -127))

    e = te.compute((blocks,), exponent, name="exponent")

    def pow2(p):  # 2^p as float64, p an int32 PrimExpr within float64's normal range
        return tirx.reinterpret("float64", tirx.Cast("int64", p + 1023) << 52)

    def code(i):
        b = i // block
        scaled = tirx.Cast("float64", x[0, i]) * pow2(elem.frac_bits - e[b])
        c = tirx.Cast("int32", tirx.nearbyint(scaled))
        return tirx.Select(finite[b], tirx.max(tirx.min(c, code_max), -code_max), 0)

    codes = te.compute((k,), code, name="input_codes")
    jj = te.reduce_axis((0, block), name="jj")
    sums = te.compute((blocks,), lambda b: te.sum(codes[b * block + jj], axis=jj), name="input_sums")
    def scale(b, part):  # the block's 2^(e - frac_bits - table_shift) as two float32 factors (see _gemv_body)
        p = e[b] - elem.frac_bits - table_shift
        factor = tirx.Select(part == 0, tirx.min(p, LOW_SCALE_EXPONENT), tirx.max(p - LOW_SCALE_EXPONENT, 0))
        return tirx.Select(finite[b] | (part == 1), tirx.Cast("float32", pow2(factor)), tirx.const(float("nan"), "float32"))

    scales = te.compute((blocks, 2), scale, name="input_scales")

    def word(i):  # word 2w + h: the input codes of word w's elements h, h + 2, h + 4, h + 6, a byte each
        w, h = i // 2, i % 2
        return sum(((codes[CODES_PER_WORD * w + h + 2 * t] & 0xFF) << (8 * t)) for t in range(4))

    words = te.compute((k // 4,), word, name="input_words")
    return words, sums, scales


def _gemv_body(words, sums, in_scales, codes, scales, y, fmt: BlockFormat, isa: str, tensor_scale: float | None):
    from tvm.script.ir_builder import IRBuilder
    from tvm.script.ir_builder import tirx as T

    shift, bias, per_int16 = weight_bytes(fmt)
    pair_op, widen_op, lookup_op = PAIR_OPS[isa]
    lanes = VECTOR_LANES[isa]
    bytes_, shorts = f"int8x{4 * lanes}", f"int16x{2 * lanes}"
    table = tirx.reinterpret(bytes_, table_vector(fmt.element, lanes, shift, bias))
    ones = tirx.Broadcast(tirx.const(1, "int16"), 2 * lanes)
    block_words = fmt.block_size // CODES_PER_WORD
    # the block's (word, half) products, in chunks whose int16 sums cannot overflow
    products = [(w, h) for w in range(block_words) for h in range(2)]
    chunks = [products[i:i + per_int16] for i in range(0, len(products), per_int16)]
    n_tiles, n_blocks, rows = int(codes.shape[0]), int(scales.shape[1]), tile_height(isa)
    f32 = f"float32x{lanes}"
    post = None if tensor_scale is None else tirx.Broadcast(tirx.const(tensor_scale, "float32"), lanes)

    def lane_slice(v):
        return tirx.Ramp(v * lanes, 1, lanes)

    with IRBuilder() as ib, T.parallel(0, n_tiles) as tile:
        acc = T.alloc_buffer((rows,), "float32", scope="local")
        block_sum = T.alloc_buffer((rows,), "int32", scope="local")
        for v in range(VECTORS):
            T.buffer_store(acc, tirx.Broadcast(tirx.const(0.0, "float32"), lanes), [lane_slice(v)])
        with T.serial(0, n_blocks) as b:
            for v in range(VECTORS):
                T.buffer_store(block_sum, i32(-bias, lanes) * tirx.Broadcast(sums[b], lanes), [lane_slice(v)])
            for chunk in chunks:
                for v in range(VECTORS):
                    total = None
                    for w, h in chunk:
                        g = b * block_words + w
                        word = tirx.reinterpret(f"int32x{lanes}", codes.vload([tile, g, v * lanes], f"uint32x{lanes}"))
                        nibbles = ((word >> i32(4, lanes)) if h else word) & i32(0x0F0F0F0F, lanes)
                        weights = tirx.call_llvm_pure_intrin(bytes_, lookup_op, table, tirx.reinterpret(bytes_, nibbles))
                        inputs = tirx.reinterpret(bytes_, tirx.Broadcast(words[2 * g + h], lanes))
                        product = tirx.call_llvm_pure_intrin(shorts, pair_op, weights, inputs)
                        total = product if total is None else total + product
                    widened = tirx.call_llvm_pure_intrin(f"int32x{lanes}", widen_op, total, ones)
                    T.buffer_store(block_sum, block_sum.vload([v * lanes], f"int32x{lanes}") + widened, [lane_slice(v)])
            for v in range(VECTORS):
                # S * xs_low is exact (S < 2^17 and xs_low a power of two in [2^-134, 2^100]); the product
                # with the weight scale rounds at most once, and the rare xs_high > 1 (an input block
                # above 2^110) only where that product is exact: the block value float64 would give
                weight_scale = scale_value(fmt.scale, scales.vload([tile, b, v * lanes], f"uint8x{lanes}"))
                exact = tirx.Cast(f32, block_sum.vload([v * lanes], f"int32x{lanes}")) * tirx.Broadcast(in_scales[b, 0], lanes)
                value = exact * weight_scale * tirx.Broadcast(in_scales[b, 1], lanes)
                # rounded before the sum, as the specification's block value is: no FMA may fuse the two
                value = tirx.call_llvm_pure_intrin(f32, "llvm.arithmetic.fence", value)
                T.buffer_store(acc, acc.vload([v * lanes], f32) + value, [lane_slice(v)])
        for v in range(VECTORS):
            out = acc.vload([v * lanes], f32)
            T.buffer_store(y, out * post if post is not None else out, [0, tirx.Ramp(tile * rows + v * lanes, 1, lanes)])
    return ib.get()


def gemv_kernel(fmt: BlockFormat, n: int, k: int, isa: str, tensor_scale: float | None = None):
    """``y (1, n) = Dot(MXINT8(x (1, k)), W)`` from ``row_tiles`` codes and scales (``row_tile_gemv.tile_rows``),
    scheduled for ``isa`` (``"avx512"`` or ``"avx2"``)."""
    if weight_bytes(fmt) is None:
        raise ValueError(f"the MX-dot GEMV takes 4-bit weights whose values are small integers times a power of "
                         f"two (mxfp4, mxint4, nvfp4); got {fmt.name}")
    if not applies(fmt, n, k, isa):
        raise ValueError(f"the MX-dot GEMV takes {fmt.name} weights with a multiple of {tile_height(isa)} rows and of "
                         f"{fmt.block_size} inputs; got {n} x {k}")
    rows = tile_height(isa)
    x = te.placeholder((1, k), "float32", name="x")
    codes = te.placeholder((n // rows, k // CODES_PER_WORD, rows), "uint32", name="codes")
    scales = te.placeholder((n // rows, k // fmt.block_size, rows), "uint8", name="scales")
    words, sums, in_scales = _quantized_input(x, fmt, weight_bytes(fmt)[0])
    y = te.extern((1, n), [words, sums, in_scales, codes, scales],
                  lambda ins, outs: _gemv_body(*ins, *outs, fmt, isa, tensor_scale), name="mx_dot_gemv", dtype="float32")
    return te.create_prim_func([x, codes, scales, y]).with_attr("tirx.is_scheduled", True)
