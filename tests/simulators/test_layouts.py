"""The block_halves repack: exact, invertible, and what its definition says."""

import numpy as np
import pytest

from edgekit.simulators import FORMATS, get_format, quantize
from edgekit.simulators.layouts import BLOCK_HALVES, PACKED, check_layout, from_layout, layouts_for, to_layout
from edgekit.simulators.reference import unpack_codes


@pytest.mark.parametrize("name", ["mxfp4", "mxint4", "nvfp4", "mxfp4@64"])
def test_block_halves_places_element_t_and_t_plus_half(name):
    fmt = get_format(name)
    x = np.random.default_rng(1).standard_normal((3, 4 * fmt.block_size)).astype(np.float32)
    q = quantize(x, fmt)
    elements = unpack_codes(q.codes.reshape(-1), fmt.element.bits).reshape(3, -1, fmt.block_size)
    halves = to_layout(q.codes, fmt, BLOCK_HALVES).reshape(3, -1, fmt.block_size // 2)
    half = fmt.block_size // 2
    assert np.array_equal(halves & 0x0F, elements[..., :half])
    assert np.array_equal(halves >> 4, elements[..., half:])
    assert np.array_equal(from_layout(halves.reshape(q.codes.shape), fmt, BLOCK_HALVES), q.codes)


def test_every_byte_value_round_trips():
    fmt = get_format("mxfp4")
    codes = np.arange(256, dtype=np.uint8).reshape(-1, 16)
    assert np.array_equal(from_layout(to_layout(codes, fmt, BLOCK_HALVES), fmt, BLOCK_HALVES), codes)


def test_layouts_per_format_and_errors():
    for fmt in FORMATS.values():
        assert PACKED in layouts_for(fmt)
        assert (BLOCK_HALVES in layouts_for(fmt)) == (fmt.element.bits == 4)
    with pytest.raises(ValueError, match="allowed: packed"):
        check_layout(get_format("mxint8"), BLOCK_HALVES)
    with pytest.raises(ValueError, match="not whole mxfp4 blocks"):
        to_layout(np.zeros((2, 15), np.uint8), get_format("mxfp4"), BLOCK_HALVES)
