"""Batch-1 CPU GEMV over row tiles: a vector lane per weight row, codes decoded from 32-bit words or bytes.

The ``row_tiles`` layout (:func:`tile_rows`) keeps the codecs' bytes but reorders them:
rows in tiles of the rows one task sums (:func:`tile_height`: 64 with AVX-512, 32 with AVX2, so
that a task streams whole cache lines of its tile alone), and within a tile *unit* ``w`` of
every row contiguous.
A unit is a 32-bit word of a row's packed codes (lowest bits first, exactly as the codecs
pack them), or one code for 8-bit integer codes, which a sign-extending load (``vpmovsxbd``)
makes its lane's int32 with no shift, and for E5M2 codes, which are float16's top byte (other
float codes gain nothing from bytes: their decodes shift anyway). So one vector load gives the
same unit of 16 rows (AVX-512) or 8 (AVX2), and each lane decodes its own row's codes with
shifts. Codes are read a *group* of units at a time, the fewest whole units that hold whole
codes (one word of 4-bit or E4M3 codes; one byte code; three words of sixteen 6-bit codes, two
of which straddle a word boundary and are put together from two words). The input of element ``j`` of a group is
one broadcast shared by all lanes. A block's products are summed unscaled and multiplied
by the vector of the rows' block scales once per block, so a scale costs one FMA per block
instead of a multiply per weight. Tiles run in parallel, each streaming one contiguous
region of codes.

Element decode, chosen from the format's row, never its name:

* 4-bit codes on AVX-512: the 16 float32 values of the format's decode table in one
  register, looked up by ``vpermps``, which reads only the low 4 bits of each lane, so the
  shift is the whole extraction.
* 4-bit codes on AVX2 (whose ``vpermps`` holds 8 entries), where every value of the table
  is a small integer times one power of two (E2M1, INT4): an int8 table that ``vpshufb``
  looks up for four nibbles of each lane at once; each is sign-extended by shifts and
  converted, and the power of two goes into the block scale (exact).
* float codes of at most 6 bits on AVX-512 (E2M3, E3M2): the magnitude's float32 value looked up
  in a 32-entry table held in two registers (``vpermi2ps``), the sign ORed in.
* float codes of at most 6 bits on AVX2 whose magnitudes all are small integers times one power
  of two (E2M3): the magnitude looked up in a 32-entry int8 table by two ``vpshufb``, converted,
  the sign ORed in; the power of two goes into the block scale.
* E5M2 codes, which are float16's top byte: placed above a zero byte and converted as float16
  (``vcvtph2ps``); with AVX2, two vectors' 16 bytes are one load that ``vpunpcklbw`` and
  ``vpunpckhbw`` with zeros place, with AVX-512 a zero extension and a shift.
* other integer codes: shifted to the top of the lane, shifted back arithmetically (the sign
  extension) and converted; the 2^-fraction_bits goes into the block scale.
* other 8-bit float codes without Inf whose NaN the scale carries (E4M3): two per arithmetic shift of
  16-bit halves, which places each half's top code under bfloat16's fields (FP32's top half); a
  mask or a shift and a mask makes it FP32, then a multiply by the bias's power of two.
* otherwise (a 4-bit table with NaN on AVX2, an 8-bit float whose NaN the scale cannot carry):
  ``tir_decode.element_value_top``, the arithmetic decode every other kernel uses, on each code
  shifted to the top of its lane.

NaN codes cost no test per weight where the scale has a NaN code of its own (E8M0's 0xFF):
:func:`tile_rows` gives every block that holds a NaN code that scale, so the block's sum, and
the row's output, is NaN as ``x @ dequantize(W).T``'s is, whatever the decode makes of the
NaN code itself (E4M3's reads as 480). The rows without NaN codes are untouched.

The lookups are LLVM x86 intrinsics: the kernel exists for x86 targets with AVX2 and FMA
(``kernel_schedules.vector_isa``), for weights whose blocks are whole groups (:func:`applies`).
The result equals ``x @ dequantize(W).T`` up to float32 summation order.
"""

from __future__ import annotations

import math

import numpy as np
from tvm import te, tirx

from edgekit.simulators import BlockFormat
from edgekit.simulators.reference import unpack_codes

from .kernel_schedules import VECTOR_LANES
from .tir_decode import element_value, element_value_top, i32, scale_value, u32

