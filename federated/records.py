"""What happened in a round, and the check every client update passes before it is used.

A :class:`RoundRecord` says which clients were asked to work, whose updates arrived and
were used, which were missing or rejected and why, and what was done about each (never
silently: a missing or rejected update is listed with how it was handled). Client indices
are positions among the sorted node ids, the same indices the link model uses.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

import numpy as np
from flwr.app import ArrayRecord, Message

from .compression import from_record
from .wire import typed_record

log = logging.getLogger("edgekit.federated")


@dataclass
class RoundRecord:
    round: int
    asked: list[int] = field(default_factory=list)  # clients sent work
    used: list[int] = field(default_factory=list)  # clients whose update went into the result
    missing: list[dict] = field(default_factory=list)  # {"client", "reason", "handled"}
    rejected: list[dict] = field(default_factory=list)  # {"client", "reason", "handled"}
    network: list[dict] = field(default_factory=list)  # lost and late transfers (simulated network)
    sim_time: float = 0.0  # simulated seconds since the run began, at the round's end
    compute_seconds: float = 0.0  # simulated compute of all clients this round
    bytes_sent: int = 0  # modelled bytes on all links this round
    train_loss: float | None = None  # mean inner loss of the used updates
    metrics: dict = field(default_factory=dict)  # evaluation and method metrics (e.g. disagreement)

    def miss(self, client: int, reason: str, handled: str) -> None:
        self.missing.append({"client": client, "reason": reason, "handled": handled})

    def reject(self, client: int, reason: str, handled: str) -> None:
        log.warning("round %d: update of client %d rejected: %s (%s)", self.round, client, reason, handled)
        self.rejected.append({"client": client, "reason": reason, "handled": handled})

    def as_dict(self) -> dict:
        return asdict(self)


def explain_missing(grid, node: int) -> str:
    """Why ``node`` sent nothing usable: the latest network event about it, or no reply in time."""
    for event in reversed(getattr(grid, "events", [])):
        if event["node"] == node and event["kind"] != "peer":
            return f"{event['kind']}: {event['reason']}"
    return "no reply before the deadline"


def check_update(reply: Message, record_name: str, reference: Mapping[str, np.ndarray],
                 server_round: int, partial: bool = False) -> tuple[dict[str, np.ndarray] | None, str | None]:
    """(the update's arrays, None) when ``reply`` carries a well-formed update for this round,
    else (None, why not): an error reply, a reply to another round, a missing record, bytes that
    do not decode, missing (unless ``partial``: a subset of the tensors is an update) or extra
    tensors, a wrong shape, or non-finite values."""
    if reply.has_error():
        return None, f"client error (code {reply.error.code}): {reply.error.reason}"
    if reply.metadata.group_id != str(server_round):
        return None, f"reply belongs to round {reply.metadata.group_id!r}, not {server_round} (stale)"
    record = typed_record(reply.content, record_name, ArrayRecord)
    if record is None:
        named = sorted(name for name, r in reply.content.items() if isinstance(r, ArrayRecord))
        return None, f"no ArrayRecord named {record_name!r} (got {named})"
    try:
        arrays = from_record(record)
    except (ValueError, TypeError) as err:
        return None, f"undecodable update ({err})"
    missing, extra = sorted(set(reference) - set(arrays)), sorted(set(arrays) - set(reference))
    if extra or (missing and not partial):
        return None, f"tensor names differ from the model's: missing {missing[:5]}, unexpected {extra[:5]}"
    for name in arrays:
        expected = reference[name]
        if arrays[name].shape != expected.shape:
            return None, f"{name}: shape {tuple(arrays[name].shape)}, expected {tuple(expected.shape)}"
        bad = int(arrays[name].size - np.isfinite(arrays[name]).sum())
        if bad:
            return None, f"{name}: {bad} non-finite values"
    return arrays, None


def mean_or_none(values) -> float | None:
    values = [v for v in values if v is not None and math.isfinite(v)]
    return sum(values) / len(values) if values else None
