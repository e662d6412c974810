"""What a result was made with: versions, seed, git SHA, command, and the machine it ran on."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

PACKAGES = ("edgekit", "numpy", "numba", "ml_dtypes", "torch", "apache-tvm", "onnx", "onnxruntime", "matplotlib")
# The codecs run about 4x faster with AVX-512 than with AVX2 alone, so a figure names the extensions it had.
VECTOR_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
                "asimd", "sve", "sve2")


def git_sha() -> str:
    """The commit of the source tree edgekit runs from, with ``-dirty`` for local changes."""
    here = Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5, check=False)
        if sha.returncode != 0:
            return "unknown"
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=5, check=False).stdout.strip()
        return sha.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def require_clean_tree(allow_dirty: bool = False) -> str:
    """The git SHA a result will record; a dirty tree is refused unless ``allow_dirty``."""
    sha = git_sha()
    if sha.endswith("-dirty") and not allow_dirty:
        raise SystemExit(f"the source tree has uncommitted changes ({sha}): commit them so the result names the "
                         "code that made it, or pass --allow-dirty (the result is then marked dirty)")
    return sha


def package_versions() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "not installed"
    return out


def load_average() -> list[float] | None:
    """The 1-, 5- and 15-minute load averages (None where the system has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def cpu_info() -> dict:
    """CPU model, its vector extensions, the cores this process may use, and the load average."""
    model, flags = platform.processor() or "unknown", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and model in ("unknown", platform.machine(), ""):
                model = value.strip()
            elif key.strip() in ("flags", "Features"):
                flags |= set(value.split())
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"model": model, "vector_extensions": [f for f in VECTOR_FLAGS if f in flags], "cores": cores,
            "load_average": load_average()}


_MODELS_USED: list[dict] = []


def note_model(record: dict) -> None:
    """Record a model this process trained or loaded from the cache (the model registry calls it)."""
    if record not in _MODELS_USED:
        _MODELS_USED.append(record)


def provenance(seed: int | None = None, threads: int | None = None) -> dict:
    """Seed, code, versions and machine of a result; ``threads``: the thread count it ran with.

    ``models`` is the process's live list of the models it trained or loaded (name, code
    version, cache key): a result written after its work lists every model it used, even
    when its provenance was taken before.
    """
    return {
        "models": _MODELS_USED,
        "seed": seed,
        "git_sha": git_sha(),
        "versions": package_versions(),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu": cpu_info(),
        "threads": threads,
        "command": " ".join(["python", *sys.argv] if sys.argv[0].endswith(".py") else ["edgekit", *sys.argv[1:]]),
    }
