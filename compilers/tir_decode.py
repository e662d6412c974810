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

from tvm import tirx

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


def u32(value):
    return tirx.const(value, "uint32")


def f32(value):
    return tirx.const(value, "float32")


def element_value(elem: ElementType, code) -> tirx.PrimExpr:
    """The float32 value of ``code`` (any integer dtype) as ``elem`` defines it."""
    c = tirx.Cast("uint32", code)
    if elem.kind == "int":
        width = 32 - elem.bits
        signed = tirx.reinterpret("int32", c << u32(width)) >> tirx.const(width, "int32")
        return tirx.Cast("float32", signed) * f32(2.0**-elem.frac_bits)
    sign = (c >> u32(elem.bits - 1)) << u32(31)
    mag = c & u32((1 << (elem.bits - 1)) - 1)
    exp = mag >> u32(elem.mbits)
    if elem.ebits <= FEW_EXPONENT_BITS:
        # Subnormal codes are a large share of such a format's values, and CPUs slow down
        # on subnormal FP32 operands: re-bias normals in the integer domain instead, and
        # build subnormals (m * 2^(emin - mbits)) from an integer conversion.
        normal = tirx.reinterpret("float32", sign | ((mag << u32(23 - elem.mbits)) + u32((127 - elem.bias) << 23)))
        tiny = tirx.Cast("float32", tirx.reinterpret("int32", mag)) * f32(2.0 ** (elem.emin - elem.mbits))
        tiny = tirx.reinterpret("float32", tirx.reinterpret("uint32", tiny) | sign)
        value = tirx.Select(exp == u32(0), tiny, normal)
    else:
        placed = tirx.reinterpret("float32", sign | (mag << u32(23 - elem.mbits)))
        value = placed * f32(2.0 ** (127 - elem.bias))
    top = u32((1 << elem.ebits) - 1)
    if elem.nan == "all-ones":
        value = tirx.Select(mag == u32((1 << (elem.bits - 1)) - 1), f32(float("nan")), value)
    elif elem.nan == "ieee":
        man = mag & u32((1 << elem.mbits) - 1)
        special = tirx.Select(man == u32(0), tirx.reinterpret("float32", sign | u32(0x7F800000)),
                              f32(float("nan")))
        value = tirx.Select(exp == top, special, value)
    return value


def scale_value(scale: ScaleType, code) -> tirx.PrimExpr:
    """The float32 value of a block scale code."""
    if scale.element is not None:
        return element_value(scale.element, code)
    s = tirx.Cast("uint32", code)
    value = tirx.reinterpret("float32", s << u32(23))
    value = tirx.Select(s == u32(0), f32(2.0**-127), value)
    return tirx.Select(s == u32(255), f32(float("nan")), value)


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
