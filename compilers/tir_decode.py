"""TIR expressions that decode packed codes, derived from the format table.

Every element type decodes with integer bit operations on its code, so one
expression serves LLVM (where TVM's fp4/fp6 casts fail) and CUDA alike:

- a float ExMy code places its magnitude bits at the top of an FP32 exponent and
  mantissa, ORs in the sign, and multiplies by ``2^(127 - bias)``: normals land on
  their value, and subnormals pass through an FP32 subnormal whose product with a
  power of two is exact. Types with at most two exponent bits, where subnormal codes
  are common, re-bias the exponent field with an integer add instead and build their
  subnormals from an integer conversion, so no FP32 subnormal slows the CPU down.
  NaN and Inf codes are selected from the table's rules.
- an INT code is sign-extended and scaled by ``2^-frac_bits``.

Scales decode the same way: E8M0 is ``2^(s - 127)`` built from its exponent field
(with 0 and 255 selected), E4M3 scales reuse the element decode.

Code extraction follows a named layout (see ``simulators.layouts``): where in a row
of bytes element ``k`` lives, and at which bit.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import te, tirx

from edgekit.simulators import BlockFormat
from edgekit.simulators.formats import ElementType, ScaleType
from edgekit.simulators.layouts import (
    GROUP_ELEMENTS,
    LANES,
    NIBBLE_HALVES,
    PACKED,
    SIX_BIT_PLANES,
    check_layout,
)

FEW_EXPONENT_BITS = 2  # E2M1, E2M3: decode without FP32 subnormal intermediates


def lanes_of(expr) -> int:
    """Vector lanes of a TIR expression or tensor element (1 for a scalar)."""
    if isinstance(expr, te.TensorSlice):
        expr = expr.asobject()
    return tvm.DataType(str(expr.ty)).lanes


def _typed(dtype: str, lanes: int) -> str:
    return dtype if lanes == 1 else f"{dtype}x{lanes}"


def _const(value, dtype: str, lanes: int = 1):
    scalar = tirx.const(value, dtype)
    return scalar if lanes == 1 else tirx.Broadcast(scalar, lanes)


def u32(value, lanes: int = 1):
    return _const(value, "uint32", lanes)


def i32(value, lanes: int = 1):
    return _const(value, "int32", lanes)


def f32(value, lanes: int = 1):
    return _const(value, "float32", lanes)


def _magnitude_mask(elem: ElementType) -> int:
    return (1 << (elem.bits - 1)) - 1


def element_value(elem: ElementType, code) -> tirx.PrimExpr:
    """The float32 value of ``code`` (any integer dtype, scalar or vector) as ``elem`` defines it."""
    n = lanes_of(code)
    u, f = (lambda v: u32(v, n)), (lambda v: f32(v, n))
    as_u32, as_i32, as_f32 = _typed("uint32", n), _typed("int32", n), _typed("float32", n)
    c = tirx.Cast(as_u32, code)
    if elem.kind == "int":
        width = 32 - elem.bits
        signed = tirx.reinterpret(as_i32, c << u(width)) >> _const(width, "int32", n)
        return tirx.Cast(as_f32, signed) * f(2.0**-elem.frac_bits)
    sign = (c >> u(elem.bits - 1)) << u(31)
    mag = c & u(_magnitude_mask(elem))
    placed = sign | (mag << u(23 - elem.mbits))
    if elem.ebits <= FEW_EXPONENT_BITS:
        # Subnormal codes are a large share of such a format's values, and CPUs slow down
        # on subnormal FP32 operands: re-bias normals in the integer domain instead, and
        # build subnormals (m * 2^(emin - mbits)) from an integer conversion.
        normal = tirx.reinterpret(as_f32, placed + u((127 - elem.bias) << 23))
        tiny = tirx.Cast(as_f32, tirx.reinterpret(as_i32, mag)) * f(2.0 ** (elem.emin - elem.mbits))
        tiny = tirx.reinterpret(as_f32, tirx.reinterpret(as_u32, tiny) | sign)
        value = tirx.Select(mag >> u(elem.mbits) == u(0), tiny, normal)
    else:
        value = tirx.reinterpret(as_f32, placed) * f(2.0 ** (127 - elem.bias))
    return _with_specials(elem, placed, value, n)


def element_value_top(elem: ElementType, top, nan_codes: bool = True) -> tirx.PrimExpr:
    """The float32 value of a code held in the top ``elem.bits`` bits of int32 lanes (the bits
    below it are ignored): the same values as :func:`element_value`, with fewer operations
    where codes are shifted out of a word. An arithmetic shift right moves a float's
    magnitude under FP32's exponent field and copies its sign above it, and a mask keeps both.
    Without ``nan_codes`` (a caller that handles them itself), a NaN code of an element without
    Inf decodes as whatever its bits read as a number."""
    n = lanes_of(top)
    if elem.kind == "int":
        signed = top >> _const(32 - elem.bits, "int32", n)
        return tirx.Cast(_typed("float32", n), signed) * f32(2.0**-elem.frac_bits, n)
    as_u32 = _typed("uint32", n)
    if elem.ebits <= FEW_EXPONENT_BITS:
        return element_value(elem, tirx.reinterpret(as_u32, top) >> u32(32 - elem.bits, n))
    # the magnitude (ebits + mbits bits) ends at bit 30, and in FP32 at bit 23 - mbits + ebits + mbits - 1
    spread = tirx.reinterpret(as_u32, top >> _const(8 - elem.ebits, "int32", n))
    placed = spread & u32(0x80000000 | (_magnitude_mask(elem) << (23 - elem.mbits)), n)
    value = tirx.reinterpret(_typed("float32", n), placed) * f32(2.0 ** (127 - elem.bias), n)
    return _with_specials(elem, placed, value, n) if nan_codes or elem.inf else value


def _with_specials(elem: ElementType, placed, value, n: int):
    """``value`` with the NaN and Inf codes of ``elem`` selected, read from ``placed``: the code's
    sign at bit 31 and its magnitude bits under FP32's exponent and mantissa fields."""
    u, nan = (lambda v: u32(v, n)), f32(float("nan"), n)
    if elem.nan == "all-ones":
        return tirx.Select(placed & u(0x7FFFFFFF) == u(_magnitude_mask(elem) << (23 - elem.mbits)), nan, value)
    if elem.nan == "ieee":
        exp_field = ((1 << elem.ebits) - 1) << 23
        man = placed & u(((1 << elem.mbits) - 1) << (23 - elem.mbits))
        inf = tirx.reinterpret(_typed("float32", n), (placed & u(0x80000000)) | u(0x7F800000))
        return tirx.Select(placed & u(exp_field) == u(exp_field), tirx.Select(man == u(0), inf, nan), value)
    return value


