"""GPTQ and round-to-nearest on INT and MX grids (simulators/gptq.py)."""

import numpy as np
import pytest

from edgekit.simulators import get_format, quantize, quantize_dequantize
from edgekit.simulators.gptq import (
    IntGrid,
    MXGrid,
    calibration_gram,
    gptq,
    grid_named,
    layer_nbytes,
    quantize_layer,
    rtn,
)
from edgekit.simulators.incoherence import Incoherence

GRIDS = ["int2_g64", "int3_g128", "int4_g64", "mxint4", "mxfp4"]


def problem(rows=32, width=256, seed=0):
    """A float32-representable weight and correlated calibration inputs."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((rows, width)).astype(np.float32).astype(np.float64)
    mix = np.eye(width) + 2 * rng.standard_normal((width, width)) / np.sqrt(width)
    x = rng.standard_normal((2048, width)) @ mix
    return w, x


@pytest.mark.parametrize("name", GRIDS)
def test_gptq_output_error_below_rtn(name):
    w, x = problem()
    grid = grid_named(name)
    err = lambda q: np.linalg.norm(x @ (w - q).T)
    assert err(gptq(w, calibration_gram(x, w.shape[1]), grid)) < 0.85 * err(rtn(w, grid))


@pytest.mark.parametrize("name", GRIDS)
def test_identity_hessian_is_rtn(name):
    w, _ = problem(seed=1)
    grid = grid_named(name)
    assert np.array_equal(gptq(w, np.eye(w.shape[1]), grid), rtn(w, grid))


@pytest.mark.parametrize("name", ["int3_g64", "mxfp4"])
def test_lazy_batches_equal_unbatched(name):
    w, x = problem(seed=2)
    h, grid = calibration_gram(x, w.shape[1]), grid_named(name)
    one = gptq(w, h, grid, block_size=1)
    for block in (128, 48):  # 48: group scales fixed with columns past the block still pending
        assert np.array_equal(gptq(w, h, grid, block_size=block), one)


@pytest.mark.parametrize("bits,group", [(2, 64), (3, 128), (4, 64)])
def test_int_values_on_group_grid(bits, group):
    w, x = problem(seed=3)
    grid = IntGrid(bits, group)
    q = gptq(w, calibration_gram(x, w.shape[1]), grid)
    for c in range(0, w.shape[1], group):
        g = q[:, c:c + group]
        levels = [np.unique(row) for row in g]
        assert max(len(v) for v in levels) <= 2**bits
        for row in levels:  # every value is zero + k * scale with float16 scale and zero
            if len(row) > 1:
                step = np.diff(row).min()
                k = (row - row[0]) / step
                assert np.allclose(k, np.rint(k), atol=1e-6)
                assert (row.max() - row.min()) / step <= 2**bits - 1 + 1e-6


@pytest.mark.parametrize("name", ["mxint4", "mxfp4"])
def test_mx_result_is_a_fixed_point_of_the_codec(name):
    w, x = problem(seed=4)
    q = gptq(w, calibration_gram(x, w.shape[1]), grid_named(name))
    q32 = q.astype(np.float32)
    assert np.array_equal(q32, q)  # exactly float32
    assert np.array_equal(quantize_dequantize(q32, name, axis=1), q32)
    fmt = get_format(name)
    # each block's values are element values times the block's E8M0 scale the codec stores
    stored = quantize(q32, fmt, axis=1)
    scale = fmt.scale.values[stored.scales].repeat(fmt.block_size, axis=1)
    elements = set(fmt.element.values[np.isfinite(fmt.element.values)])
    assert set(np.unique(q32 / scale)) <= elements


@pytest.mark.parametrize("name", ["mxint4", "mxfp4"])
def test_mx_rounding_matches_codec_at_ties(name):
    fmt = get_format(name)
    mags = fmt.element.magnitudes[: fmt.element.max_magnitude_code + 1]
    row = np.concatenate([[mags[-1]], (mags[1:] + mags[:-1]) / 2, -(mags[1:] + mags[:-1]) / 2, [mags[-1] * 1.3]])
    row = np.concatenate([row, np.zeros(-len(row) % fmt.block_size)])
    w = np.tile(row, (3, 1)).astype(np.float32)
    assert np.array_equal(rtn(w, MXGrid(fmt)), quantize_dequantize(w, fmt, axis=1))


def test_rotation_and_scales_are_undone():
    w, x = problem(rows=16, width=128, seed=5)
    gram = calibration_gram(x, 128)
    m = np.linspace(0.5, 2.0, 128)
    # INT4 on the rotated, scaled weights lands near w in the original basis (W H^T is as far as w itself)
    q = quantize_layer(w, gram, grid_named("int4_g64"), method="rtn", scales=m, rotation=Incoherence(128, 0))
    assert np.linalg.norm(q - w) < 0.15 * np.linalg.norm(w)
    g = quantize_layer(w, gram, grid_named("int4_g64"), method="gptq", scales=m, rotation=Incoherence(128, 0))
    err = lambda a: np.linalg.norm(x @ (w - a).T)
    assert err(g) < err(q)


def test_bytes_count_every_stored_part():
    assert IntGrid(3, 64).nbytes((8, 128)) == 8 * 128 * 3 // 8 + 8 * 2 * 4
    assert MXGrid.named("mxfp4").nbytes((8, 128)) == quantize(np.ones((8, 128), np.float32), "mxfp4", axis=1).nbytes
    assert layer_nbytes(IntGrid(2, 64), (4, 128), scales=True, rotate=True) == \
        IntGrid(2, 64).nbytes((4, 128)) + 2 * 128 + Incoherence(128).side_bytes


def test_bad_input_is_named():
    w, x = problem(rows=4, width=96)
    with pytest.raises(ValueError, match="group_size 64 of int3_g64 does not divide the layer's 96 inputs"):
        gptq(w, calibration_gram(x, 96), IntGrid(3, 64))
    with pytest.raises(ValueError, match="calibration inputs must have 96 features"):
        calibration_gram(x[:, :80], 96)
    with pytest.raises(ValueError, match=r"must be \(96, 96\).*wrong width"):
        gptq(w, np.eye(80), IntGrid(3, 32))
    with pytest.raises(ValueError, match="unknown grid 'int5_g64'"):
        grid_named("int5_g64")
    with pytest.raises(ValueError, match="damp must be positive"):
        gptq(w, np.eye(96), IntGrid(3, 32), damp=0)