VECTORS = 4  # vectors of rows summed together: 4 accumulators, 4 block sums and 4 words in registers
WORD_BITS = 32
BYTE_BITS = 8
TABLE_SIZE = 16
LAYOUT = "row_tiles"
INT8 = (-128, 127)
PAIR_TABLE_BITS = 5  # magnitudes of at most 5 bits: a 32-entry table in two registers
MAX_TABLE_SHIFT = 8  # powers of two tried to make a 4-bit table's values integers


def unit_bits(fmt: BlockFormat) -> int:
    """Bits of the layout's unit for ``fmt``: one code for 8-bit integer codes and for codes that are
    float16's top byte (E5M2), else a 32-bit word."""
    elem = fmt.element
    return BYTE_BITS if (elem.kind == "int" and elem.bits == BYTE_BITS) or half_prefix(elem) else WORD_BITS


def group_units(fmt: BlockFormat) -> int:
    """Units in a group: the fewest that hold a whole number of ``fmt``'s codes."""
    return fmt.element.bits // math.gcd(fmt.element.bits, unit_bits(fmt))


def codes_per_group(fmt: BlockFormat) -> int:
    return group_units(fmt) * unit_bits(fmt) // fmt.element.bits


def tile_height(isa: str) -> int:
    """Rows in a tile of the layout for ``isa``: the rows one task sums, its lanes times :data:`VECTORS`."""
    if isa not in VECTOR_LANES:
        raise ValueError(f"isa must be one of {', '.join(VECTOR_LANES)}, got {isa!r}")
    return VECTOR_LANES[isa] * VECTORS


def applies(fmt: BlockFormat, n: int, k: int, isa: str) -> bool:
    """Whether an ``n x k`` weight in ``fmt`` can take the row-tile GEMV: blocks of whole word
    groups, no partial block, and whole tiles of rows."""
    return fmt.block_size % codes_per_group(fmt) == 0 and k % fmt.block_size == 0 and n % tile_height(isa) == 0


def scale_nan_code(fmt: BlockFormat) -> int | None:
    """The scale code that carries a block's NaN codes (see the module's docstring): the scale's
    first NaN code, where ``fmt``'s element has NaN codes and its scale has one."""
    if not fmt.element.has_nan:
        return None
    nan = np.flatnonzero(np.isnan(fmt.scale.values))
    return int(nan[0]) if nan.size else None


def nan_into_scales(codes: np.ndarray, scales: np.ndarray, fmt: BlockFormat) -> np.ndarray:
    """(n, blocks) ``scales`` with :func:`scale_nan_code` for every block whose codes hold a NaN."""
    scales = np.asarray(scales, np.uint8)
    nan_scale = scale_nan_code(fmt)
    if nan_scale is None:
        return scales
    elements = unpack_codes(codes, fmt.element.bits)
    if elements.shape[1] != scales.shape[1] * fmt.block_size:
        raise ValueError(f"{LAYOUT} needs whole {fmt.block_size}-element blocks of {fmt.name} codes; got "
                         f"{elements.shape[1]} codes a row for {scales.shape[1]} scales")
    nan_code = np.isnan(fmt.element.values)[elements].reshape(*scales.shape, fmt.block_size)
    return np.where(nan_code.any(axis=-1), np.uint8(nan_scale), scales)


