"""The nibble_halves repack: exact, invertible, and what its definition says."""

import numpy as np
import pytest

from edgekit.simulators import FORMATS, get_format, quantize
from edgekit.simulators.layouts import (
    HALVES_GROUP,
    NIBBLE_HALVES,
    PACKED,
    check_layout,
    from_layout,
    layout_applies,
    layouts_for,
    to_layout,
)
from edgekit.simulators.reference import unpack_codes


@pytest.mark.parametrize("name", ["mxfp4", "mxint4", "nvfp4", "mxfp4@64", "nvfp4@8"])
def test_nibble_halves_places_element_t_and_t_plus_16(name):
    fmt = get_format(name)
    x = np.random.default_rng(1).standard_normal((3, 128)).astype(np.float32)
    q = quantize(x, fmt)
    elements = unpack_codes(q.codes.reshape(-1), fmt.element.bits).reshape(3, -1, HALVES_GROUP)
    halves = to_layout(q.codes, fmt, NIBBLE_HALVES).reshape(3, -1, HALVES_GROUP // 2)
    assert np.array_equal(halves & 0x0F, elements[..., :16])
    assert np.array_equal(halves >> 4, elements[..., 16:])
    assert np.array_equal(from_layout(halves.reshape(q.codes.shape), fmt, NIBBLE_HALVES), q.codes)


def test_every_byte_value_round_trips():
    fmt = get_format("mxfp4")
    codes = np.arange(256, dtype=np.uint8).reshape(-1, 16)
    assert np.array_equal(from_layout(to_layout(codes, fmt, NIBBLE_HALVES), fmt, NIBBLE_HALVES), codes)


def test_layouts_per_format_and_errors():
    for fmt in FORMATS.values():
        assert PACKED in layouts_for(fmt)
        assert (NIBBLE_HALVES in layouts_for(fmt)) == (fmt.element.bits == 4)
    nvfp4 = get_format("nvfp4")
    assert layout_applies(nvfp4, NIBBLE_HALVES, 64) and not layout_applies(nvfp4, NIBBLE_HALVES, 70)
    assert layout_applies(get_format("mxfp4"), NIBBLE_HALVES, 70)  # padded to 96
    assert not layout_applies(get_format("mxint8"), NIBBLE_HALVES, 64)
    with pytest.raises(ValueError, match="allowed: packed"):
        check_layout(get_format("mxint8"), NIBBLE_HALVES)
    with pytest.raises(ValueError, match="needs rows of whole 32-element groups"):
        to_layout(np.zeros((2, 24), np.uint8), get_format("nvfp4"), NIBBLE_HALVES)
