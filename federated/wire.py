"""Messages as they travel: Flower's serialized objects, their exact sizes, and the relay convention.

Flower's engines ship a message as content-addressed objects (the Message, its RecordDict,
each record, each Array and its chunks), every one deflated to bytes. :func:`wire_objects`
produces exactly those bytes, :func:`nbytes` counts them and :func:`wire_copy` inflates
them again, the way a receiver sees the message, so nothing is shared between sender and
receiver in process.

The relay convention. Flower has no peer-to-peer messages, so gossip goes through the
server: a client publishes its payload in an ArrayRecord named ``publish`` of its reply,
and the server forwards it to each neighbour as an ArrayRecord named ``peer.<node id>``.
A message's ``timing`` ConfigRecord tells a network simulator what the message means:
``compute_flops``, the work the receiver does before replying; ``p2p``, that it stands
for peer-to-peer traffic (its ``peer.*`` records travel on peer links, the rest is relay
bookkeeping); ``overlap``, that the peer payloads are needed only after the compute, so
their transfer runs while the receiver computes.
"""

from __future__ import annotations

from flwr.app import Array, ConfigRecord, Message, RecordDict
from flwr.supercore.inflatable.inflatable_object import (
    InflatableObject,
    get_all_nested_objects,
    no_object_id_recompute,
)
from flwr.supercore.inflatable.inflatable_utils import inflate_object_from_contents

PEER_PREFIX = "peer."
PUBLISH = "publish"
TIMING = "timing"


_WIRE = "_edgekit_wire"  # an Array's cached (object id, its and its chunks' deflated bytes)


def _array_objects(array: Array) -> dict[str, bytes]:
    """The deflated bytes of ``array`` and its chunks, kept on the Array while its contents stay
    the same: one payload travels many times (a published record to every neighbour, each
    time sized and copied), and hashing and copying its chunks again was most of the engine's
    time. Flower marks an Array dirty and drops its id whenever a field is set, so a cache
    whose id is the Array's current, clean id is still exact."""
    cached = array.__dict__.get(_WIRE)
    if cached is not None and not array.is_dirty and array.__dict__.get("_object_id") == cached[0]:
        return cached[1]
    objects = {object_id: nested.deflate() for object_id, nested in get_all_nested_objects(array).items()}
    array.__dict__[_WIRE] = (array.object_id, objects)
    return objects


def _collect(obj: InflatableObject, out: dict[str, bytes]) -> None:
    if isinstance(obj, Array):
        out.update(_array_objects(obj))
        return
    for child in (obj.children or {}).values():
        _collect(child, out)
    out[obj.object_id] = obj.deflate()


def wire_objects(obj: InflatableObject) -> dict[str, bytes]:
    """Object id -> deflated bytes of ``obj`` and everything nested in it, each unique object once."""
    with no_object_id_recompute():  # each object's id (a hash of its bytes) computed once, not per ancestor
        out: dict[str, bytes] = {}
        _collect(obj, out)
        return out


def nbytes(obj: InflatableObject) -> int:
    """The serialized size of ``obj`` (a Message, RecordDict or record) as Flower ships it."""
    return sum(len(content) for content in wire_objects(obj).values())


def wire_copy(message: Message) -> tuple[Message, int]:
    """(the message as its receiver gets it, its size in bytes): serialized and inflated again."""
    with no_object_id_recompute():
        objects = wire_objects(message)
        root = message.object_id
    size = sum(len(content) for content in objects.values())
    copy = inflate_object_from_contents(root, objects)
    copy.metadata.__dict__["_message_id"] = message.metadata.message_id  # ids travel beside the objects
    return copy, size


def peer_record_name(node_id: int) -> str:
    return f"{PEER_PREFIX}{node_id}"


def peer_sources(content: RecordDict) -> dict[int, str]:
    """Node id -> record name of every relayed peer payload in ``content``."""
    return {int(name[len(PEER_PREFIX):]): name for name in content.array_records if name.startswith(PEER_PREFIX)}


def timing_record(compute_flops: float = 0.0, *, p2p: bool = False, overlap: bool = False) -> ConfigRecord:
    return ConfigRecord({"compute_flops": float(compute_flops), "p2p": bool(p2p), "overlap": bool(overlap)})


def message_timing(content: RecordDict) -> tuple[float, bool, bool]:
    """(compute_flops, p2p, overlap) of a message; a message without a timing record is plain client work of 0 FLOPs."""
    record = content.config_records.get(TIMING)
    if record is None:
        return 0.0, False, False
    return float(record.get("compute_flops", 0.0)), bool(record.get("p2p", False)), bool(record.get("overlap", False))
