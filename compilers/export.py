"""Stage 7, export: what a build leaves on disk (shared library, CUDA source and fatbin)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

NVCC = "nvcc"


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


def gencode(arch: str) -> str:
    """nvcc's ``-gencode`` value for ``sm_XX``: machine code for it and PTX, which newer GPUs' drivers JIT."""
    virtual = "compute_" + arch.removeprefix("sm_")
    return f"arch={virtual},code=[{arch},{virtual}]"


def nvcc_fatbin(source_path: Path, archs: list[str], out_path: Path, timeout: float = 300) -> dict:
    """Compile CUDA C to a fatbin for ``archs`` with nvcc; {"built": bool, "reason"/"nvcc": ...} for the manifest."""
    nvcc = shutil.which(NVCC)
    label = ", ".join(archs)
    if nvcc is None:
        return {"built": False, "reason": "nvcc not found on PATH"}
    command = [nvcc, "--fatbin", *(a for arch in archs for a in ("-gencode", gencode(arch))), "-o", str(out_path),
               str(source_path)]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"built": False, "archs": archs, "reason": f"nvcc took longer than {timeout:g} s for {label}"}
    if result.returncode != 0:
        errors = [line for line in result.stderr.splitlines() if "error" in line or "fatal" in line]
        reason = f"nvcc failed for {label}: {(errors or result.stderr.splitlines() or ['no message'])[0].strip()}"
        if "Unsupported gpu architecture" in result.stderr:  # e.g. TVM's sm_50 for a bare "cuda" with no GPU here
            codes = subprocess.run([nvcc, "--list-gpu-code"], capture_output=True, text=True, check=False).stdout.split()
            reason += (f" (this nvcc builds {', '.join(codes) or 'no architecture it lists'}; name the GPU: a target "
                       'such as h100, or {"kind": "cuda", "arch": "sm_90"})')
        return {"built": False, "archs": archs, "reason": reason}
    version = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False).stdout.strip().splitlines()
    return {"built": True, "archs": archs, "nvcc": version[-1] if version else "unknown"}


ELF_MACHINES = {0x3E: "x86_64", 0xB7: "aarch64", 0x28: "arm", 0xF3: "riscv"}


def elf_machine(path: Path) -> str:
    """The CPU a shared library was built for, from its ELF header's e_machine field."""
    header = Path(path).read_bytes()[:20]
    if header[:4] != b"\x7fELF":
        return "not an ELF file"
    byteorder = "little" if header[5] == 1 else "big"
    code = int.from_bytes(header[18:20], byteorder)
    return ELF_MACHINES.get(code, f"e_machine {code:#x}")
