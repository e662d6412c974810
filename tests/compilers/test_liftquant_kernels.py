"""LiftQuant kernels compiled for LLVM: the decode equals the Numba decoder bit for bit, the fused
GEMV equals PyTorch's product with the decoded weight to float32 tolerance; CUDA builds with nvcc."""

import shutil

import numpy as np
import pytest
import torch
import tvm
from tvm import relax

from edgekit.compilers.export import cuda_source, nvcc_fatbin
from edgekit.compilers.kernel_schedules import gpu_schedule, vector_isa
from edgekit.compilers.liftquant_kernels import (
    BYTES_MAJOR,
    LAYOUTS,
    PACKED,
    cpu_gemv,
    decode_kernel,
    gemv_kernel,
    layer_kernels,
    layer_module,
    rotate_kernel,
    schedule_cpu,
    schedule_rotate_gpu,
    transpose_codes,
)
from edgekit.simulators.liftquant import quantize
from edgekit.targets import tvm_target

# (configuration, shape, group size, input multipliers): padding (K not a multiple of d), a
# Kronecker factor (K not a power of two), group scales, a last group past the row's bytes,
# a power-of-two width
CASES = [
    ("24to10", (40, 100), None, True),
    ("16to8", (33, 96), 16, False),
    ("10to8", (20, 64), 32, True),
    ("24to10", (9, 130), 20, True),
    ("6to4", (17, 50), None, False),
    ("16to8", (8, 4096), None, False),  # a power of two: signs and a 12-stage Walsh-Hadamard, no factor
]
HOST_ISA = vector_isa(tvm_target("host"))
# each x86 ISA this CPU runs, as a target of its own, with the permute it looks the tables up with
TABLE_ISAS = {isa: target for isa, target in (("avx512", {"kind": "llvm", "mcpu": "skylake-avx512"}),
                                                ("avx2", {"kind": "llvm", "mcpu": "haswell"}))
              if HOST_ISA == "avx512" or HOST_ISA == isa}
PERMUTES = {"avx512": "permvar", "avx2": "permps"}
# rows a multiple of 16; group scales, a last group past the row's bytes, two row blocks of 128
TABLE_CASES = [("24to10", (48, 100), None, True), ("16to8", (32, 96), 16, False), ("24to10", (16, 130), 20, True),
               ("10to8", (256, 64), 32, False)]
SM90 = {"kind": "cuda", "arch": "sm_90"}
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")


def tensor(name, shape, group, multipliers, seed=0):
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal(shape) * 0.05).astype(np.float32)
    w[:, 3] *= 20  # an outlier column for the rotation to spread
    m = rng.uniform(0.5, 2.0, shape[1]) if multipliers else None
    return quantize(w, name, group_size=group, input_scales=m)


def run(func, *arrays, out_shape, target="llvm"):
    out = tvm.runtime.tensor(np.zeros(out_shape, np.float32))
    tvm.compile(func, target=target)(*map(tvm.runtime.tensor, arrays), out)
    return out.numpy()


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[1][1]}-g{c[2]}" for c in CASES])
def test_decode_is_bit_exact(case):
    q = tensor(*case)
    k = layer_kernels(q)
    func = decode_kernel(q.format, q.shape[0], q.chunks, q.group_size)
    out = run(func, *k.gemv_args, out_shape=(q.shape[0], k.padded))
    np.testing.assert_array_equal(out.view(np.uint32), q.rotated_weights().view(np.uint32))


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[1][1]}-g{c[2]}" for c in CASES])
def test_rotation_and_fused_gemv(case):
    q = tensor(*case)
    batch = 3  # a GEMM: three activation rows
    x = np.random.default_rng(1).standard_normal((batch, q.shape[1])).astype(np.float32)
    k = layer_kernels(q, batch=batch)
    xr = run(k.rotate, x, *k.rotate_args, out_shape=(batch, k.padded))
    scaled = x * (q.input_scales.astype(np.float64) if q.input_scales is not None else 1.0)
    expected = np.zeros((batch, k.padded))
    expected[:, : q.shape[1]] = q.rotation.apply(scaled)
    np.testing.assert_allclose(xr, expected, rtol=0, atol=1e-5 * np.abs(expected).max())
    ref = xr.astype(np.float64) @ q.rotated_weights().astype(np.float64).T
    for layout in LAYOUTS:  # scheduled: the unscheduled kernel is the same sums in another loop order
        codes = k.gemv_args[0] if layout == PACKED else transpose_codes(k.gemv_args[0])
        func = schedule_cpu(gemv_kernel(q.format, q.shape[0], q.chunks, q.group_size, layout, batch), layout)
        y = run(func, xr, codes, *k.gemv_args[1:], out_shape=(batch, q.shape[0]))
        np.testing.assert_allclose(y, ref, rtol=0, atol=1e-5 * np.abs(ref).max())  # float32 sums of C * D terms


