"""The node builder of the ONNX decode subgraphs: generated names, shared constants.

Every decode subgraph (block formats in :mod:`.onnx_export`, LiftQuant in
:mod:`.liftquant_onnx`) is built with it, so their small constants are shared by name
and deduplicated on export.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

PREFIX = "edgekit_decode::"  # names of the tensors the decode subgraphs add


class DecodeBuilder:
    """Nodes and initializers of one decode subgraph, with generated tensor names."""

    def __init__(self, name: str):
        self.name = name
        self.nodes: list[onnx.NodeProto] = []
        self.inits: dict[str, TensorProto] = {}
        self.count = 0

    def const(self, key: str, array: np.ndarray) -> str:
        """A shared constant (same name in every subgraph, deduplicated on export)."""
        tensor_name = PREFIX + key
        if tensor_name not in self.inits:
            self.inits[tensor_name] = numpy_helper.from_array(np.asarray(array), tensor_name)
        return tensor_name

    def own(self, key: str, array: np.ndarray) -> str:
        """An initializer that belongs to this weight alone."""
        tensor_name = f"{self.name}::{key}"
        self.inits[tensor_name] = numpy_helper.from_array(np.asarray(array), tensor_name)
        return tensor_name

    def u8(self, value: int) -> str:
        return self.const(f"u8_{value}", np.array(value, np.uint8))

    def u32(self, value: int) -> str:
        return self.const(f"u32_{value}", np.array(value, np.uint32))

    def i64(self, values) -> str:
        values = [int(v) for v in np.atleast_1d(values)]
        return self.const("i64_" + "_".join(str(v) for v in values), np.array(values, np.int64))

    def scalar_i64(self, value: int) -> str:
        return self.const(f"i64_scalar_{value}", np.array(value, np.int64))

    def op(self, op_type: str, inputs: list[str], tag: str, **attrs) -> str:
        self.count += 1
        out = f"{self.name}::{tag}"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=f"{self.name}::decode/{self.count}_{tag}",
                                           **attrs))
        return out

    def reshape(self, x: str, shape: tuple, tag: str) -> str:
        return self.op("Reshape", [x, self.i64(shape)], tag)

    def finish(self, last: str) -> str:
        """Rename the last node's output to the weight's own name."""
        node = self.nodes[-1]
        assert node.output[0] == last
        node.output[0] = self.name
        return self.name


def stack_last(b: DecodeBuilder, parts: list[str], lead: tuple, width: int, tag: str) -> str:
    """Interleave ``parts`` (each ``lead + (width,)``) along the last axis: ``lead + (width * len(parts),)``."""
    axis = b.i64([-1])
    cols = [b.op("Unsqueeze", [p, axis], f"{tag}_col{k}") for k, p in enumerate(parts)]
    stacked = b.op("Concat", cols, f"{tag}_stack", axis=-1)
    return b.reshape(stacked, lead + (width * len(parts),), tag)
