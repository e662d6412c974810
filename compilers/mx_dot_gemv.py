"""Batch-1 CPU GEMV whose input is quantized to MXINT8 too: the OCP MX dot product in integers.

``y[n] = Dot(q(x), W[n])`` (``simulators.mxdot``), where ``q(x)`` is ``x`` quantized by the codec to
MXINT8 at the weight's block size (:func:`activation_format`), inside the kernel. It is the
product an MX matrix unit computes, with its own numerics: the input is rounded to 8 bits, so
the result is not ``x @ dequantize(W).T``. The result equals ``mx_matmul(quantize(x), W)`` bit for
bit: every element product is an integer times one power of two, a block's sum of them is
exact in int32 (and in the specification's FP32, being below 2^24 in those units), each block
sum times its two scales is rounded once to float32 (as ``mx_matmul``'s float64 product is; see
:func:`_gemv_body`), and the blocks are accumulated in float32 in block order.

It applies to weights whose element values are small integers times one power of two (E2M1,
INT4: MXFP4, MXINT4, NVFP4) or 6-bit float weights whose magnitudes are (E2M3: MXFP6 E2M3;
:func:`formats_taken`), a vector lane per weight row as in :mod:`.row_tile_gemv`'s ``row_tiles``
layout. Each ``vpmaddubsw`` multiplies four unsigned weight bytes of every lane with the four
input codes of their elements (one broadcast 32-bit word; the input is laid out for it) and adds
pairs into int16; int16 sums of as many such products as cannot overflow go through ``vpmaddwd``
into int32, and the block sum is scaled once per block. No weight is converted to float.

* 4-bit codes: one 32-bit word of eight codes per lane; a ``vpshufb`` of its low nibbles and one
  of its high nibbles look up the codes' values offset to unsigned bytes (value * 2^shift + bias);
  the bias times the block's sum of input codes is subtracted once per block.
* 6-bit codes, laid out by :func:`plane_bytes` (the same bits, rearranged): per 16 codes, two words
  of low nibbles and one word of top bits, placed so that a shift brings each code's top magnitude
  bit and its sign to the top of its byte. The magnitude is one of two ``vpshufb`` lookups of the
  low nibble (none where the first sixteen magnitudes are the codes themselves, as E2M3's * 8 are),
  picked by the top magnitude bit (``vpblendvb``); the sign negates the input bytes it meets
  (``vpsignb`` on AVX2; on AVX-512, which has no 512-bit form, a blend with the negated input), so
  the weight bytes need no bias. Layout ``row_tile_planes``.
"""

from __future__ import annotations

import numpy as np
from tvm import te, tirx

from edgekit.simulators import FORMATS, BlockFormat
from edgekit.simulators.formats import get_format
from edgekit.simulators.reference import unpack_codes

from .kernel_schedules import VECTOR_LANES
from .row_tile_gemv import LAYOUT as ROW_TILES
from .row_tile_gemv import VECTORS, int8_table, lane_slice, magnitudes, table_vector, tile_height, tile_rows
from .row_tile_gemv import applies as row_tiles_fit
from .tir_decode import i32, scale_value

ACTIVATION = "mxint8"
PLANES_LAYOUT = "row_tile_planes"  # the row_tiles layout of plane_bytes
WORD_BYTES = 4  # a 32-bit word: four bytes, four products of a lane per vpmaddubsw
INT16_MAX = 32767
LOW_SCALE_EXPONENT = 100  # see _gemv_body: the first float32 factor of an input block scale
INPUT_CODE_MAX = 128  # |an MXINT8 code| (127; 128 bounds the asymmetric range too)
PLANE_GROUP = 16  # 6-bit codes: a group of 16 is two words of low nibbles and one of top bits
SIGN_OPS = {"avx2": "llvm.x86.avx2.psign.b"}  # vpsignb: AVX2 has it, AVX-512 has no 512-bit form
PAIR_OPS = {  # (u8 x s8 pairs -> int16, int16 pairs -> int32, 128-bit-lane byte lookup) per ISA
    "avx2": ("llvm.x86.avx2.pmadd.ub.sw", "llvm.x86.avx2.pmadd.wd", "llvm.x86.avx2.pshuf.b"),
    "avx512": ("llvm.x86.avx512.pmaddubs.w.512", "llvm.x86.avx512.pmaddw.d.512", "llvm.x86.avx512.pshuf.b.512"),
}


def activation_format(fmt: BlockFormat) -> BlockFormat:
    """The input's format: MXINT8 at ``fmt``'s block size, as the MX dot product pairs blocks."""
    return get_format(ACTIVATION).with_block_size(fmt.block_size)