@pytest.mark.skipif(not TABLE_ISAS, reason="this CPU has neither AVX-512 nor AVX2 with FMA")
@pytest.mark.parametrize("isa", ["avx512", "avx2"])
@pytest.mark.parametrize("case", TABLE_CASES, ids=[f"{c[0]}-{c[1][0]}x{c[1][1]}-g{c[2]}" for c in TABLE_CASES])
def test_nibble_table_gemv_equals_the_bit_select_one(case, isa):
    if isa not in TABLE_ISAS:
        pytest.skip(f"this CPU has no {isa}")
    q = tensor(*case)
    batch = 2
    k = layer_kernels(q, BYTES_MAJOR, batch)
    xr = np.random.default_rng(5).standard_normal((batch, k.padded)).astype(np.float32)
    target = TABLE_ISAS[isa]
    tables = cpu_gemv(q.format, q.shape[0], q.chunks, q.group_size, batch, target)
    assert "lut" in tables.script() and PERMUTES[isa] in tables.script()
    y = [run(f, xr, *k.gemv_args, out_shape=(batch, q.shape[0]), target=target)
         for f in (tables, cpu_gemv(q.format, q.shape[0], q.chunks, q.group_size, batch))]
    ref = xr.astype(np.float64) @ q.rotated_weights().astype(np.float64).T
    for out in y:
        np.testing.assert_allclose(out, ref, rtol=0, atol=1e-5 * np.abs(ref).max())


def test_unscheduled_gemv_equals_the_scheduled_one():
    q = tensor(*CASES[3])
    k = layer_kernels(q, BYTES_MAJOR)
    xr = np.random.default_rng(4).standard_normal((1, k.padded)).astype(np.float32)
    plain, scheduled = (run(f, xr, *k.gemv_args, out_shape=(1, q.shape[0]))
                        for f in (k.gemv, schedule_cpu(k.gemv, BYTES_MAJOR)))
    np.testing.assert_allclose(plain, scheduled, rtol=1e-6, atol=1e-6 * np.abs(plain).max())


@pytest.mark.parametrize(("case", "for_host"), [(CASES[0], False), (CASES[1], False), (CASES[-1], False),
                                              (TABLE_CASES[1], True)],
                         ids=["24to10", "16to8-groups", "16to8-4096", "16to8-groups-host"])
def test_whole_layer_matches_pytorch(case, for_host):
    q = tensor(*case)
    x = np.random.default_rng(2).standard_normal((1, q.shape[1])).astype(np.float32)
    target = tvm_target("host")  # kernels for it (nibble tables on AVX-512 or AVX2), or for any CPU
    module = layer_module(q, "cpu", target if for_host else None)
    vm = relax.VirtualMachine(tvm.compile(module, target=target), tvm.cpu())
    y = vm["main"](tvm.runtime.tensor(x)).numpy()
    expected = torch.nn.functional.linear(torch.from_numpy(x), torch.from_numpy(q.dequantize())).numpy()
    np.testing.assert_allclose(y, expected, rtol=0, atol=1e-5 * np.abs(expected).max())


def test_bytes_major_is_a_transpose_and_its_own_inverse():
    codes = np.random.default_rng(3).integers(0, 256, (5, 12), dtype=np.uint8)
    t = transpose_codes(codes)
    assert t.shape == (12, 5) and t.flags.c_contiguous
    np.testing.assert_array_equal(transpose_codes(t), codes)


