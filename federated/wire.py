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

from collections.abc import Iterable
from typing import TypeVar

from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.supercore.inflatable.inflatable_object import (
    InflatableObject,
    _get_computed_object_ids,
    get_all_nested_objects,
    get_object_id,
    no_object_id_recompute,
)
from flwr.supercore.inflatable.inflatable_utils import inflate_object_from_contents

PEER_PREFIX = "peer."
PUBLISH = "publish"
TIMING = "timing"

R = TypeVar("R", ArrayRecord, ConfigRecord, MetricRecord)


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


def _parts(obj: InflatableObject) -> Iterable[InflatableObject]:
    """The objects ``obj`` refers to. Flower's ``children`` keys them by id, which deflates each
    of them (and theirs) once more for every ancestor that asks."""
    if isinstance(obj, Message):
        return [obj.content] if obj.has_content() else []
    if isinstance(obj, (RecordDict, ArrayRecord)):
        return obj.values()
    return (obj.children or {}).values()


def _collect(obj: InflatableObject, out: dict[str, bytes], arrays: dict[str, dict[str, bytes]]) -> str:
    """Put the bytes of ``obj`` and its descendants in ``out`` (and each Array's own objects in
    ``arrays``), deepest first, each object deflated once; ``obj``'s id. Within
    ``no_object_id_recompute`` a parent's deflate reads the ids registered here."""
    if isinstance(obj, Array):
        objects = _array_objects(obj)
        out.update(objects)
        arrays[obj.object_id] = objects
        return obj.object_id
    for part in _parts(obj):
        _collect(part, out, arrays)
    content = obj.deflate()
    object_id = get_object_id(content)
    obj.__dict__["_object_id"] = object_id  # as Flower's object_id property caches it
    _get_computed_object_ids().add(object_id)
    out[object_id] = content
    return object_id


def _wire(obj: InflatableObject) -> tuple[str, dict[str, bytes], dict[str, dict[str, bytes]]]:
    """(id of ``obj``, object id -> deflated bytes of it and everything nested, each Array's objects)."""
    with no_object_id_recompute():
        out: dict[str, bytes] = {}
        arrays: dict[str, dict[str, bytes]] = {}
        root = _collect(obj, out, arrays)
        return root, out, arrays


def wire_objects(obj: InflatableObject) -> dict[str, bytes]:
    """Object id -> deflated bytes of ``obj`` and everything nested in it, each unique object once."""
    return _wire(obj)[1]


# Metadata ids that Flower's engines draw at random; a varint's width depends on its value
_DRAWN_IDS = ("_run_id", "_src_task_id", "_dst_task_id")


def _message_object_size(message: Message) -> int:
    """The size of the message's own object (metadata, error, its content's id), with the run and
    task ids counted at the width of the in-process engine's (1): on Flower's engines they are
    drawn at random, and sizes, hence simulated times, must not depend on the draw."""
    metadata = message.metadata.__dict__
    drawn = {key: metadata[key] for key in _DRAWN_IDS}
    metadata.update({key: 1 for key, value in drawn.items() if value})
    try:
        return len(message.deflate())
    finally:
        metadata.update(drawn)


def nbytes(obj: InflatableObject) -> int:
    """The serialized size of ``obj`` (a Message, RecordDict or record) as Flower ships it
    (a message's random run and task ids at a fixed width, see :func:`_message_object_size`)."""
    if not isinstance(obj, Message):
        return sum(len(content) for content in wire_objects(obj).values())
    with no_object_id_recompute():
        objects: dict[str, bytes] = {}
        if obj.has_content():
            _collect(obj.content, objects, {})
        return sum(len(content) for content in objects.values()) + _message_object_size(obj)


def wire_copy(message: Message) -> tuple[Message, int]:
    """(the message as its receiver gets it, its size in bytes): serialized and inflated again.
    The copy's Arrays keep the wire bytes they were inflated from (the same bytes, so the
    same ids): sizing or forwarding the copy does not hash its payloads again."""
    root, objects, arrays = _wire(message)
    size = sum(len(content) for content in objects.values())
    inflated: dict[str, InflatableObject] = {}
    copy = inflate_object_from_contents(root, objects, objects=inflated)
    for array_id, array_objects in arrays.items():
        array = inflated[array_id]
        array.__dict__["_object_id"] = array_id
        array.is_dirty = False
        array.__dict__[_WIRE] = (array_id, array_objects)
    copy.metadata.__dict__["_message_id"] = message.metadata.message_id  # ids travel beside the objects
    return copy, size


def peer_record_name(node_id: int) -> str:
    return f"{PEER_PREFIX}{node_id}"


def typed_record(content: RecordDict, name: str, kind: type[R]) -> R | None:
    """``content[name]`` when it is a ``kind`` record, else None: ``content.array_records.get(name)``
    (or ``config_records``, ``metric_records``) without that view, which Flower rebuilds on every
    access by storing each of the RecordDict's records into it and back."""
    record = content.get(name)
    return record if isinstance(record, kind) else None


def peer_sources(content: RecordDict) -> dict[int, str]:
    """Node id -> record name of every relayed peer payload in ``content``."""
    return {int(name[len(PEER_PREFIX):]): name for name, record in content.items()
            if name.startswith(PEER_PREFIX) and isinstance(record, ArrayRecord)}


def timing_record(compute_flops: float = 0.0, *, p2p: bool = False, overlap: bool = False) -> ConfigRecord:
    return ConfigRecord({"compute_flops": float(compute_flops), "p2p": bool(p2p), "overlap": bool(overlap)})


def message_timing(content: RecordDict) -> tuple[float, bool, bool]:
    """(compute_flops, p2p, overlap) of a message; a message without a timing record is plain client work of 0 FLOPs."""
    record = typed_record(content, TIMING, ConfigRecord)
    if record is None:
        return 0.0, False, False
    return float(record.get("compute_flops", 0.0)), bool(record.get("p2p", False)), bool(record.get("overlap", False))