def weight_bytes(fmt: BlockFormat) -> tuple[int, int, int] | None:
    """(table shift, bias, products summed in int16) where ``fmt``'s values times 2^shift plus bias are
    unsigned bytes small enough that a ``vpmaddubsw`` pair sum leaves int16 room, else None: 4-bit
    codes whose values are such integers (the bias their least), or 6-bit float codes whose
    magnitudes are (no bias: the code's sign negates the input byte it meets)."""
    elem = fmt.element
    if elem.bits == 4 and (table := int8_table(elem.values)) is not None:
        ints, shift = table
        bias, top = -min(ints), max(ints) - min(ints)
    elif elem.bits == 6 and elem.kind == "float" and (table := int8_table(magnitudes(elem))) is not None:
        ints, shift = table  # magnitudes: the sign goes onto the input byte
        bias, top = 0, max(ints)
    else:
        return None
    pair_max = 2 * top * INPUT_CODE_MAX
    return (shift, bias, INT16_MAX // pair_max) if pair_max <= INT16_MAX else None


def takes(fmt: BlockFormat) -> bool:
    """Whether the MX-dot GEMV takes ``fmt``'s weights (given a shape that fits): codes with a byte table
    (:func:`weight_bytes`) in blocks of whole 16-code groups."""
    return weight_bytes(fmt) is not None and fmt.block_size % PLANE_GROUP == 0


def applies(fmt: BlockFormat, n: int, k: int, isa: str) -> bool:
    """Whether an ``n x k`` weight in ``fmt`` can take the MX-dot GEMV: :func:`takes` and the row-tile
    layout's shape rules."""
    return takes(fmt) and row_tiles_fit(fmt, n, k, isa)


def formats_taken() -> list[str]:
    """The table's formats whose weights the MX-dot GEMV takes."""
    return [name for name, fmt in FORMATS.items() if takes(fmt)]


def negates_inputs(fmt: BlockFormat, isa: str) -> bool:
    """Whether the kernel reads the negated input words too: 6-bit codes' signs where ``isa`` has no
    ``vpsignb`` (a blend picks the input word or its negation)."""
    return fmt.element.bits == 6 and isa not in SIGN_OPS


def plane_bytes(codes: np.ndarray, fmt: BlockFormat) -> np.ndarray:
    """6-bit codes (n, bytes) as this kernel reads them, the same bits rearranged: each group of 16 codes
    ``c`` is three words, the low nibbles of ``c[0:8]`` and of ``c[8:16]`` (code ``i`` of each in nibble
    ``i``), then one whose byte ``t`` holds, for the code ``8 (q // 2) + q % 2 + 2t`` of each quarter
    ``q`` (the codes one ``vpshufb`` of nibbles gives), its top magnitude bit at bit ``7 - q`` and its
    sign at bit ``3 - q``."""
    c = unpack_codes(np.ascontiguousarray(codes, np.uint8), fmt.element.bits).astype(np.uint32)
    c = c.reshape(c.shape[0], -1, PLANE_GROUP)
    nibbles = c & 0xF
    low = [sum(nibbles[..., half * 8 + i] << (4 * i) for i in range(8)) for half in range(2)]
    top = np.zeros_like(low[0])
    for q in range(4):
        for t in range(WORD_BYTES):
            code = c[..., 8 * (q // 2) + q % 2 + 2 * t]
            top |= (((code >> 4) & 1) << (8 * t + 7 - q)) | ((code >> 5) << (8 * t + 3 - q))
    words = np.stack([*low, top], axis=-1).reshape(c.shape[0], -1).astype("<u4")
    return np.ascontiguousarray(words).view(np.uint8)


def layout(fmt: BlockFormat) -> str:
    """The name of the layout :func:`tile_codes` gives ``fmt``'s codes."""
    return PLANES_LAYOUT if fmt.element.bits == 6 else ROW_TILES


def tile_codes(codes: np.ndarray, scales: np.ndarray, fmt: BlockFormat, isa: str) -> tuple[np.ndarray, np.ndarray]:
    """The codecs' codes and scales as this kernel reads them: the ``row_tiles`` layout of the codes, or
    for 6-bit codes of their :func:`plane_bytes`."""
    return tile_rows(plane_bytes(codes, fmt) if fmt.element.bits == 6 else codes, scales, fmt, isa)


class _WeightBytes:
    """The operands of each ``vpmaddubsw`` of a block for one vector of rows: each lane's four unsigned
    weight bytes of a quarter of the block, and the input word they meet (signed by the weights' signs
    for 6-bit codes)."""

    def __init__(self, fmt: BlockFormat, isa: str):
        self.shift, self.bias, self.per_int16 = weight_bytes(fmt)
        self.lanes = VECTOR_LANES[isa]
        self.bytes = f"int8x{WORD_BYTES * self.lanes}"
        self.lookup = PAIR_OPS[isa][2]
        self.sign_op = SIGN_OPS.get(isa)
        self.planes = fmt.element.bits == 6
        firsts = (0, PLANE_GROUP) if self.planes else (0,)
        self.tables = [tirx.reinterpret(self.bytes, table_vector(fmt.element, self.lanes, self.shift, self.bias,
                                                                  first=first)) for first in firsts]
        # a 6-bit format whose first 16 magnitudes are the codes themselves (E2M3 * 8) needs no lookup for them
        self.low_is_code = self.planes and int8_table(magnitudes(fmt.element))[0][:PLANE_GROUP] == list(range(PLANE_GROUP))
        # 32-bit units per block and row: a word of eight 4-bit codes; three words of sixteen 6-bit codes
        self.units = fmt.block_size * fmt.element.bits // 32

    def _look(self, table, index):
        return tirx.call_llvm_pure_intrin(self.bytes, self.lookup, table, tirx.reinterpret(self.bytes, index))

    def _negative(self, word):
        return tirx.reinterpret(self.bytes, word) < tirx.Broadcast(tirx.const(0, "int8"), WORD_BYTES * self.lanes)

    def quarter(self, load, qi: int, inputs, negated):
        """(weight bytes, input bytes) of quarter ``qi`` of a block, ``load(u)`` giving unit ``u`` of the block as
        int32 lanes, ``inputs`` and ``negated`` the quarter's input word and its negation as bytes."""
        lanes = self.lanes
        group, q = divmod(qi, 4) if self.planes else divmod(qi, 2)
        word = load(3 * group + q // 2) if self.planes else load(group)
        nibbles = ((word >> i32(4, lanes)) if q % 2 else word) & i32(0x0F0F0F0F, lanes)
        if not self.planes:
            return self._look(self.tables[0], nibbles), inputs
        top = load(3 * group + 2)
        low = tirx.reinterpret(self.bytes, nibbles) if self.low_is_code else self._look(self.tables[0], nibbles)
        magnitude = tirx.Select(self._negative(top << i32(q, lanes) if q else top), self._look(self.tables[1], nibbles), low)
        sign = top << i32(4 + q, lanes)
        if self.sign_op:  # the input negated where the sign is set, zeroed where the byte is 0 (its magnitude is too)
            source = tirx.reinterpret(self.bytes, sign | tirx.reinterpret(f"int32x{lanes}", magnitude))
            return magnitude, tirx.call_llvm_pure_intrin(self.bytes, self.sign_op, inputs, source)
        return magnitude, tirx.Select(self._negative(sign), negated, inputs)


def _quantized_input(x, fmt: BlockFormat, table_shift: int, negated: bool):
    """TE stages of the codec's MXINT8 encode of ``x (1, k)`` (floor scale rule, round half to even,
    symmetric saturation; a block with Inf or NaN takes the NaN scale and zero codes):
    (input words, block code sums, (blocks, 2) block scales times 2^-(frac_bits + table_shift) as two
    float32 factors, the first at most 2^LOW_SCALE_EXPONENT), and with ``negated`` the input words of
    the negated codes too."""
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

    def words(sign):  # word 2w + h: the input codes of word w's elements h, h + 2, h + 4, h + 6, a byte each
        def word(i):
            w, h = i // 2, i % 2
            return sum((((sign * codes[8 * w + h + 2 * t]) & 0xFF) << (8 * t)) for t in range(4))
        return word

    signs = ((1, "input_words"), (-1, "negated_input_words"))[: 2 if negated else 1]
    return (*(te.compute((k // 4,), words(sign), name=name) for sign, name in signs), sums, scales)


def _gemv_body(words, sums, in_scales, codes, scales, y, fmt: BlockFormat, isa: str, tensor_scale: float | None,
               specials: bool, negated_words=None):
    from tvm.script.ir_builder import IRBuilder
    from tvm.script.ir_builder import tirx as T

    source = _WeightBytes(fmt, isa)
    pair_op, widen_op, _ = PAIR_OPS[isa]
    lanes = VECTOR_LANES[isa]
    shorts = f"int16x{2 * lanes}"
    ones = tirx.Broadcast(tirx.const(1, "int16"), 2 * lanes)
    quarters = fmt.block_size // WORD_BYTES  # input words a block
    # the block's quarters in chunks whose int16 sums cannot overflow
    chunks = [range(i, min(i + source.per_int16, quarters)) for i in range(0, quarters, source.per_int16)]
    n_tiles, n_blocks, rows = int(codes.shape[0]), int(scales.shape[1]), tile_height(isa)
    f32 = f"float32x{lanes}"
    post = None if tensor_scale is None else tirx.Broadcast(tirx.const(tensor_scale, "float32"), lanes)

    with IRBuilder() as ib, T.parallel(0, n_tiles) as tile:
        acc = T.alloc_buffer((rows,), "float32", scope="local")
        block_sum = T.alloc_buffer((rows,), "int32", scope="local")
        for v in range(VECTORS):
            T.buffer_store(acc, tirx.Broadcast(tirx.const(0.0, "float32"), lanes), [lane_slice(v, lanes)])
        with T.serial(0, n_blocks) as b:
            for v in range(VECTORS):
                T.buffer_store(block_sum, i32(-source.bias, lanes) * tirx.Broadcast(sums[b], lanes), [lane_slice(v, lanes)])
            for chunk in chunks:
                for v in range(VECTORS):
                    def load(u, v=v):
                        return tirx.reinterpret(f"int32x{lanes}", codes.vload([tile, b * source.units + u, v * lanes],
                                                                              f"uint32x{lanes}"))
                    total = None
                    for qi in chunk:
                        inputs = [None if w is None else tirx.reinterpret(source.bytes, tirx.Broadcast(w[b * quarters + qi], lanes))
                                  for w in (words, negated_words)]
                        product = tirx.call_llvm_pure_intrin(shorts, pair_op, *source.quarter(load, qi, *inputs))
                        total = product if total is None else total + product
                    widened = tirx.call_llvm_pure_intrin(f"int32x{lanes}", widen_op, total, ones)
                    T.buffer_store(block_sum, block_sum.vload([v * lanes], f"int32x{lanes}") + widened, [lane_slice(v, lanes)])
            for v in range(VECTORS):
                # S * xs_low is exact (|S| < 2^18 and xs_low a power of two in [2^-134, 2^100]); the product
                # with the weight scale rounds at most once, and the rare xs_high > 1 (an input block
                # above 2^110) only where that product is exact: the block value float64 would give
                weight_scale = scale_value(fmt.scale, scales.vload([tile, b, v * lanes], f"uint8x{lanes}"), specials)
                exact = tirx.Cast(f32, block_sum.vload([v * lanes], f"int32x{lanes}")) * tirx.Broadcast(in_scales[b, 0], lanes)
                value = exact * weight_scale * tirx.Broadcast(in_scales[b, 1], lanes)
                # rounded before the sum, as the specification's block value is: no FMA may fuse the two
                value = tirx.call_llvm_pure_intrin(f32, "llvm.arithmetic.fence", value)
                T.buffer_store(acc, acc.vload([v * lanes], f32) + value, [lane_slice(v, lanes)])
        for v in range(VECTORS):
            out = acc.vload([v * lanes], f32)
            T.buffer_store(y, out * post if post is not None else out, [0, tirx.Ramp(tile * rows + v * lanes, 1, lanes)])
    return ib.get()


def gemv_kernel(fmt: BlockFormat, n: int, k: int, isa: str, tensor_scale: float | None = None,
                scale_specials: bool = True):
    """``y (1, n) = Dot(MXINT8(x (1, k)), W)`` from codes and scales laid out by :func:`tile_codes`, scheduled
    for ``isa`` (``"avx512"`` or ``"avx2"``); ``scale_specials=False`` for a weight none of whose scale codes
    needs ``tir_decode.scale_value``'s special cases (``tir_decode.needs_scale_specials``)."""
    if weight_bytes(fmt) is None:
        raise ValueError(f"the MX-dot GEMV takes 4-bit weights whose values, and 6-bit float weights whose magnitudes, "
                         f"are small integers times a power of two ({', '.join(formats_taken())}); got {fmt.name}")
    if not applies(fmt, n, k, isa):
        raise ValueError(f"the MX-dot GEMV takes {fmt.name} weights with a multiple of {tile_height(isa)} rows and of "
                         f"{fmt.block_size} inputs; got {n} x {k}")
    rows = tile_height(isa)
    x = te.placeholder((1, k), "float32", name="x")
    codes = te.placeholder((n // rows, k * fmt.element.bits // 32, rows), "uint32", name="codes")
    scales = te.placeholder((n // rows, k // fmt.block_size, rows), "uint8", name="scales")
    words, *negated, sums, in_scales = _quantized_input(x, fmt, weight_bytes(fmt)[0], negates_inputs(fmt, isa))
    y = te.extern((1, n), [words, sums, in_scales, codes, scales, *negated],
                  lambda ins, outs: _gemv_body(*ins[:5], *outs, fmt, isa, tensor_scale, scale_specials, *ins[5:]),
                  name="mx_dot_gemv", dtype="float32")
    return te.create_prim_func([x, codes, scales, y]).with_attr("tirx.is_scheduled", True)
