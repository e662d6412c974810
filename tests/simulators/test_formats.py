import ml_dtypes
import numpy as np
import pytest

from edgekit.simulators import ELEMENTS, FORMATS, QuantizedTensor, dequantize, get_format
from edgekit.simulators.formats import E8M0
from edgekit.simulators.reference import pack_codes

from .oracle import ML_TYPES

# The OCP MX v1.0 numbers, written out independently of the table.
SPEC = {
    "e4m3": {"max_normal": 448.0, "min_subnormal": 2.0**-9, "min_normal": 2.0**-6, "nan": True, "inf": False},
    "e5m2": {"max_normal": 57344.0, "min_subnormal": 2.0**-16, "min_normal": 2.0**-14, "nan": True, "inf": True},
    "e3m2": {"max_normal": 28.0, "min_subnormal": 2.0**-4, "min_normal": 0.25, "nan": False, "inf": False},
    "e2m3": {"max_normal": 7.5, "min_subnormal": 0.125, "min_normal": 1.0, "nan": False, "inf": False},
    "e2m1": {"max_normal": 6.0, "min_subnormal": 0.5, "min_normal": 1.0, "nan": False, "inf": False},
    "int8": {"max_normal": 127 / 64, "min_subnormal": 1 / 64, "min_normal": 1 / 64, "nan": False, "inf": False},
    "int4": {"max_normal": 7 / 4, "min_subnormal": 1 / 4, "min_normal": 1 / 4, "nan": False, "inf": False},
}


@pytest.mark.parametrize("name", sorted(SPEC))
def test_table_matches_spec(name):
    elem, spec = ELEMENTS[name], SPEC[name]
    assert elem.max_normal == spec["max_normal"]
    assert elem.min_subnormal == spec["min_subnormal"]
    assert elem.min_normal == spec["min_normal"]
    assert elem.has_nan == spec["nan"]
    assert np.isinf(elem.values).any() == spec["inf"]


@pytest.mark.parametrize("name", sorted(ML_TYPES))
def test_every_float_code_decodes_like_ml_dtypes(name):
    elem = ELEMENTS[name]
    codes = np.arange(1 << elem.bits, dtype=np.uint8)
    expected = codes.view(ML_TYPES[name]).astype(np.float64)
    np.testing.assert_array_equal(elem.values, expected)  # NaN positions must match too
    assert np.array_equal(np.signbit(elem.values), np.signbit(expected))


def test_every_int_code_decodes_like_ml_dtypes():
    codes = np.arange(256, dtype=np.uint8)
    np.testing.assert_array_equal(ELEMENTS["int8"].values, codes.view(np.int8) / 64.0)
    nibbles = np.arange(16, dtype=np.uint8).view(ml_dtypes.int4).astype(np.float64)
    np.testing.assert_array_equal(ELEMENTS["int4"].values, nibbles / 4.0)


def test_e8m0_scale_codes_decode_like_ml_dtypes():
    expected = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e8m0fnu).astype(np.float64)
    np.testing.assert_array_equal(E8M0.values, expected)
    assert np.isnan(E8M0.values[255])


@pytest.mark.parametrize("name", list(FORMATS))
def test_codec_decodes_every_code(name):
    """Every element code through the Numba decoder, under a unit block scale."""
    fmt = FORMATS[name]
    codes = np.arange(1 << fmt.element.bits, dtype=np.uint8)
    n = len(codes)
    packed = pack_codes(codes, fmt.element.bits)
    unit = 0x38 if fmt.tensor_scale else 127  # E4M3 1.0 / E8M0 1.0
    scales = np.full(-(-n // fmt.block_size), unit, np.uint8)
    padded = np.zeros(len(scales) * fmt.bytes_per_block, np.uint8)
    padded[: len(packed)] = packed
    q = QuantizedTensor(fmt, (n,), 0, padded, scales, np.float32(1.0) if fmt.tensor_scale else None)
    np.testing.assert_array_equal(dequantize(q), fmt.element.values.astype(np.float32))


def test_bits_per_element_include_scales():
    assert get_format("mxfp4").bits_per_element == 4.25
    assert get_format("mxint8").bits_per_element == 8.25
    assert get_format("mxfp6").bits_per_element == 6.25
    assert get_format("nvfp4").bits_per_element == 4.5


def test_names_aliases_and_variants():
    assert get_format("MXFP8").name == "mxfp8_e4m3"
    assert get_format("mxint8@64").block_size == 64
    asym = get_format("mxint8_asym")
    assert asym.element.int_min == -128 and get_format("mxint8").element.int_min == -127
    assert get_format("mxint4").element.int_min == -7
