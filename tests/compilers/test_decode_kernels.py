"""The TIR decode, compiled for LLVM, reproduces the simulators' dequantization bit for bit."""

import numpy as np
import pytest
import tvm

from edgekit.compilers.decode_kernels import decode_kernel
from edgekit.compilers.kernel_schedules import dense_lanes
from edgekit.simulators import FORMATS, QuantizedTensor, dequantize, get_format, quantize
from edgekit.simulators.layouts import PACKED, layouts_for, to_layout

CASES = [(name, layout) for name, fmt in FORMATS.items() for layout in layouts_for(fmt)]


def run_decode(q: QuantizedTensor, layout: str) -> np.ndarray:
    rows, k = q.codes.shape[0], q.shape[-1]
    func = decode_kernel(q.format, layout, rows, k, q.tensor_scale)
    executable = tvm.compile(func, target="llvm")
    out = tvm.runtime.tensor(np.zeros((rows, k), np.float32))
    executable(tvm.runtime.tensor(to_layout(q.codes, q.format, layout)), tvm.runtime.tensor(q.scales), out)
    return out.numpy()


def assert_bits_equal(actual, expected):
    nan = np.isnan(expected)
    assert np.array_equal(np.isnan(actual), nan)
    assert np.array_equal(actual.view(np.uint32)[~nan], expected.view(np.uint32)[~nan])  # -0 != +0


@pytest.mark.parametrize(("name", "layout"), CASES)
def test_quantized_tensors(name, layout):
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((12, 128)) * np.exp2(rng.integers(-40, 40, (12, 1)))).astype(np.float32)
    x[0, :6] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0]
    x[1] = 0.0
    x[2, :4] = [1e-40, -3e-39, 2e-45, 0.0]  # FP32 subnormals: tiny scales
    q = quantize(x, name, axis=1)
    assert_bits_equal(run_decode(q, layout), dequantize(q))


@pytest.mark.parametrize(("name", "layout"), CASES)
def test_every_code_and_scale_byte(name, layout):
    """Random bytes: every element code, every scale code (0, 255 and NaN scales included)."""
    fmt = get_format(name)
    rng = np.random.default_rng(3)
    n_blocks = 128 // fmt.block_size  # whole groups of the vector layouts
    rows = 256 // n_blocks + 1
    codes = rng.integers(0, 256, (rows, n_blocks * fmt.bytes_per_block), dtype=np.uint8)
    scales = rng.integers(0, 256, (rows, n_blocks), dtype=np.uint8)
    scales.reshape(-1)[:256] = np.arange(256, dtype=np.uint8)
    q = QuantizedTensor(fmt, (rows, n_blocks * fmt.block_size), 1, codes, scales,
                        np.float32(0.375) if fmt.tensor_scale else None)
    assert_bits_equal(run_decode(q, layout), dequantize(q))


@pytest.mark.parametrize("name", ["mxfp4", "mxfp6_e3m2", "mxint8", "nvfp4"])
def test_partial_last_block(name):
    x = np.random.default_rng(5).standard_normal((4, 70)).astype(np.float32)
    q = quantize(x, name, axis=1)
    assert_bits_equal(run_decode(q, "packed"), dequantize(q))


def test_dense_lanes_split_byte_groups_only():
    """Float weights are whole elements, vectorized 32 wide; only codes that straddle bytes (6-bit: four
    in three) are held to one byte group's lanes."""
    assert dense_lanes(4096, PACKED, 32) == 32  # fp32: one element per 4-byte group, not one lane
    assert dense_lanes(4096, PACKED, 16) == 32  # fp16
    assert dense_lanes(32, PACKED, 6) == 4
    assert dense_lanes(32, PACKED, 4) == 32 and dense_lanes(16, PACKED, 4) == 16