def scale_value(scale: ScaleType, code, specials: bool = True) -> tirx.PrimExpr:
    """The float32 value of a block scale code (scalar or vector): an E8M0 code placed in FP32's
    exponent field, an element-typed code decoded as its element. ``specials=False`` leaves out what
    only some codes need, for codes known to hold none of them (:func:`needs_scale_specials`): E8M0's
    selects of 0 and 255; an element's sign and its NaN and Inf selects (the code is placed under
    FP32's exponent and mantissa fields and multiplied by a power of two)."""
    n = lanes_of(code)
    s = tirx.Cast(_typed("uint32", n), code)
    if scale.element is not None:
        if specials or scale.element.ebits <= FEW_EXPONENT_BITS:
            return element_value(scale.element, code)
        return _placed_value(scale.element, s)
    value = tirx.reinterpret(_typed("float32", n), s << u32(23, n))
    if not specials:
        return value
    value = tirx.Select(s == u32(0, n), f32(2.0**-127, n), value)
    return tirx.Select(s == u32(255, n), f32(float("nan"), n), value)


def _placed_value(elem: ElementType, code):
    """The value of a float code with its sign bit clear, placed under FP32's exponent and mantissa fields
    (no NaN or Inf code; a subnormal one passes through an FP32 subnormal)."""
    n = lanes_of(code)
    return tirx.reinterpret(_typed("float32", n), code << u32(23 - elem.mbits, n)) * f32(2.0 ** (127 - elem.bias), n)


