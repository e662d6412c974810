import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from edgekit.simulators import FORMATS, QuantizedTensor, dequantize, quantize, quantize_dequantize
from edgekit.simulators.reference import pack_codes, unpack_codes

finite_or_not = st.floats(width=32, allow_nan=True, allow_infinity=True, allow_subnormal=True)
tensors = arrays(np.float32, st.tuples(st.integers(1, 5), st.integers(1, 80)), elements=finite_or_not)
MX = [name for name, f in FORMATS.items() if not f.tensor_scale]


def same(a, b):
    return np.array_equal(a.view(np.uint32), b.view(np.uint32)) or np.array_equal(a, b, equal_nan=True)


@pytest.mark.parametrize("name", MX)
@given(x=tensors)
def test_quantize_dequantize_is_idempotent(name, x):
    once = quantize_dequantize(x, name)
    assert same(quantize_dequantize(once, name), once)


@pytest.mark.parametrize("rule", ["ceil", "rceil"])
@given(x=arrays(np.float32, st.tuples(st.integers(1, 4), st.integers(1, 70)),
                elements=st.floats(-2.0**100, 2.0**100, width=32)))
def test_other_scale_rules_are_idempotent(rule, x):
    once = quantize_dequantize(x, "mxfp8_e4m3", scale_rule=rule)
    assert same(quantize_dequantize(once, "mxfp8_e4m3", scale_rule=rule), once)


magnitudes = st.floats(1.0, 256.0, width=32)
signed = st.tuples(magnitudes, st.booleans()).map(lambda p: -p[0] if p[1] else p[0])


@given(x=arrays(np.float32, st.tuples(st.integers(1, 4), st.integers(1, 70)), elements=signed))
def test_nvfp4_is_idempotent_while_block_scales_stay_normal(x):
    """NVFP4 is idempotent while every E4M3 block scale is a normal number (a dynamic range
    within the tensor of at most 2^8 keeps them there). Where a block's scale falls among
    E4M3's subnormals, re-quantizing can pick a different scale: a property of the format."""
    once = quantize_dequantize(x, "nvfp4")
    assert same(quantize_dequantize(once, "nvfp4"), once)


def test_nvfp4_coarse_block_scales_are_not_idempotent():
    x = np.array([[393216.0], [1.0]], np.float32)  # second block's scale is an E4M3 subnormal
    once = quantize_dequantize(x, "nvfp4")
    assert quantize_dequantize(once, "nvfp4")[1, 0] != once[1, 0]


@pytest.mark.parametrize("bits", [4, 6, 8])
def test_packing_round_trips_every_byte(bits):
    per_group = {4: 1, 6: 3, 8: 1}[bits]
    rng = np.random.default_rng(0)
    every = np.arange(256, dtype=np.uint8)
    # each byte value at every position of a group, then random groups
    data = np.concatenate([np.repeat(every, per_group), rng.integers(0, 256, 3 * 4096, dtype=np.uint8)])
    data = data[: len(data) // per_group * per_group].reshape(1, -1)
    np.testing.assert_array_equal(pack_codes(unpack_codes(data, bits), bits), data)


@pytest.mark.parametrize("name", list(FORMATS))
def test_codec_round_trips_every_code(name):
    """decode -> encode reproduces the bytes for every code that encodes itself (not NaN/Inf,
    not -2 under symmetric INT clipping), with each block pinned to a unit scale."""
    fmt = FORMATS[name]
    values = fmt.element.values
    ok = np.isfinite(values) & (values >= -fmt.element.max_normal)
    codes = np.flatnonzero(ok).astype(np.uint8)
    B = fmt.block_size
    rng = np.random.default_rng(1)
    blocks = rng.choice(codes, size=(256, B))
    blocks[:, 0] = fmt.element.max_magnitude_code  # pins the scale exponent to 0
    packed = pack_codes(blocks, fmt.element.bits).reshape(1, -1)
    if fmt.tensor_scale:  # E4M3 block scale 448 under tensor scale 1/448: what NVFP4 picks itself
        scale, tensor_scale = 0x7E, np.float32(1 / 448)
    else:  # E8M0 2^0
        scale, tensor_scale = 127, None
    q = QuantizedTensor(fmt, (256 * B,), 0, packed, np.full(256, scale, np.uint8), tensor_scale)
    again = quantize(dequantize(q), fmt)
    np.testing.assert_array_equal(again.codes, q.codes)
    np.testing.assert_array_equal(again.scales, q.scales)
