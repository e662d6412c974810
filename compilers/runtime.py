"""Run a build directory with TVM's runtime alone, as a deployed device runs it.

Nothing here imports ``tvm`` (the compiler, ``libtvm_compiler.so``): the library is
loaded through ``tvm_ffi`` after the ``libtvm_runtime*`` libraries, and its Relax VM
executable is started with ``vm_load_executable``.

TVM 0.27 keeps a CUDA build's kernels in the library as CUDA source and compiles them
when the library loads, through a ``tvm_callback_cuda_compile`` function. ``edgekit
compile`` compiles that same source with nvcc at build time (``kernels.fatbin``, machine
code for the target's arch plus PTX); :func:`use_prebuilt_cuda` registers a callback that
hands that fatbin over, after checking that the source it is asked to compile is the one
the fatbin was made from. So the device needs the driver, not a CUDA compiler. A device needs the build directory,
``tvm_ffi`` (the ``apache-tvm-ffi`` wheel), those libraries (from the ``apache-tvm`` wheel's
``tvm/lib``, or a folder named by ``EDGEKIT_TVM_RUNTIME_DIR``) and, for CUDA builds, the
driver. The manifest's target is checked against the machine before anything is loaded,
and every input's shape and dtype against the build's, because a wrong shape crashes the
runtime where the compiler would have raised.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import json
import os
import platform
from dataclasses import dataclass
from pathlib import Path

import numpy as np

RUNTIME_DIR_ENV = "EDGEKIT_TVM_RUNTIME_DIR"
MANIFEST = "manifest.json"
RUNTIME_LIBRARIES = {"cpu": ("libtvm_runtime.so", "libtvm_runtime_extra.so"),
                     "cuda": ("libtvm_runtime.so", "libtvm_runtime_extra.so", "libtvm_runtime_cuda.so")}
DEVICE_TYPES = {"cpu": 1, "cuda": 2}  # DLPack device types
POOLED_ALLOCATOR = 2
MACHINES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}
ALIGNMENT = 64  # TVM's kernels assume buffers aligned as its own allocator aligns them


def aligned(array: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of ``array`` whose data starts on a ``ALIGNMENT``-byte boundary (NumPy aligns to 16)."""
    raw = np.empty(array.nbytes + ALIGNMENT, np.uint8)
    start = -raw.ctypes.data % ALIGNMENT
    out = raw[start:start + array.nbytes].view(array.dtype).reshape(array.shape)
    out[...] = array
    return out


def runtime_dir() -> Path:
    """Where the ``libtvm_runtime*`` libraries are: ``$EDGEKIT_TVM_RUNTIME_DIR``, else the apache-tvm wheel's
    ``tvm/lib`` (found without importing it)."""
    if os.environ.get(RUNTIME_DIR_ENV):
        return Path(os.environ[RUNTIME_DIR_ENV])
    spec = importlib.util.find_spec("tvm")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"TVM's runtime libraries were not found: install the apache-tvm wheel or set "
                           f"{RUNTIME_DIR_ENV} to a folder holding {', '.join(RUNTIME_LIBRARIES['cpu'])}")
    return Path(next(iter(spec.submodule_search_locations))) / "lib"


_loaded: set[str] = set()