def tile_rows(codes: np.ndarray, scales: np.ndarray, fmt: BlockFormat, isa: str) -> tuple[np.ndarray, np.ndarray]:
    """The codecs' (n, bytes) codes and (n, blocks) scales in the ``row_tiles`` layout:
    codes (n / rows, units, rows) (uint32 little-endian words, or uint8 codes, see :func:`unit_bits`) and
    scales (n / rows, blocks, rows), ``rows`` the :func:`tile_height` of ``isa``,
    a block with a NaN code taking the scale's NaN code (:func:`nan_into_scales`)."""
    codes = np.ascontiguousarray(codes, dtype=np.uint8)
    n = codes.shape[0]
    unit_bytes = unit_bits(fmt) // 8
    rows = tile_height(isa)
    if n % rows or codes.shape[1] % unit_bytes:
        raise ValueError(f"{LAYOUT} needs a multiple of {rows} rows of whole {unit_bits(fmt)}-bit units of "
                         f"{fmt.name} codes; got {n} rows of {codes.shape[1]} bytes")
    units = codes.view(f"<u{unit_bytes}").reshape(n // rows, rows, -1)
    tiled_scales = nan_into_scales(codes, scales, fmt).reshape(n // rows, rows, -1)
    return (np.ascontiguousarray(units.transpose(0, 2, 1)).astype(f"u{unit_bytes}", copy=False),
            np.ascontiguousarray(tiled_scales.transpose(0, 2, 1)))


def int8_table(values) -> tuple[list[int], int] | None:
    """(values * 2^shift as int8, shift) for a decode table of at most 32 values that all are
    such integers, else None."""
    values = np.asarray(values, np.float64)
    if len(values) > 2 * TABLE_SIZE or not np.all(np.isfinite(values)):
        return None
    for shift in range(MAX_TABLE_SHIFT):
        scaled = values * 2.0**shift
        if np.all(scaled == np.round(scaled)):
            ints = [int(v) for v in scaled]
            return (ints, shift) if INT8[0] <= min(ints) and max(ints) <= INT8[1] else None
    return None


def magnitudes(elem) -> np.ndarray:
    """A float element's values with the sign bit clear, in code order."""
    return np.asarray(elem.values[: 1 << (elem.bits - 1)])


def half_prefix(elem) -> bool:
    """Whether ``elem``'s codes are float16's top byte, every value (NaN and Inf included) that of
    the float16 the code begins (E5M2): one convert decodes it."""
    if elem.bits != 8:
        return False
    halves = (np.arange(256, dtype=np.uint16) << np.uint16(8)).view(np.float16).astype(np.float32)
    values = np.asarray(elem.values, np.float32)
    nan = np.isnan(halves)
    return bool(np.array_equal(nan, np.isnan(values)) and np.array_equal(halves[~nan], values[~nan]))


def table_vector(elem, lanes: int, shift: int, bias: int = 0, first: int = 0):
    """16 bytes (``elem``'s values * 2^shift + bias, codes ``first`` to ``first + 15``) in every 128-bit
    lane of an int32 vector, byte ``i`` of lane ``q`` holding code ``first + (4q + i) mod 16``
    (``vpshufb`` looks up per 128-bit lane). Built from the element's decode expression, so LLVM
    folds it into a constant."""
    quad = tirx.Ramp(tirx.const(0, "int32"), tirx.const(4, "int32"), lanes)
    table = i32(0, lanes)
    for i in range(4):
        code = ((quad + i32(i, lanes)) & i32(TABLE_SIZE - 1, lanes)) + i32(first, lanes)
        value = tirx.Cast(f"int32x{lanes}", element_value(elem, code) * tirx.Broadcast(tirx.const(2.0**shift, "float32"), lanes))
        table = table | (((value + i32(bias, lanes)) & i32(0xFF, lanes)) << i32(8 * i, lanes))
    return table


class _Decoder:
    """The element values of one vector of words, for each code position in the word."""

    def __init__(self, fmt: BlockFormat, isa: str):
        self.fmt, self.isa, self.lanes = fmt, isa, VECTOR_LANES[isa]
        self.bits = fmt.element.bits
        self.f32 = f"float32x{self.lanes}"
        self.table_shift = 0
        self.nan_codes = scale_nan_code(fmt) is None  # whether the decode tests for NaN codes, else the scales carry them
        if self.bits == 4 and isa == "avx512":
            self.mode = "permute"
        elif isa == "avx512" and fmt.element.kind == "float" and self.bits - 1 <= PAIR_TABLE_BITS:
            self.mode = "magnitude"
            # entry m of the pair: the value of magnitude m mod 2^(bits - 1), for codes of fewer than 5 magnitude bits
            entry = tirx.Ramp(tirx.const(0, "int32"), tirx.const(1, "int32"), self.lanes)
            magnitude_mask = i32((1 << (self.bits - 1)) - 1, self.lanes)
            self.magnitude_table = [element_value(fmt.element, (entry + i32(half * self.lanes, self.lanes)) & magnitude_mask)
                                    for half in range(2)]
        elif self.bits == 4 and isa == "avx2" and (table := int8_table(fmt.element.values)) is not None:
            self.mode = "int8"
            _, self.table_shift = table
            self.table = table_vector(fmt.element, self.lanes, self.table_shift)
        elif (isa == "avx2" and fmt.element.kind == "float" and self.bits - 1 <= PAIR_TABLE_BITS
              and (table := int8_table(magnitudes(fmt.element))) is not None):
            self.mode = "int8_pair"
            _, self.table_shift = table
            self.table_pair = [table_vector(fmt.element, self.lanes, self.table_shift, first=first) for first in (0, TABLE_SIZE)]
        elif half_prefix(fmt.element):
            self.mode = "half"
        elif fmt.element.kind == "float" and self.bits == BYTE_BITS and not self.nan_codes and not fmt.element.inf:
            self.mode = "halves"
        elif fmt.element.kind == "int":  # sign-extend and convert; 2^-frac_bits goes into the block scale
            self.mode = "int"
            self.table_shift = fmt.element.frac_bits
        else:
            self.mode = "arithmetic"

    def values(self, words: list) -> list:
        """float32 vectors of every code in a group of ``words`` (uint32 lanes), in element order."""
        per = codes_per_group(self.fmt)
        lanes = self.lanes
        if self.mode in ("permute", "int8", "half", "halves"):  # 4- and 8-bit codes: a group is one unit
            [word] = words
        if self.mode == "permute":
            table = element_value(self.fmt.element, tirx.Ramp(tirx.const(0, "int32"), tirx.const(1, "int32"), lanes))
            index = tirx.reinterpret(f"int32x{lanes}", word)
            return [tirx.call_llvm_pure_intrin(self.f32, "llvm.x86.avx512.permvar.sf.512", table,
                                               index >> i32(4 * j, lanes) if j else index) for j in range(per)]
        if self.mode == "int8":
            index = tirx.reinterpret(f"int32x{lanes}", word)
            out = [None] * per
            for half in range(2):  # even elements from low nibbles, odd from high
                nibbles = ((index >> i32(4, lanes)) if half else index) & i32(0x0F0F0F0F, lanes)
                looked = tirx.call_llvm_pure_intrin(f"int8x{4 * lanes}", "llvm.x86.avx2.pshuf.b",
                                                    tirx.reinterpret(f"int8x{4 * lanes}", self.table),
                                                    tirx.reinterpret(f"int8x{4 * lanes}", nibbles))
                looked = tirx.reinterpret(f"int32x{lanes}", looked)
                for byte in range(4):
                    top = looked << i32(24 - 8 * byte, lanes) if byte < 3 else looked
                    out[2 * byte + half] = tirx.Cast(self.f32, top >> i32(24, lanes))
            return out
        if self.mode == "magnitude":
            return [self._magnitude_lookup(self._top(words, j)) for j in range(per)]
        if self.mode == "int8_pair":
            return [self._int8_pair_lookup(self._top(words, j)) for j in range(per)]
        if self.mode == "half":  # each byte code widened to 16 bits, shifted to the top and converted as float16
            code16 = tirx.Cast(f"uint16x{lanes}", word) << tirx.Broadcast(tirx.const(8, "uint16"), lanes)
            return [tirx.Cast(self.f32, tirx.reinterpret(f"float16x{lanes}", code16))]
        if self.mode == "halves":
            return self._halves(word)
        tops = [tirx.reinterpret(f"int32x{lanes}", self._top(words, j)) for j in range(per)]
        if self.mode == "int":
            return [tirx.Cast(self.f32, top >> i32(WORD_BITS - self.bits, lanes)) for top in tops]
        return [element_value_top(self.fmt.element, top, self.nan_codes) for top in tops]

    def _halves(self, word) -> list:
        """The four 8-bit float codes of a word (no NaN or Inf code to decode): an arithmetic shift of each
        16-bit half puts its top code's sign at the half's top and its magnitude under bfloat16's
        exponent and mantissa, so one shift of 16-bit halves serves two codes and a shift left by 8
        before it the other two; each bfloat16 becomes FP32 by a mask (a high half) or a shift and a
        mask (a low half), then a multiply by the power of two of the bias (subnormal codes exact)."""
        lanes, elem = self.lanes, self.fmt.element
        halves = tirx.reinterpret(f"int16x{2 * lanes}", word)
        spread = tirx.Broadcast(tirx.const(8 - elem.ebits, "int16"), 2 * lanes)
        odd = tirx.reinterpret(f"uint32x{lanes}", halves >> spread)  # codes 1 and 3
        even = tirx.reinterpret(f"uint32x{lanes}", (halves << tirx.Broadcast(tirx.const(8, "int16"), 2 * lanes)) >> spread)
        mask = u32(0x80000000 | (((1 << (elem.bits - 1)) - 1) << (23 - elem.mbits)), lanes)
        placed = [(even << u32(16, lanes)) & mask, (odd << u32(16, lanes)) & mask, even & mask, odd & mask]
        bias = tirx.Broadcast(tirx.const(2.0 ** (127 - elem.bias), "float32"), lanes)
        return [tirx.reinterpret(self.f32, bits) * bias for bits in placed]

    def _magnitude_lookup(self, top):
        """A float code's value from the top bits of ``top``: its magnitude looked up in a 32-entry
        table held in two registers (``vpermi2ps`` reads the low 5 bits of each index), its sign ORed in."""
        lanes = self.lanes
        magnitude = tirx.reinterpret(f"int32x{lanes}", top >> u32(WORD_BITS - self.bits, lanes))
        looked = tirx.call_llvm_pure_intrin(self.f32, "llvm.x86.avx512.vpermi2var.ps.512", self.magnitude_table[0],
                                            magnitude, self.magnitude_table[1])
        return self._with_sign(looked, top)

    def _int8_pair_lookup(self, top):
        """A float code's value * 2^table_shift from the top bits of ``top``: its magnitude ``m`` (at most
        5 bits) looked up by two ``vpshufb``, one per 16-entry half of the int8 table. ``vpshufb`` gives
        0 for an index byte with its top bit set, so index ``m + 0x70`` reads the low half only for
        ``m < 16`` and ``(m ^ 16) + 0x70`` the high half only for ``m >= 16``; the other three bytes of
        each lane get 0x80 and read 0. Converted from int32, its sign ORed in."""
        lanes, magnitude_bits = self.lanes, self.bits - 1
        magnitude = (top << u32(1, lanes)) >> u32(WORD_BITS - magnitude_bits, lanes)
        bias = u32(0x80808070, lanes)
        looked = [tirx.call_llvm_pure_intrin(f"int8x{4 * lanes}", "llvm.x86.avx2.pshuf.b",
                                             tirx.reinterpret(f"int8x{4 * lanes}", table),
                                             tirx.reinterpret(f"int8x{4 * lanes}", index + bias))
                  for table, index in zip(self.table_pair, (magnitude, magnitude ^ u32(TABLE_SIZE, lanes)))]
        return self._with_sign(tirx.Cast(self.f32, tirx.reinterpret(f"int32x{lanes}", looked[0] | looked[1])), top)

    def _with_sign(self, magnitude, top):
        """The float32 ``magnitude`` with the sign of the code at the top of ``top`` ORed in."""
        sign = top & u32(0x80000000, self.lanes)
        return tirx.reinterpret(self.f32, tirx.reinterpret(f"uint32x{self.lanes}", magnitude) | sign)

    @property
    def pairs(self) -> bool:
        """Whether two vectors' byte codes fit one 128-bit register, where interleaving them with zero
        bytes (``vpunpcklbw``, ``vpunpckhbw``) places each vector's as float16 in one instruction
        (:meth:`half_pair`; AVX2's 8 lanes; with 16, zero extension and a shift take fewer)."""
        return self.mode == "half" and 2 * self.lanes * BYTE_BITS <= 128

    def half_pair(self, pair) -> list:
        """float32 vectors of the two vectors of byte codes in ``pair`` (``mode == "half"``)."""
        lanes = self.lanes
        zero = tirx.Broadcast(tirx.const(0, "uint8"), 2 * lanes)
        return [tirx.Cast(self.f32, tirx.reinterpret(f"float16x{lanes}", tirx.Shuffle(
            [zero, pair], [i for t in range(half * lanes, (half + 1) * lanes) for i in (t, 2 * lanes + t)])))
            for half in range(2)]

    def widen(self, unit):
        """A vector of units as uint32 words: a byte code sign-extended (``vpmovsxbd``), as if the
        only code of a word, with copies of its sign above it, so that LLVM folds the integer
        decode's shift to the top and back into the extension; float16 prefixes stay bytes."""
        if unit_bits(self.fmt) == WORD_BITS or self.mode == "half":
            return unit
        lanes = self.lanes
        return tirx.reinterpret(f"uint32x{lanes}", tirx.Cast(f"int32x{lanes}", tirx.reinterpret(f"int8x{lanes}", unit)))

    def _top(self, words: list, j: int):
        """Code ``j`` of the group in the top bits of uint32 lanes (the bits below it are zero or
        other codes'): one shift, or for a code that straddles two words, its low bits from the top
        of one word (a logical shift, so no sign bits come along) and its high bits from the next."""
        lanes, bits = self.lanes, self.bits
        word, offset = divmod(bits * j, WORD_BITS)
        spill = offset + bits - WORD_BITS  # bits of the code in the next word
        if spill <= 0:
            return words[word] << u32(-spill, lanes) if spill else words[word]
        low = (words[word] >> u32(offset, lanes)) << u32(WORD_BITS - bits, lanes)
        return low | (words[word + 1] << u32(WORD_BITS - spill, lanes))


def lane_slice(v, lanes: int):
    """The ``lanes`` elements of vector ``v`` of a tile's rows."""
    return tirx.Ramp(v * lanes, 1, lanes)


def _gemv_body(x, codes, scales, y, fmt: BlockFormat, isa: str, tensor_scale: float | None, specials: bool):
    from tvm.script.ir_builder import IRBuilder
    from tvm.script.ir_builder import tirx as T

    decoder = _Decoder(fmt, isa)
    lanes, f32 = decoder.lanes, decoder.f32
    per, group, unit = codes_per_group(fmt), group_units(fmt), f"uint{unit_bits(fmt)}x{decoder.lanes}"
    block_groups = fmt.block_size // per
    n_tiles, _, _ = (int(v) for v in codes.shape)
    n_blocks = int(scales.shape[1])
    rows = tile_height(isa)
    zero = tirx.Broadcast(tirx.const(0.0, "float32"), lanes)
    post = 2.0**-decoder.table_shift * (1.0 if tensor_scale is None else tensor_scale)

    with IRBuilder() as ib, T.parallel(0, n_tiles) as tile:
        acc = T.alloc_buffer((rows,), "float32", scope="local")
        block_sum = T.alloc_buffer((rows,), "float32", scope="local")
        for v in range(VECTORS):
            T.buffer_store(acc, zero, [lane_slice(v, lanes)])
        with T.serial(0, n_blocks) as b:
            for v in range(VECTORS):
                T.buffer_store(block_sum, zero, [lane_slice(v, lanes)])
            for g_in_block in range(block_groups):
                g = b * block_groups + g_in_block
                def accumulate(v, j, value, g=g):
                    xj = tirx.Broadcast(x[0, g * per + j], lanes)
                    T.buffer_store(block_sum, block_sum.vload([v * lanes], f32) + value * xj, [lane_slice(v, lanes)])

                if decoder.pairs:  # one byte code a group
                    for v in range(0, VECTORS, 2):
                        pair = codes.vload([tile, g, v * lanes], f"uint8x{2 * lanes}")
                        for half, value in enumerate(decoder.half_pair(pair)):
                            accumulate(v + half, 0, value)
                    continue
                for v in range(VECTORS):
                    words = [decoder.widen(codes.vload([tile, g * group + t, v * lanes], unit))
                             for t in range(group)]
                    for j, value in enumerate(decoder.values(words)):
                        accumulate(v, j, value)
            for v in range(VECTORS):
                scale = scale_value(fmt.scale, scales.vload([tile, b, v * lanes], f"uint8x{lanes}"), specials)
                T.buffer_store(acc, acc.vload([v * lanes], f32) + block_sum.vload([v * lanes], f32) * scale,
                               [lane_slice(v, lanes)])
        for v in range(VECTORS):
            out = acc.vload([v * lanes], f32)
            if post != 1.0:
                out = out * tirx.Broadcast(tirx.const(post, "float32"), lanes)
            T.buffer_store(y, out, [0, tirx.Ramp(tile * rows + v * lanes, 1, lanes)])
    return ib.get()


def gemv_kernel(fmt: BlockFormat, n: int, k: int, isa: str, tensor_scale: float | None = None,
                scale_specials: bool = True):
    """``y (1, n) = x (1, k) @ W^T`` from ``row_tiles`` codes and scales, scheduled for ``isa``
    (``"avx512"`` or ``"avx2"``, see ``kernel_schedules.vector_isa``); ``scale_specials=False`` for scales
    none of whose codes needs ``tir_decode.scale_value``'s special cases (``tir_decode.needs_scale_specials``)."""
    if not applies(fmt, n, k, isa):
        raise ValueError(f"the row-tile GEMV takes {fmt.name} weights with a multiple of {tile_height(isa)} rows and of "
                         f"{fmt.block_size} inputs; got {n} x {k}")
    units = k // codes_per_group(fmt) * group_units(fmt)
    x = te.placeholder((1, k), "float32", name="x")
    rows = tile_height(isa)
    codes = te.placeholder((n // rows, units, rows), f"uint{unit_bits(fmt)}", name="codes")
    scales = te.placeholder((n // rows, math.ceil(k / fmt.block_size), rows), "uint8", name="scales")
    y = te.extern((1, n), [x, codes, scales],
                  lambda ins, outs: _gemv_body(*ins, *outs, fmt, isa, tensor_scale, scale_specials), name="gemv",
                  dtype="float32")
    return te.create_prim_func([x, codes, scales, y]).with_attr("tirx.is_scheduled", True)
