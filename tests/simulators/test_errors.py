"""Bad input: a ValueError that names the parameter and what is allowed."""

import numpy as np
import pytest

from edgekit.simulators import QuantizedTensor, dequantize, get_format, quantize
from edgekit.simulators.mxdot import mx_matmul
from edgekit.simulators.rotation import hadamard, rotate_blocks

X = np.ones((4, 64), np.float32)


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: quantize(X.astype(np.float64)), r"x must have dtype float32, float16, bfloat16; got float64"),
        (lambda: quantize(X.astype(np.int32)), r"dtype float32, float16, bfloat16"),
        (lambda: quantize(X, "mxfp5"), r"unknown format 'mxfp5'; allowed: mxfp8_e4m3, .*nvfp4"),
        (lambda: quantize(X, "liftquant:2.4"), r"unknown format 'liftquant:2.4'"),
        (lambda: quantize(X, "mxfp4_asym"), r"'_asym' applies only to INT formats"),
        (lambda: quantize(X, "mxint8@x"), r"block size after '@' must be an integer"),
        (lambda: quantize(X, 7), r"format must be a format name"),
        (lambda: quantize(X, axis=2), r"axis must be an integer in \[-2, 1\]"),
        (lambda: quantize(X, axis=1.0), r"axis must be an integer"),
        (lambda: quantize(X, block_size=0), r"block_size must be a positive multiple of 2"),
        (lambda: quantize(X, "mxfp6", block_size=6), r"block_size must be a positive multiple of 4"),
        (lambda: quantize(X, block_size=True), r"block_size"),
        (lambda: quantize(X, scale_rule="round"), r"scale_rule must be one of floor, ceil, rceil"),
        (lambda: quantize(X, "nvfp4", scale_rule="ceil"), r"nvfp4's e4m3 block scales are rounded to nearest"),
        (lambda: quantize(np.ones((4, 64), np.float32)[:, ::2]), r"x must be C-contiguous"),
        (lambda: quantize(np.ones((0, 64), np.float32)), r"non-empty"),
        (lambda: quantize(np.float32(1.0)), r"NumPy array or torch tensor"),
        (lambda: quantize([1.0, 2.0]), r"NumPy array or torch tensor, got list"),
        (lambda: hadamard(12), r"n must be a power of two"),
        (lambda: rotate_blocks(np.ones(40), 32), r"must be a multiple of size=32"),
    ],
)
def test_bad_input_is_named(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_mismatched_packed_buffers():
    q = quantize(X, "mxfp4")
    with pytest.raises(ValueError, match=r"codes holds 127 bytes; mxfp4 .* needs 128"):
        QuantizedTensor(q.format, q.shape, q.axis, q.codes.ravel()[:-1], q.scales)
    with pytest.raises(ValueError, match=r"scales holds 9 bytes.*needs 8"):
        QuantizedTensor(q.format, q.shape, q.axis, q.codes, np.zeros(9, np.uint8))
    with pytest.raises(ValueError, match=r"codes must be a uint8 array, got dtype int16"):
        QuantizedTensor(q.format, q.shape, q.axis, q.codes.astype(np.int16), q.scales)
    with pytest.raises(ValueError, match=r"tensor_scale is required for nvfp4"):
        QuantizedTensor(get_format("nvfp4"), (64,), 0, np.zeros(32, np.uint8), np.zeros(4, np.uint8))
    with pytest.raises(ValueError, match=r"q must be a QuantizedTensor"):
        dequantize(X)


def test_flat_buffers_of_the_right_length_are_accepted():
    q = quantize(X, "mxfp6")
    again = QuantizedTensor(q.format, q.shape, q.axis, q.codes.ravel(), q.scales.ravel())
    np.testing.assert_array_equal(dequantize(again), dequantize(q))


def test_mx_matmul_operands_are_checked():
    a = quantize(X, "mxint8")
    with pytest.raises(ValueError, match=r"b must be 2-D and quantized along axis 1"):
        mx_matmul(a, quantize(X, "mxint8", axis=0))
    with pytest.raises(ValueError, match=r"share the block size; got 32 and 16"):
        mx_matmul(a, quantize(X, "nvfp4"))
    with pytest.raises(ValueError, match=r"share the reduction length K; got 64 and 32"):
        mx_matmul(a, quantize(X[:, :32].copy(), "mxint8"))


def test_torch_tensors_are_accepted():
    torch = pytest.importorskip("torch")
    t = torch.linspace(-3, 3, 256).reshape(4, 64)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        q = quantize(t.to(dtype), "mxfp4")
        ref = quantize(t.to(dtype).float().numpy(), "mxfp4")
        assert np.array_equal(q.codes, ref.codes)
    with pytest.raises(ValueError, match="C-contiguous"):
        quantize(t.t(), "mxfp4")
