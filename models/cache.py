"""Checkpoint files that verify themselves, and the cache directory trained models live in.

A checkpoint is one ``torch.save`` file: an envelope holding the model's name, its config,
the version of the code that trained it, a SHA-256 digest and the payload (the state
dict, or training progress) as bytes. Loading recomputes the digest, so a truncated or
altered file is refused instead of loaded. Files are written whole or not at all.

The cache (``$EDGEKIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/edgekit``, else
``~/.cache/edgekit``) keeps one directory per model name and key, where the key hashes
the config and the source of the modules that define and train the model: changing
either trains anew, and nothing stale is reused.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import io
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

import torch

from edgekit.utils.files import atomic_write

ENVELOPE = "edgekit-checkpoint/1"
CACHE_ENV = "EDGEKIT_CACHE_DIR"
_ROOT: ContextVar[Path | None] = ContextVar("edgekit_cache_root", default=None)
ENVELOPE_KEYS = ("format", "model", "config", "code", "kind", "sha256", "payload")


class CheckpointError(ValueError):
    """A file that is not an edgekit checkpoint, is corrupt, or does not fit its model."""


def cache_root(path: str | os.PathLike | None = None) -> Path:
    """``path``, else the root of an enclosing :func:`using_cache_root`, else ``$EDGEKIT_CACHE_DIR``,
    else ``$XDG_CACHE_HOME/edgekit``, else ``~/.cache/edgekit``."""
    if path:
        return Path(path).expanduser()
    if _ROOT.get() is not None:
        return _ROOT.get()
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "edgekit"


@contextmanager
def using_cache_root(path: str | os.PathLike | None) -> Iterator[None]:
    """Within the block (in this thread), ``path`` is the cache root of everything that asks
    :func:`cache_root` without a path of its own: also of what models cache on their own, such as
    the policy's Meta-World demonstrations. None changes nothing."""
    token = _ROOT.set(Path(path).expanduser()) if path else None
    try:
        yield
    finally:
        if token is not None:
            _ROOT.reset(token)


def ensure_writable(directory: Path) -> Path:
    """Create ``directory`` and prove a file can be written there, before any work starts."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".probe."):
            pass
    except OSError as err:
        raise ValueError(f"cache directory {str(directory)!r} is not writable ({err.strerror or err}); "
                         f"set {CACHE_ENV} or XDG_CACHE_HOME to a writable directory, or pass --cache-dir") from None
    return directory


def source_digest(*modules) -> str:
    """SHA-256 of the source text of ``modules``: the code version a cache key includes."""
    digest = hashlib.sha256()
    for module in modules:
        digest.update(inspect.getsource(module).encode())
    return digest.hexdigest()


def tree_digest(*packages) -> str:
    """SHA-256 over every source and data file of ``packages`` (whole subsystems, e.g. a compiler)."""
    digest = hashlib.sha256()
    for package in packages:
        root = Path(package.__file__).parent
        for path in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".toml", ".json", ".npz", ".npy")):
            digest.update(path.relative_to(root).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def config_dict(config) -> dict:
    return dataclasses.asdict(config)


def cache_key(name: str, config, code: str) -> str:
    text = json.dumps({"model": name, "config": config_dict(config), "code": code}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def entry_dir(root: Path, name: str, config, code: str) -> Path:
    """Where one (model, config, code version) keeps its checkpoints."""
    return root / "models" / name / cache_key(name, config, code)


def write_checkpoint(path, *, model: str, config, code: str, kind: str, payload: dict) -> Path:
    """Write a verified checkpoint atomically; ``kind`` is ``"model"`` or ``"progress"``."""
    inner = io.BytesIO()
    torch.save(payload, inner)
    data = inner.getvalue()
    envelope = {"format": ENVELOPE, "model": model, "config": config_dict(config), "code": code, "kind": kind,
                "sha256": hashlib.sha256(data).hexdigest(), "payload": data}
    outer = io.BytesIO()
    torch.save(envelope, outer)
    return atomic_write(path, outer.getvalue())


def read_checkpoint(path) -> tuple[dict, dict]:
    """(envelope without the payload, payload) of a file written by :func:`write_checkpoint`.

    Raises :class:`CheckpointError` for an unreadable, foreign or corrupt file.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {str(path)!r} does not exist")
    try:
        envelope = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises UnpicklingError, RuntimeError, EOFError, ...
        raise CheckpointError(f"{path} is not a readable edgekit checkpoint ({type(err).__name__}; "
                              "it is truncated, corrupt or not a torch file)") from err
    if not isinstance(envelope, dict) or envelope.get("format") != ENVELOPE:
        found = sorted(envelope)[:6] if isinstance(envelope, dict) else type(envelope).__name__
        raise CheckpointError(f"{path} is not an edgekit checkpoint (expected a {ENVELOPE} file written by "
                              f"`edgekit train` or save_checkpoint; found {found})")
    missing = [k for k in ENVELOPE_KEYS if k not in envelope]
    if missing:
        raise CheckpointError(f"{path} is an incomplete edgekit checkpoint (missing {', '.join(missing)})")
    data = envelope.pop("payload")
    if not isinstance(data, bytes) or hashlib.sha256(data).hexdigest() != envelope["sha256"]:
        raise CheckpointError(f"{path} is corrupt: its payload does not match its SHA-256 digest; "
                              "delete it (a cached one is retrained on the next run)")
    try:
        payload = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as err:  # a digest match with an unreadable payload: written by other code
        raise CheckpointError(f"{path}: payload cannot be read ({type(err).__name__})") from err
    return envelope, payload


def quarantine(path: Path) -> Path:
    """Move a corrupt cache file aside (``NAME.corrupt``) so it is neither loaded nor lost."""
    target = path.with_name(path.name + ".corrupt")
    os.replace(path, target)
    return target


def read_json(path: Path) -> dict:
    """A small JSON cache file, or ``{}`` when it is absent or unreadable (it is only a cache)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def write_json(path: Path, data: dict) -> Path:
    return atomic_write(path, json.dumps(data, indent=2) + "\n")
