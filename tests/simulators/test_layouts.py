"""The vector layouts: exact, invertible repacks that say what their definitions say."""

import numpy as np
import pytest

from edgekit.simulators import FORMATS, get_format, quantize
from edgekit.simulators.layouts import (
    NIBBLE_HALVES,
    PACKED,
    SIX_BIT_PLANES,
    check_layout,
    from_layout,
    layout_applies,
    layouts_for,
    to_layout,
)
from edgekit.simulators.reference import unpack_codes


def element_codes(q):
    return unpack_codes(q.codes, q.format.element.bits)


@pytest.mark.parametrize("name", ["mxfp4", "mxint4", "nvfp4", "mxfp4@64", "nvfp4@8"])
def test_nibble_halves_places_element_t_and_t_plus_16(name):
    fmt = get_format(name)
    q = quantize(np.random.default_rng(1).standard_normal((3, 128)).astype(np.float32), fmt)
    elements = element_codes(q).reshape(3, -1, 32)
    halves = to_layout(q.codes, fmt, NIBBLE_HALVES).reshape(3, -1, 16)
    assert np.array_equal(halves & 0x0F, elements[..., :16])
    assert np.array_equal(halves >> 4, elements[..., 16:])
    assert np.array_equal(from_layout(to_layout(q.codes, fmt, NIBBLE_HALVES), fmt, NIBBLE_HALVES), q.codes)


@pytest.mark.parametrize("name", ["mxfp6_e2m3", "mxfp6_e3m2", "mxfp6_e2m3@16"])
def test_six_bit_planes(name):
    fmt = get_format(name)
    q = quantize(np.random.default_rng(2).standard_normal((3, 192)).astype(np.float32), fmt)
    elements = element_codes(q).reshape(3, -1, 64)
    planes = to_layout(q.codes, fmt, SIX_BIT_PLANES).reshape(3, -1, 48)
    assert planes.size == q.codes.size
    low = np.concatenate([planes[..., :16] & 15, planes[..., :16] >> 4, planes[..., 16:32] & 15,
                          planes[..., 16:32] >> 4], axis=-1)
    assert np.array_equal(low, elements & 15)
    for quarter in range(4):
        assert np.array_equal((planes[..., 32:] >> (2 * quarter)) & 3, elements[..., 16 * quarter:16 * (quarter + 1)] >> 4)
    assert np.array_equal(from_layout(to_layout(q.codes, fmt, SIX_BIT_PLANES), fmt, SIX_BIT_PLANES), q.codes)


@pytest.mark.parametrize(("name", "layout", "width"), [("mxfp4", NIBBLE_HALVES, 16), ("mxfp6_e2m3", SIX_BIT_PLANES, 48)])
def test_every_byte_value_round_trips(name, layout, width):
    fmt = get_format(name)
    codes = np.random.default_rng(0).integers(0, 256, (64, width), dtype=np.uint8)
    codes[:, 0] = np.arange(256)[:64] if width else 0
    assert np.array_equal(from_layout(to_layout(codes, fmt, layout), fmt, layout), codes)


def test_layouts_per_format_and_errors():
    for fmt in FORMATS.values():
        assert PACKED in layouts_for(fmt)
        assert (NIBBLE_HALVES in layouts_for(fmt)) == (fmt.element.bits == 4)
        assert (SIX_BIT_PLANES in layouts_for(fmt)) == (fmt.element.bits == 6)
    nvfp4 = get_format("nvfp4")
    assert layout_applies(nvfp4, NIBBLE_HALVES, 64) and not layout_applies(nvfp4, NIBBLE_HALVES, 70)
    assert layout_applies(get_format("mxfp4"), NIBBLE_HALVES, 70)  # padded to 96
    assert layout_applies(get_format("mxfp6"), SIX_BIT_PLANES, 128)
    assert not layout_applies(get_format("mxfp6"), SIX_BIT_PLANES, 96)
    assert not layout_applies(get_format("mxint8"), NIBBLE_HALVES, 64)
    with pytest.raises(ValueError, match="allowed: packed"):
        check_layout(get_format("mxint8"), NIBBLE_HALVES)
    with pytest.raises(ValueError, match="needs rows of whole 32-element groups"):
        to_layout(np.zeros((2, 24), np.uint8), nvfp4, NIBBLE_HALVES)
    with pytest.raises(ValueError, match="needs rows of whole 64-element groups"):
        from_layout(np.zeros((2, 24), np.uint8), get_format("mxfp6"), SIX_BIT_PLANES)
