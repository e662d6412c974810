"""The Numba codec and the NumPy reference against the ml_dtypes oracle: zero mismatches."""

import numpy as np
import pytest

from edgekit.simulators import FORMATS, dequantize, kernels, quantize
from edgekit.simulators.formats import E8M0, BlockFormat, ElementType, code_group
from edgekit.simulators.reference import dequantize_reference, quantize_reference, unpack_codes

from . import oracle

BLOCK_EXPONENTS = (-140, -127, -60, -7, 0, 3, 40, 100)


def tie_blocks(fmt, rng) -> np.ndarray:
    """Blocks of exact ties, subnormals, extremes, overflow, +-0, +-Inf, NaN, at several scales.

    Each block starts with an element that pins its scale to 2^e, so the other
    elements land exactly where intended on the element grid.
    """
    elem = fmt.element
    mags = elem.magnitudes[: elem.max_magnitude_code + 1]
    mids = (mags[:-1] + mags[1:]) / 2
    top = 2.0 ** (elem.emax + 1)
    special = np.concatenate([
        mids, -mids, mags, -mags, [0.0, -0.0],
        np.linspace(elem.max_normal, top, 9)[1:-1],  # past the largest normal: saturates
        mags[1:4] / 3, -mags[1:4] / 3,  # below the smallest subnormal
    ])
    rows = []
    B = fmt.block_size
    for e in BLOCK_EXPONENTS:
        vals = rng.permutation(special)
        for i in range(0, len(vals), B - 1):
            chunk = vals[i : i + B - 1]
            row = np.concatenate([[elem.max_normal], chunk, np.zeros(B - 1 - len(chunk))])
            rows.append(row * 2.0**e)
    for bad in (np.nan, np.inf, -np.inf):
        row = rng.standard_normal(B)
        row[B // 2] = bad
        rows.append(row)
    return np.array(rows, dtype=np.float32).reshape(-1, B)


def random_values(fmt, rng, n=1 << 20) -> np.ndarray:
    """About a million values: Gaussian, Laplace and outlier blocks at random scales."""
    B = fmt.block_size
    blocks = n // B
    x = rng.standard_normal((blocks, B))
    x[blocks // 3 :] = rng.laplace(size=(blocks - blocks // 3, B))
    x[::7, 3] *= 40.0
    x *= np.exp2(rng.integers(-40, 40, size=(blocks, 1)))
    return x.astype(np.float32).reshape(-1, B)


def cases(fmt):
    rng = np.random.default_rng(42)
    B = fmt.block_size
    x = np.concatenate([tie_blocks(fmt, rng), random_values(fmt, rng)])
    return x.reshape(-1, 16 * B) if len(x) % 16 == 0 else x.reshape(-1, B)


RULES = [(name, rule) for name in FORMATS for rule in ("floor", "ceil", "rceil") if rule == "floor" or name != "nvfp4"]


@pytest.mark.parametrize("name,rule", RULES)
def test_codec_matches_oracle(name, rule):
    fmt = FORMATS[name]
    x = cases(fmt)
    codes, scales, tensor_scale = oracle.quantize(x, fmt, rule)
    q = quantize(x, fmt, scale_rule=rule)
    got = unpack_codes(q.codes, fmt.element.bits)
    assert x.size >= 1_000_000
    assert np.count_nonzero(got != codes) == 0
    assert np.count_nonzero(q.scales != scales) == 0
    assert q.tensor_scale == tensor_scale


@pytest.mark.parametrize("name", list(FORMATS))
def test_reference_matches_codec(name):
    fmt = FORMATS[name]
    x = cases(fmt)[:4096]
    q, r = quantize(x, fmt), quantize_reference(x, fmt)
    assert np.array_equal(q.codes, r.codes) and np.array_equal(q.scales, r.scales)
    np.testing.assert_array_equal(dequantize(q), dequantize_reference(r))


@pytest.mark.parametrize("name", list(FORMATS))
def test_dequantize_is_value_times_scale(name):
    """Decoding equals element value x block scale (x tensor scale), computed from the tables."""
    fmt = FORMATS[name]
    x = cases(fmt)[:2048]
    q = quantize(x, fmt)
    codes = unpack_codes(q.codes, fmt.element.bits).reshape(x.shape[0], -1, fmt.block_size)
    values = fmt.element.values[codes] * fmt.scale.values[q.scales][..., None]
    expected = (values.astype(np.float32) * np.float32(q.tensor_scale or 1.0)).reshape(x.shape)
    np.testing.assert_array_equal(dequantize(q), expected)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", ["mxfp4", "mxint8", "mxfp6_e3m2", "nvfp4"])
def test_half_inputs_widen_exactly(name, dtype):
    import ml_dtypes

    dt = np.float16 if dtype == "float16" else ml_dtypes.bfloat16
    x = np.random.default_rng(3).standard_normal((64, 256)).astype(dt)
    q16, q32 = quantize(x, name), quantize(x.astype(np.float32), name)
    assert np.array_equal(q16.codes, q32.codes) and np.array_equal(q16.scales, q32.scales)


@pytest.mark.parametrize("name", ["mxfp4", "mxfp6_e2m3", "mxint8", "nvfp4"])
@pytest.mark.parametrize("shape,axis", [((7, 45, 3), 1), ((33, 5), 0), ((2, 3, 70), -1), ((100,), 0)])
def test_any_axis_and_partial_blocks(name, shape, axis):
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    q, r = quantize(x, name, axis), quantize_reference(x, name, axis)
    assert np.array_equal(q.codes, r.codes) and np.array_equal(q.scales, r.scales)
    d = dequantize(q)
    assert d.shape == x.shape
    np.testing.assert_array_equal(d, dequantize_reference(r))
    # a partial last block is zero-padded: the same as quantizing the padded tensor
    moved = np.moveaxis(x, axis, -1)
    B = FORMATS[name].block_size
    pad = np.zeros(moved.shape[:-1] + (-(-moved.shape[-1] // B) * B,), np.float32)
    pad[..., : moved.shape[-1]] = moved
    if FORMATS[name].tensor_scale is False:
        assert np.array_equal(quantize(pad, name).codes, q.codes)


# Element widths no row of the table has: the kernels take any width, packed a code group at a time.
NEW_WIDTHS = [
    BlockFormat("mxint3", ElementType("int3", "int", 3, frac_bits=1), E8M0, 32),
    BlockFormat("mxfp5_e2m2", ElementType("e2m2", "float", 5, ebits=2, mbits=2, bias=1), E8M0, 32),
    BlockFormat("mxint2_b16", ElementType("int2", "int", 2, frac_bits=0), E8M0, 16),
]


@pytest.mark.parametrize("fmt", NEW_WIDTHS, ids=lambda f: f.name)
@pytest.mark.parametrize("shape,axis", [((8, 512), -1), ((70, 9), 0), ((3, 45), 1)])
def test_new_code_widths_match_the_reference(fmt, shape, axis):
    x = np.random.default_rng(11).standard_normal(shape).astype(np.float32) * 3
    q, r = quantize(x, fmt, axis), quantize_reference(x, fmt, axis)
    assert q.codes.shape[-1] == -(-x.shape[axis] // fmt.block_size) * fmt.bytes_per_block
    assert np.array_equal(q.codes, r.codes) and np.array_equal(q.scales, r.scales)
    np.testing.assert_array_equal(dequantize(q), dequantize_reference(r))
    assert len(np.unique(unpack_codes(q.codes, fmt.element.bits))) > 2  # the codes use the width


@pytest.mark.parametrize("fmt", NEW_WIDTHS[:2], ids=lambda f: f.name)
def test_new_code_widths_on_tie_cases(fmt):
    x = cases(fmt)[:4096]
    q, r = quantize(x, fmt), quantize_reference(x, fmt)
    assert np.array_equal(q.codes, r.codes) and np.array_equal(q.scales, r.scales)
    np.testing.assert_array_equal(dequantize(q), dequantize_reference(r))


def test_kernel_code_groups_are_the_table_s():
    assert [kernels.code_group(bits) for bits in range(1, 17)] == [code_group(bits) for bits in range(1, 17)]
