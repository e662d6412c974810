"""Passes 4 and 5, schedule and build, and the artifacts a build leaves on disk."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import tvm
from tvm import relax, tirx

from .schedules import KERNEL_ATTR, schedule_conv2d_cpu, schedule_dense_cpu

NVCC = "nvcc"


def schedule(mod, device: str, target=None):
    """CPU: the decode kernels get their vector schedules; CUDA: legalize, then dlight on everything."""
    if device == "cpu":
        out = {}
        for gv, func in mod.functions_items():
            kind = func.attrs.get(KERNEL_ATTR) if isinstance(func, tirx.PrimFunc) and func.attrs else None
            if kind == "dense":
                func = schedule_dense_cpu(func, int(func.attrs["edgekit.lanes"]))
            elif kind == "conv2d":
                func = schedule_conv2d_cpu(func)
            else:
                continue
            out[gv] = func.with_attr("tirx.is_scheduled", True)
        for gv, func in out.items():
            mod[gv] = func
        return mod
    from tvm.s_tir import dlight as dl

    mod = relax.transform.LegalizeOps()(mod)
    with tvm.target.Target(target) if target is not None else tvm.target.Target({"kind": "cuda"}):
        return dl.ApplyDefaultSchedule(dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(),
                                       dl.gpu.GeneralReduction(), dl.gpu.Fallback())(mod)


def build(mod, target):
    """``tvm.compile`` for a ``tvm.target.Target``; returns the Relax executable."""
    return tvm.compile(mod, target=target)


def cuda_source(executable) -> str:
    """The generated CUDA C of a CUDA build ('' when the build has none)."""
    stack = [executable.mod]
    while stack:
        module = stack.pop()
        if module.kind == "cuda":
            return module.inspect_source("cuda")
        stack.extend(module.imports)
    return ""


def export_library(executable, path: Path, cross_compiler: str | None = None) -> Path:
    """The shared library; ``cross_compiler`` (e.g. ``aarch64-linux-gnu-gcc``) for another CPU."""
    if cross_compiler is not None and shutil.which(cross_compiler) is None:
        raise ValueError(f"cross compiler {cross_compiler!r} is not on PATH; install it (Debian: apt-get "
                         "install gcc-aarch64-linux-gnu) or compile for a target of this machine's CPU")
    if cross_compiler is None:
        executable.export_library(str(path))
    else:
        executable.export_library(str(path), cc=cross_compiler)
    return path


def nvcc_cubin(source_path: Path, arch: str, out_path: Path, timeout: float = 300) -> dict:
    """Compile CUDA C to a cubin with nvcc; {"built": bool, "reason"/"nvcc": ...} for the manifest."""
    nvcc = shutil.which(NVCC)
    if nvcc is None:
        return {"built": False, "reason": "nvcc not found on PATH"}
    result = subprocess.run([nvcc, "-cubin", f"-arch={arch}", "-o", str(out_path), str(source_path)],
                            capture_output=True, text=True, timeout=timeout, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"nvcc failed for {arch}:\n{result.stderr[-2000:]}")
    version = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False).stdout.strip().splitlines()
    return {"built": True, "arch": arch, "nvcc": version[-1] if version else "unknown"}


ELF_MACHINES = {0x3E: "x86_64", 0xB7: "aarch64", 0x28: "arm", 0xF3: "riscv"}


def elf_machine(path: Path) -> str:
    """The CPU a shared library was built for, from its ELF header's e_machine field."""
    header = Path(path).read_bytes()[:20]
    if header[:4] != b"\x7fELF":
        return "not an ELF file"
    byteorder = "little" if header[5] == 1 else "big"
    code = int.from_bytes(header[18:20], byteorder)
    return ELF_MACHINES.get(code, f"e_machine {code:#x}")
