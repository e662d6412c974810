"""Exchanged tensors as Flower ArrayRecords, optionally compressed to an MX format.

A set of named tensors travels as an ArrayRecord holding one Flower ``Array`` (named
``tensors``) whose ``stype`` says the encoding (``edgekit.tensors:none``,
``edgekit.tensors:mxint8``, ``edgekit.tensors:mxfp4``) and whose data is

    4-byte little-endian length of the layout | layout: JSON [[name, shape], ...] | payloads

with each tensor's payload, in layout order, either its float32 values or the packed MX
element codes followed by the E8M0 block scales that :func:`edgekit.simulators.quantize`
produces along the last axis. One Array per message part rather than one per tensor:
Flower hashes and frames every Array and chunk as a separate object, and for a model of
tens of tensors that per-object cost, not the bytes, dominated the engine's time. The
serialized size is the real (compressed) size, and a reader that does not know the
``stype`` cannot mistake the bytes for floats (Flower's ``Array.numpy`` refuses it).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping

import numpy as np
from flwr.app import Array, ArrayRecord

from .choices import NO_COMPRESSION, compressions


def _simulators():
    """edgekit.simulators, imported on first MX use only: Flower's engines start a fresh ClientApp
    process for every message, and the codecs' imports (Numba, ml_dtypes) cost seconds there
    that an uncompressed run never needs."""
    import edgekit.simulators

    return edgekit.simulators

STYPE = "edgekit.tensors:"
TENSORS = "tensors"


def check_compression(name: str) -> str:
    if name == NO_COMPRESSION:  # the common case needs no codec import (Flower starts a process per message)
        return name
    if name not in compressions():
        raise ValueError(f"unknown compression {name!r}; allowed: {', '.join(compressions())}")
    return name


def _mx_layout(fmt, shape: tuple) -> tuple[tuple, int, int]:
    """(rows shape, code bytes, scale bytes) of a tensor of ``shape`` packed along its last axis."""
    lead = shape[:-1] if shape else ()
    n = shape[-1] if shape else 1
    blocks = math.ceil(n / fmt.block_size)
    rows = math.prod(lead)
    return lead, rows * blocks * fmt.bytes_per_block, rows * blocks


def packed_nbytes(shape: tuple, compression: str) -> int:
    """Bytes of one tensor's payload: 4 per float32 element, or its MX codes and scales."""
    if check_compression(compression) == "none":
        return 4 * math.prod(shape)
    _, code_bytes, scale_bytes = _mx_layout(_simulators().get_format(compression), tuple(shape))
    return code_bytes + scale_bytes


def _encode(x: np.ndarray, compression: str) -> bytes:
    if compression == "none":
        return x.tobytes()
    q = _simulators().quantize(x.reshape(x.shape or (1,)), compression, axis=-1)
    return q.codes.tobytes() + q.scales.tobytes()


def _decode(data: memoryview, shape: tuple, compression: str) -> np.ndarray:
    if compression == "none":
        return np.frombuffer(data, dtype=np.float32).reshape(shape)  # a read-only view, no copy
    sim = _simulators()
    fmt = sim.get_format(compression)
    lead, code_bytes, _ = _mx_layout(fmt, shape)
    raw = np.frombuffer(data, dtype=np.uint8)
    q = sim.QuantizedTensor(fmt, shape or (1,), -1, raw[:code_bytes].reshape(lead + (-1,)),
                        raw[code_bytes:].reshape(lead + (-1,)))
    return sim.dequantize(q).reshape(shape)


def to_record(arrays: Mapping[str, np.ndarray], compression: str = "none") -> ArrayRecord:
    """An ArrayRecord of ``arrays`` (name -> float tensor, as float32), compressed with ``compression``."""
    check_compression(compression)
    tensors = {name: np.require(x, dtype=np.float32, requirements="C") for name, x in arrays.items()}
    head = json.dumps([[name, list(x.shape)] for name, x in tensors.items()]).encode()
    data = b"".join([len(head).to_bytes(4, "little"), head, *(_encode(x, compression) for x in tensors.values())])
    return ArrayRecord({TENSORS: Array(dtype="uint8", shape=(len(data),), stype=STYPE + compression, data=data)})


def _layout(data: bytes) -> tuple[list, int]:
    size = int.from_bytes(data[:4], "little")
    layout = json.loads(data[4:4 + size])
    if not (isinstance(layout, list) and all(
            isinstance(e, list) and len(e) == 2 and isinstance(e[0], str) and isinstance(e[1], list)
            and all(isinstance(d, int) and d >= 0 for d in e[1]) for e in layout)):
        raise ValueError("the layout is not a list of [name, shape] pairs")
    return layout, 4 + size


def from_record(record: ArrayRecord) -> dict[str, np.ndarray]:
    """The tensors of a record made by :func:`to_record`; ValueError when it is not one (a wrong
    encoding, a layout that does not parse, bytes that do not fit the layout)."""
    if set(record) != {TENSORS}:
        raise ValueError(f"expected one Array named {TENSORS!r}, got {sorted(record)[:5]}")
    array = record[TENSORS]
    if not array.stype.startswith(STYPE):
        raise ValueError(f"unknown encoding {array.stype!r} (expected {STYPE}<compression>)")
    compression = check_compression(array.stype[len(STYPE):])
    data = array.data
    layout, offset = _layout(data)
    view, out = memoryview(data), {}
    for name, shape in layout:
        size = packed_nbytes(tuple(shape), compression)
        if offset + size > len(data):
            raise ValueError(f"{name}: {len(data) - offset} bytes left, shape {tuple(shape)} needs {size}")
        out[name] = _decode(view[offset:offset + size], tuple(shape), compression)
        offset += size
    if offset != len(data):
        raise ValueError(f"{len(data) - offset} bytes after the last tensor")
    return out
