import math

import numpy as np
import pytest

from edgekit.simulators import quantize_dequantize
from edgekit.simulators.metrics import qsnr
from edgekit.simulators.rotation import hadamard, rotate_blocks, walsh_hadamard


def test_hadamard_is_orthonormal():
    h = hadamard(32)
    np.testing.assert_allclose(h @ h.T, np.eye(32), atol=1e-12)
    assert set(np.unique(np.abs(h))) == {1 / math.sqrt(32)}


@pytest.mark.parametrize("n", [1, 2, 16, 1024])
def test_fast_walsh_hadamard_equals_the_dense_product(n):
    x = np.random.default_rng(n).standard_normal((3, 2, n))
    np.testing.assert_allclose(walsh_hadamard(x), x @ hadamard(n), rtol=0, atol=1e-12)


@pytest.mark.parametrize("shape", [(3, 12), (0,), ()])
def test_fast_walsh_hadamard_needs_a_power_of_two_length(shape):
    with pytest.raises(ValueError, match="power-of-two length"):
        walsh_hadamard(np.ones(shape))


def test_rotation_preserves_energy_and_spreads_an_outlier():
    x = np.zeros((3, 64), np.float32)
    x[:, 5] = 100.0
    r = rotate_blocks(x, 32, axis=1)
    np.testing.assert_allclose((r.astype(np.float64) ** 2).sum(), (x.astype(np.float64) ** 2).sum(), rtol=1e-6)
    assert np.abs(r[:, :32]).max() == pytest.approx(100 / math.sqrt(32), rel=1e-6)
    np.testing.assert_allclose(rotate_blocks(r, 32, axis=1), x, atol=1e-4)  # H is its own inverse


def test_qsnr():
    x = np.array([3.0, 4.0])
    assert qsnr(x, x) == math.inf
    assert qsnr(x, x * 0.9) == pytest.approx(20.0)
    with pytest.raises(ValueError, match="same shape"):
        qsnr(x, x[:1])
    with pytest.raises(ValueError, match="no energy"):
        qsnr(np.zeros(2), np.zeros(2))


def test_qsnr_orders_formats_by_precision():
    x = np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32)
    s = {f: qsnr(x, quantize_dequantize(x, f)) for f in ("mxint8", "mxfp8_e4m3", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp4")}
    # at block 32 the crest factor is small: mantissa bits decide (E4M3 and E2M3 both have 3)
    assert s["mxint8"] > s["mxfp8_e4m3"] > s["mxfp6_e3m2"] > s["mxfp4"] > 15
    assert abs(s["mxfp8_e4m3"] - s["mxfp6_e2m3"]) < 1.0
