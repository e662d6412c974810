"""CUDA source for every format compiles with nvcc; aarch64 libraries are aarch64 ELF files."""

import shutil

import numpy as np
import pytest
import torch
import tvm

from edgekit.compilers.build import build
from edgekit.compilers.export import cuda_source, elf_machine, export_library, nvcc_fatbin
from edgekit.compilers.importer import import_torch
from edgekit.compilers.kernel_schedules import KERNEL_ATTR
from edgekit.compilers.lower import lower
from edgekit.compilers.plan import make_plan
from edgekit.compilers.schedule import schedule
from edgekit.simulators import FORMATS

from .models import NETWORKS, seeded

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
needs_cross = pytest.mark.skipif(shutil.which("aarch64-linux-gnu-gcc") is None,
                                 reason="aarch64-linux-gnu-gcc is not installed (Debian gcc-aarch64-linux-gnu)")


@pytest.fixture(scope="module")
def cnn_per_format():
    """The CNN (conv2d, GEMV) and the transformer block (GEMM) per format, imported once."""
    out = {}
    for name in ("cnn", "transformer"):
        cls, shape = NETWORKS[name]
        model = seeded(cls)
        out[name] = (model, import_torch(model, (torch.randn(*shape),)))
    return out


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_87", "sm_90", "sm_100a"])
def test_cuda_source_of_every_format_compiles(arch, cnn_per_format, tmp_path):
    """Every format's kernels (conv2d, GEMV, GEMM), scheduled for ``arch``, in one CUDA file for nvcc."""
    target = tvm.target.Target({"kind": "cuda", "arch": arch}, host="llvm")
    kernels = {}
    for fmt in FORMATS:
        for name, (model, imported) in cnn_per_format.items():
            scheduled = schedule(lower(imported, make_plan(model, fmt), "cuda").mod, "cuda", target)
            for gv, func in scheduled.functions_items():
                if isinstance(func, tvm.tirx.PrimFunc) and KERNEL_ATTR in (func.attrs or {}):
                    symbol = f"{fmt}_{name}_{gv.name_hint}"
                    kernels[symbol] = func.with_attr("global_symbol", symbol)
    source = cuda_source(build(tvm.IRModule(kernels), target))
    assert all(f"{symbol}_kernel" in source for symbol in kernels)
    cu = tmp_path / "kernels.cu"
    cu.write_text(source)
    result = nvcc_fatbin(cu, [arch], tmp_path / "kernels.fatbin")
    assert result["built"], result
    assert (tmp_path / "kernels.fatbin").stat().st_size > 0


def test_whole_model_for_cuda_has_kernels(cnn_per_format):
    model, imported = cnn_per_format["transformer"]
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"}, host="llvm")
    lowered = lower(imported, make_plan(model, "nvfp4"), "cuda")
    source = cuda_source(build(schedule(lowered.mod, "cuda", target), target))
    assert source.count("__global__") >= len(lowered.layers)


@needs_cross
def test_aarch64_library(cnn_per_format, tmp_path):
    model, imported = cnn_per_format["cnn"]
    target = tvm.target.Target({"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a72",
                                "mattr": ["+neon"]})
    executable = build(schedule(lower(imported, make_plan(model, "mxfp4"), "cpu").mod, "cpu"), target)
    path = export_library(executable, tmp_path / "model.so", "aarch64-linux-gnu-gcc")
    assert elf_machine(path) == "aarch64"


def test_host_library_is_this_machine(cnn_per_format, tmp_path):
    from edgekit.targets import host_arch

    model, imported = cnn_per_format["cnn"]
    executable = build(schedule(lower(imported, make_plan(model, "mxint8"), "cpu").mod, "cpu"), "llvm")
    path = export_library(executable, tmp_path / "model.so")
    assert elf_machine(path) == host_arch()
    lib = tvm.runtime.load_module(str(path))
    vm = tvm.relax.VirtualMachine(lib, tvm.cpu())
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    assert vm["main"](tvm.runtime.tensor(x))[0].numpy().shape == (1, 10)


def test_missing_cross_compiler_is_named(cnn_per_format, tmp_path):
    model, imported = cnn_per_format["cnn"]
    executable = build(schedule(lower(imported, make_plan(model, "mxint8"), "cpu").mod, "cpu"), "llvm")
    with pytest.raises(ValueError, match="cross compiler 'no-such-gcc' is not on PATH"):
        export_library(executable, tmp_path / "model.so", "no-such-gcc")
    assert not (tmp_path / "model.so").exists()


@needs_nvcc
def test_nvcc_refusal_is_reported_not_raised(tmp_path):
    cu = tmp_path / "bad.cu"
    cu.write_text("__global__ void k() { this is not C; }\n")
    result = nvcc_fatbin(cu, ["sm_90"], tmp_path / "bad.fatbin")
    assert result["built"] is False and result["reason"].startswith("nvcc failed for sm_90: ")
    assert "error" in result["reason"]


@needs_nvcc
def test_an_architecture_nvcc_lacks_is_reported_with_what_it_builds(tmp_path):
    """TVM's sm_50 for a bare "cuda" on a machine with no GPU: recent nvcc no longer builds it."""
    cu = tmp_path / "k.cu"
    cu.write_text("__global__ void k() {}\n")
    result = nvcc_fatbin(cu, ["sm_10"], tmp_path / "k.fatbin")
    assert result["built"] is False and "Unsupported gpu architecture" in result["reason"]
    assert "this nvcc builds sm_" in result["reason"] and '"arch": "sm_90"' in result["reason"]