@needs_nvcc
def test_cuda_kernels_build_with_nvcc(tmp_path):
    """Decode-only kernel and the whole layer, scheduled by dlight for sm_90, in one CUDA file."""
    q = tensor(*CASES[1])
    target = tvm.target.Target(SM90)
    decode = gpu_schedule(decode_kernel(q.format, q.shape[0], q.chunks, q.group_size), target)
    sources = [cuda_source(tvm.compile(layer_module(q, "cuda", SM90), target=target)),
               cuda_source(tvm.compile(tvm.IRModule({"main": decode.with_attr("tirx.is_scheduled", True)}),
                                       target=target))]
    assert all("__global__" in s for s in sources)
    assert "liftquant_gemv" in sources[0] and "liftquant_rotate" in sources[0]
    for i, source in enumerate(sources):
        cu = tmp_path / f"liftquant{i}.cu"
        cu.write_text(source)
        result = nvcc_fatbin(cu, ["sm_90"], tmp_path / f"liftquant{i}.fatbin")
        assert result["built"], result


def test_gpu_schedules_are_made_once_per_kernel_structure():
    """Layers of one shape and format share their GPU schedules; another shape or target gets its own."""
    same = [layer_kernels(tensor("16to8", (33, 96), None, False, seed)) for seed in (0, 1)]
    other = layer_kernels(tensor("16to8", (40, 128), None, False))
    gemvs = [gpu_schedule(k.gemv, tvm.target.Target(SM90)) for k in (*same, other)]
    assert gemvs[0].same_as(gemvs[1]) and not gemvs[0].same_as(gemvs[2])
    assert not gemvs[0].same_as(gpu_schedule(same[0].gemv, tvm.target.Target({"kind": "cuda", "arch": "sm_80"})))
    rotations = [schedule_rotate_gpu(k.rotate) for k in (*same, other)]
    assert rotations[0].same_as(rotations[1]) and not rotations[0].same_as(rotations[2])


def test_bad_input():
    q = tensor("24to10", (8, 40), None, False)
    with pytest.raises(ValueError, match="layout must be one of packed, bytes_major"):
        layer_kernels(q, "rows")
    with pytest.raises(ValueError, match="layout must be one of"):
        gemv_kernel(q.format, 8, q.chunks, None, "rows")
    with pytest.raises(ValueError, match="rotated tensors"):
        layer_kernels(quantize(np.ones((4, 40), np.float32), "24to10", rotate=False))
    with pytest.raises(ValueError, match="whole bytes per group: group_size=8 gives 10 code bits"):
        gemv_kernel(tensor("10to8", (4, 64), 8, False).format, 4, 8, 8)
    with pytest.raises(ValueError, match="device must be cpu or cuda"):
        layer_module(q, "tpu")
    with pytest.raises(ValueError, match="tables='avx512' takes layout='bytes_major' and rows a multiple of 16, got "
                                         "layout='packed', rows=16"):
        gemv_kernel(q.format, 16, q.chunks, None, PACKED, tables="avx512")
    with pytest.raises(ValueError, match="rows a multiple of 16, got layout='bytes_major', rows=8"):
        gemv_kernel(q.format, 8, q.chunks, None, BYTES_MAJOR, tables="avx512")
    with pytest.raises(ValueError, match="rows a multiple of 8, got layout='bytes_major', rows=12"):
        gemv_kernel(q.format, 12, q.chunks, None, BYTES_MAJOR, tables="avx2")
    with pytest.raises(ValueError, match="tables must be None or one of avx512, avx2, got 'neon'"):
        gemv_kernel(q.format, 16, q.chunks, None, BYTES_MAJOR, tables="neon")
    arm = {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a72"}
    assert vector_isa(arm) is None and vector_isa(None) is None and vector_isa({"kind": "cuda"}) is None
    assert "lut" not in cpu_gemv(q.format, 16, q.chunks, None, 1, arm).script()  # the portable bit selects
    assert rotate_kernel(40, 40, 8, False) is not None and BYTES_MAJOR in LAYOUTS