def needs_scale_specials(scale: ScaleType, codes: np.ndarray) -> bool:
    """Whether any of these scale codes needs what :func:`scale_value` leaves out without ``specials``: a code
    whose value is not what its bits make under FP32's fields (E8M0's 0 and 255; an element-typed
    code with its sign bit set, a NaN or Inf code), or any code of an element with two or fewer exponent
    bits (decoded without FP32 subnormals, see :func:`element_value`)."""
    used = np.unique(np.asarray(codes, np.uint8)).astype(np.int64)
    elem = scale.element
    if elem is None:
        placed = (used << 23).astype(np.uint32).view(np.float32).astype(np.float64)
    elif elem.ebits <= FEW_EXPONENT_BITS:
        return True
    else:
        bits = (used << (23 - elem.mbits)).astype(np.uint32).view(np.float32).astype(np.float64)
        placed = bits * 2.0 ** (127 - elem.bias)
    return not np.array_equal(placed, scale.values[used])


def element_code(fmt: BlockFormat, layout: str, codes, row: tuple, b, j) -> tirx.PrimExpr:
    """The code (uint32) of element ``j`` of block ``b`` of the row ``codes[row]`` in ``layout``.

    packed: the simulators' layout; a group of ``bytes_per_group`` little-endian bytes
    holds ``codes_per_group`` codes, lowest bits first.
    nibble_halves and six_bit_planes: 16 neighbouring elements from 16 consecutive bytes
    at one shift (see ``simulators.layouts``), so the extraction vectorizes.
    """
    check_layout(fmt, layout)
    bits = fmt.element.bits
    mask = u32((1 << bits) - 1)
    if layout == PACKED:
        per, nbytes = fmt.codes_per_group, fmt.bytes_per_group
        first = b * fmt.bytes_per_block + (j // per) * nbytes
        word = tirx.Cast("uint32", codes[(*row, first)])
        for i in range(1, nbytes):
            word = word | (tirx.Cast("uint32", codes[(*row, first + i)]) << u32(8 * i))
        if per == 1:
            return word
        return (word >> tirx.Cast("uint32", (j % per) * bits)) & mask
    k = b * fmt.block_size + j
    t = k % LANES
    if layout == NIBBLE_HALVES:
        group = k // GROUP_ELEMENTS[NIBBLE_HALVES]
        return _bits(codes[(*row, group * LANES + t)], ((k // LANES) % 2) * 4, 4)
    group = k // GROUP_ELEMENTS[SIX_BIT_PLANES]
    quarter = (k // LANES) % 4
    base = group * (GROUP_ELEMENTS[SIX_BIT_PLANES] * 6 // 8)
    low = _bits(codes[(*row, base + (quarter // 2) * LANES + t)], (quarter % 2) * 4, 4)
    top = _bits(codes[(*row, base + 2 * LANES + t)], quarter * 2, 2)
    return low | (top << u32(4))


def _bits(byte, shift, width: int):
    return (tirx.Cast("uint32", byte) >> tirx.Cast("uint32", shift)) & u32((1 << width) - 1)


def weight_value(fmt: BlockFormat, layout: str, codes, scales, row: tuple, b, j, tensor_scale: float | None):
    """Dequantized element ``j`` of block ``b`` of ``row``, exactly as ``simulators.dequantize`` does it."""
    value = element_value(fmt.element, element_code(fmt, layout, codes, row, b, j))
    value = value * scale_value(fmt.scale, scales[(*row, b)])
    if fmt.tensor_scale:
        value = value * f32(tensor_scale)
    return value