def source_digest(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def use_prebuilt_cuda(directory: Path, binary: dict) -> None:
    """Register ``tvm_callback_cuda_compile`` to answer with the build's fatbin (made by nvcc at build time)."""
    import tvm_ffi

    if not binary.get("built"):
        raise RuntimeError(f"the build carries no CUDA binary ({binary.get('reason', 'none recorded')}); compile it "
                           "again where nvcc is installed")
    fatbin = (directory / binary["file"]).read_bytes()

    def prebuilt(code):
        if source_digest(str(code)) != binary["source_sha256"]:
            raise RuntimeError(f"the library's CUDA source is not the one {binary['file']} was compiled from: "
                               "the build directory mixes files of two builds")
        return fatbin

    tvm_ffi.register_global_func("tvm_callback_cuda_compile", prebuilt, override=True)


def load_runtime(device: str) -> None:
    """Load TVM's runtime libraries for ``device`` into the process (once), global so the build links to them."""
    folder = runtime_dir()
    for name in RUNTIME_LIBRARIES[device]:
        path = folder / name
        if str(path) in _loaded:
            continue
        if not path.is_file():
            raise RuntimeError(f"{name} is not in {folder}: a {device} build needs it (set {RUNTIME_DIR_ENV})")
        try:
            ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
        except OSError as err:
            hint = " (the CUDA runtime library and driver must be installed)" if device == "cuda" else ""
            raise RuntimeError(f"could not load {path}: {err}{hint}") from None
        _loaded.add(str(path))


def check_machine(manifest: dict) -> None:
    """The build's CPU architecture is this machine's; a ``RuntimeError`` naming both otherwise."""
    target = manifest.get("target", {})
    want = MACHINES.get(str(manifest.get("artifacts", {}).get("library_machine")), None)
    here = MACHINES.get(platform.machine().lower(), platform.machine())
    if want is not None and want != here:
        raise RuntimeError(f"the build is for {target.get('name')} ({want}); this machine is {here}: copy the build "
                           "directory to that device and run it there")
    if target.get("device") not in DEVICE_TYPES:
        raise RuntimeError(f"the build's device {target.get('device')!r} is not one this runner drives "
                           f"({', '.join(DEVICE_TYPES)})")


@dataclass
class LoadedBuild:
    """A build ready to run: call it with NumPy arrays (one per input, in order), get NumPy arrays back."""

    directory: Path
    manifest: dict
    device: str
    main: object  # the VM's main function

    @property
    def inputs(self) -> list[dict]:
        return self.manifest["inputs"]

    def check_inputs(self, arrays) -> list[np.ndarray]:
        if len(arrays) != len(self.inputs):
            names = ", ".join(i["name"] for i in self.inputs)
            raise ValueError(f"the build takes {len(self.inputs)} input(s) ({names}), got {len(arrays)}")
        out = []
        sizes: dict[str, int] = {}  # what each symbolic dim takes in this call: one batch for every input
        for spec, array in zip(self.inputs, arrays, strict=True):
            array = np.asarray(array)
            if not self.fits(spec["shape"], array.shape, sizes):
                limit = f" (symbolic dims from 1 to {self.manifest['max_batch']}, the same in every input)" \
                    if self.manifest.get("max_batch") else ""
                raise ValueError(f"input {spec['name']!r} must have shape {spec['shape']}{limit}, "
                                 f"got {list(array.shape)}")
            if array.dtype != np.dtype(spec["dtype"]):
                if not np.can_cast(array.dtype, spec["dtype"], casting="same_kind"):
                    raise ValueError(f"input {spec['name']!r} must be {spec['dtype']}, got {array.dtype}")
                array = array.astype(spec["dtype"])
            out.append(aligned(array))
        return out

    def fits(self, expected: list, shape: tuple, sizes: dict) -> bool:
        if len(expected) != len(shape):
            return False
        for want, got in zip(expected, shape, strict=True):
            if isinstance(want, str):
                if not 1 <= got <= (self.manifest.get("max_batch") or got) or sizes.setdefault(want, got) != got:
                    return False
            elif want != got:
                return False
        return True

    def __call__(self, *arrays) -> list[np.ndarray]:
        import tvm_ffi

        arrays = self.check_inputs(arrays)
        if self.device == "cuda":
            import torch  # moves arrays to the GPU and back through DLPack

            args = [tvm_ffi.from_dlpack(torch.from_numpy(a).cuda()) for a in arrays]
        else:
            args = [tvm_ffi.from_dlpack(a) for a in arrays]
        result = self.main(*args)
        items = result if isinstance(result, (list, tuple, tvm_ffi.Array)) else [result]
        if self.device == "cuda":
            import torch

            return [torch.from_dlpack(item).cpu().numpy() for item in items]
        return [np.from_dlpack(item).copy() for item in items]


def read_manifest(directory) -> dict:
    path = Path(directory) / MANIFEST
    if not path.is_file():
        raise ValueError(f"{directory} is not a build directory: it has no {MANIFEST} (make one with edgekit compile)")
    try:
        return json.loads(path.read_text())
    except ValueError as err:
        raise ValueError(f"{path} is not valid JSON: {err}") from None


def load(directory, device_id: int = 0) -> LoadedBuild:
    """Load the build in ``directory`` with TVM's runtime alone, after checking it fits this machine."""
    import tvm_ffi

    directory = Path(directory)
    manifest = read_manifest(directory)
    check_machine(manifest)
    device = manifest["target"]["device"]
    library = directory / manifest["artifacts"]["library"]
    if not library.is_file():
        raise ValueError(f"{library} is missing: the build directory is incomplete")
    load_runtime(device)
    if device == "cuda":
        use_prebuilt_cuda(directory, manifest["artifacts"].get("cuda_binary", {}))
    executable = tvm_ffi.load_module(str(library))["vm_load_executable"]()
    # The VM's devices: the build's, then the host CPU (for shape computations), each with a pooled allocator.
    cpu = DEVICE_TYPES["cpu"]
    if device == "cpu":
        executable["vm_initialization"](cpu, device_id, POOLED_ALLOCATOR)
    else:
        executable["vm_initialization"](DEVICE_TYPES[device], device_id, POOLED_ALLOCATOR, cpu, 0, POOLED_ALLOCATOR)
    return LoadedBuild(directory, manifest, device, executable["main"])
