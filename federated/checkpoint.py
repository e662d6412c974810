"""One checkpoint file per federated run, rewritten whole after every round.

It holds what the run needs to go on exactly as if it had never stopped: the strategy's
state, the grid's (clocks, byte counts, counters, and in process every client's context),
the round records so far, and the run's configuration, which a resumed run must match.
The file is a header with a SHA-256 of the body, then a ``torch.save`` body read back with
``weights_only=True``; it is written atomically, so a kill leaves the previous round's
checkpoint or this one, never half of one.
"""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import numpy as np
import torch

from edgekit.utils.files import atomic_write

MAGIC = b"edgekit-fl-checkpoint-1\n"


class CheckpointError(ValueError):
    pass


def _map_leaves(obj, leaf):
    """``obj`` with every value that is not a dict, list or tuple replaced by ``leaf(value)``."""
    if isinstance(obj, dict):
        return {k: _map_leaves(v, leaf) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_map_leaves(v, leaf) for v in obj)
    return leaf(obj)


def _to_torch(value):
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(value))
    return value.item() if isinstance(value, np.generic) else value


def _to_numpy(value):
    return value.numpy() if isinstance(value, torch.Tensor) else value


def save_checkpoint(path: str | Path, payload: dict) -> Path:
    """Write ``payload`` (dicts, lists, numbers, strings, bytes and NumPy arrays) to ``path``."""
    buf = io.BytesIO()
    torch.save(_map_leaves(payload, _to_torch), buf)
    body = buf.getvalue()
    return atomic_write(path, MAGIC + hashlib.sha256(body).hexdigest().encode() + b"\n" + body)


def load_checkpoint(path: str | Path) -> dict:
    """The payload saved at ``path``; CheckpointError when the file is not a whole checkpoint."""
    data = Path(path).read_bytes()
    head = len(MAGIC) + 65
    if not data.startswith(MAGIC) or len(data) < head:
        raise CheckpointError(f"{path} is not an edgekit federated checkpoint")
    digest, body = data[len(MAGIC):head - 1].decode(), data[head:]
    if hashlib.sha256(body).hexdigest() != digest:
        raise CheckpointError(f"{path} is corrupt (its digest does not match its contents)")
    return _map_leaves(torch.load(io.BytesIO(body), weights_only=True), _to_numpy)
