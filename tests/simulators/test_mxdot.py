import numpy as np
import pytest

from edgekit.simulators import dequantize, quantize
from edgekit.simulators.mxdot import mx_dot, mx_matmul


def reference_dot(qa, qb):
    """The spec's definition written out in NumPy: exact products, FP32 sums in element order."""
    a, b = dequantize_elements(qa), dequantize_elements(qb)
    sa, sb = qa.format.scale.values[qa.scales], qb.format.scale.values[qb.scales]
    acc = np.float32(0)
    B = qa.format.block_size
    for k in range(a.size // B):
        prods = (a[k * B:(k + 1) * B] * b[k * B:(k + 1) * B]).astype(np.float32)
        part = np.cumsum(prods, dtype=np.float32)[-1]
        acc = np.float32(acc + np.float32(np.float64(part) * sa[k] * sb[k]))
    return acc * np.float32(qa.tensor_scale or 1) * np.float32(qb.tensor_scale or 1)


def dequantize_elements(q):
    from edgekit.simulators.reference import unpack_codes

    return q.format.element.values[unpack_codes(q.codes, q.format.element.bits)].ravel()


@pytest.mark.parametrize("fa,fb", [("mxint8", "mxint8"), ("mxfp8_e4m3", "mxfp8_e5m2"), ("mxfp4", "mxfp6_e2m3"),
                                   ("mxint4", "mxfp4"), ("nvfp4", "nvfp4")])
def test_mx_dot_follows_the_spec(fa, fb):
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((2, 1000)).astype(np.float32)
    qa, qb = quantize(x, fa), quantize(y, fb)
    got = mx_dot(qa, qb)
    assert got == reference_dot(qa, qb)
    exact = float(np.dot(dequantize(qa).astype(np.float64), dequantize(qb).astype(np.float64)))
    assert abs(got - exact) <= 1e-5 * np.abs(dequantize(qa) * dequantize(qb)).sum()


def test_mx_matmul_matches_row_dots():
    rng = np.random.default_rng(1)
    a = quantize(rng.standard_normal((5, 96)).astype(np.float32), "mxfp8")
    b = quantize(rng.standard_normal((3, 96)).astype(np.float32), "mxint8")
    c = mx_matmul(a, b)
    np.testing.assert_allclose(c, dequantize(a) @ dequantize(b).T, rtol=1e-5, atol=1e-5)
    def row(q, i):
        return quantize(dequantize(q)[i], q.format)
    assert c[2, 1] == mx_dot(row(a, 2), row(b, 1))


def test_nan_scale_poisons_the_dot():
    x = np.ones(64, np.float32)
    x[3] = np.inf
    assert np.isnan(mx_dot(quantize(x, "mxint8"), quantize(np.ones(64, np.float32), "mxint8")))
