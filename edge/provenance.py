"""What a result was made with: versions, seed, git SHA, command."""

from __future__ import annotations

import platform
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

PACKAGES = ("edgekit", "numpy", "numba", "ml_dtypes", "torch", "apache-tvm", "onnx", "onnxruntime", "matplotlib")


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


def package_versions() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "not installed"
    return out


def provenance(seed: int | None = None) -> dict:
    return {
        "seed": seed,
        "git_sha": git_sha(),
        "versions": package_versions(),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "command": " ".join(["edgekit", *sys.argv[1:]]),
    }
