"""Compiled builds kept in the model cache, so a second report reuses them.

A build is the directory ``edgekit compile`` writes (library, CUDA source and fatbin,
manifest), stored under ``<cache>/builds/<model>/<key>``. The key hashes the trained
model's cache entry (its config and training code), the format, the target as TVM
spells it, and the source of everything that shapes the binary (the compilers, the
simulators' codecs, the target data, the compile job): change any and it builds anew.
The build directory is written through a staging directory, so an interrupted build
leaves nothing that looks finished.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from edgekit import compilers, simulators, targets
from edgekit.compilers.runtime import MANIFEST
from edgekit.jobs import compile as compile_job
from edgekit.models.cache import source_digest, tree_digest

from .compile import compile_model


def compiler_code() -> str:
    """The version of everything that turns a checkpoint into a build."""
    return hashlib.sha256((tree_digest(compilers, simulators, targets) + source_digest(compile_job)).encode()
                          ).hexdigest()


def build_dir(root: Path, model: str, model_key: str, fmt: str, tvm_target: str, code: str) -> Path:
    text = json.dumps({"model": model, "model_key": model_key, "format": fmt, "target": tvm_target, "code": code},
                      sort_keys=True)
    return root / "builds" / model / hashlib.sha256(text.encode()).hexdigest()[:20]


def cached_build(checkpoint: Path, model: str, model_key: str, fmt: str, target_spec: str, root: Path,
                 code: str, log: Callable[[str], None] = print, loaded: Callable[[], tuple] | None = None
                 ) -> tuple[dict, Path, bool]:
    """(manifest, build directory, whether it came from the cache) of ``checkpoint`` in ``fmt`` for a target.

    ``loaded``: gives ``compile_job.load_model(checkpoint)``, called only when something is built.
    """
    from edgekit.targets import load_target, tvm_target

    directory = build_dir(root, model, model_key, fmt, str(tvm_target(load_target(target_spec))), code)
    manifest_path = directory / MANIFEST
    if manifest_path.is_file():
        try:
            return json.loads(manifest_path.read_text()), directory, True
        except ValueError:  # a manifest is written last and whole; an unreadable one means a foreign edit
            log(f"rebuilding {directory}: its manifest is unreadable")
    manifest = compile_model(str(checkpoint), fmt, target_spec, directory, log=log,
                             loaded=loaded() if loaded else None)
    return manifest, directory, False


def artifact_bytes(directory: Path) -> dict[str, int]:
    """Size in bytes of each file of a build directory."""
    return {p.name: p.stat().st_size for p in sorted(directory.iterdir()) if p.is_file()}
