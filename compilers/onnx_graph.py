"""Users' ONNX graphs: read, give symbolic input dims a size, simplify, and find the weights a plan may quantize.

A graph made elsewhere (transformers, torchvision, ``torch.onnx.export`` of a bare
``nn.Linear``) names its weights as its exporter pleases (``onnx::MatMul_4``) and may
reach them through a ``Transpose`` or ``Cast``. :func:`weight_sites` finds every
MatMul/Gemm/Conv weight (and, on request, every Gather embedding table) by following
the op's weight input back to an initializer, whatever its name, and records along which
axis of the stored tensor the input channels run: the axis blocks are quantized along.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from .errors import describe_error

PASS_THROUGH = ("Transpose", "Cast", "Identity")  # ops between an initializer and the op that reads it
WEIGHT_SLOTS = {"MatMul": 1, "Gemm": 1, "Conv": 1}
EMBEDDING_SLOT = ("Gather", 0)
BATCH = "batch"  # the name a symbolic batch dim is given


@dataclass(frozen=True)
class WeightSite:
    """One quantizable weight of an ONNX graph."""

    layer: str  # the name a plan uses
    initializer: str  # the initializer that holds it
    op: str  # "MatMul", "Gemm", "Conv" or "Gather"
    axis: int  # the axis of the stored tensor along which input channels run
    shape: tuple
    activation: str = ""  # the tensor the weight multiplies (MatMul/Gemm), for calibration statistics


def read_onnx(path) -> onnx.ModelProto:
    """A checked ONNX model, or a ``ValueError`` naming the file and what is wrong with it."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"ONNX file {str(path)!r} does not exist")
    try:
        model = onnx.load(str(path))
        onnx.checker.check_model(model)
    except Exception as err:  # onnx raises DecodeError, ValidationError, ...
        raise ValueError(f"{path} is not a valid ONNX model: {describe_error(err)}") from err
    return model


def graph_inputs(model: onnx.ModelProto) -> dict[str, list]:
    """Input name -> dims (an int, or the symbolic dim's name, or None) of the graph's real inputs."""
    initializers = {i.name for i in model.graph.initializer}
    out = {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        dims = value.type.tensor_type.shape.dim
        out[value.name] = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in dims]
    return out


def parse_input_shapes(items) -> dict[str, tuple[int, ...]]:
    """``["input_ids=1x128"]`` -> ``{"input_ids": (1, 128)}`` (CLI ``--input-shape``)."""
    shapes = {}
    for item in items:
        name, sep, dims = item.partition("=")
        try:
            shape = tuple(int(d) for d in dims.lower().split("x")) if sep and name.strip() else ()
        except ValueError:
            shape = ()
        if not shape or any(d < 1 for d in shape):
            raise ValueError(f"--input-shape {item!r} must look like NAME=DxDx... with positive sizes "
                             "(e.g. input_ids=1x128)")
        shapes[name.strip()] = shape
    return shapes


def input_shapes(model: onnx.ModelProto, given: dict[str, tuple[int, ...]] | None = None,
                 batch: int | None = 1) -> dict[str, tuple]:
    """A shape for every graph input: ``given`` where named, else the file's own dims with a symbolic
    leading (batch) dim set to ``batch`` (None: left symbolic, named ``batch``). Another symbolic dim
    must be given."""
    given = dict(given or {})
    inputs = graph_inputs(model)
    strange = sorted(set(given) - set(inputs))
    if strange:
        raise ValueError(f"--input-shape names {', '.join(map(repr, strange))}, which the model does not take; "
                         f"its inputs: {', '.join(f'{n} {dims}' for n, dims in inputs.items())}")
    shapes = {}
    for name, dims in inputs.items():
        if name in given:
            shape = given[name]
            fixed = [(i, d) for i, d in enumerate(dims) if isinstance(d, int) and d > 0]
            if len(shape) != len(dims) or any(shape[i] != d for i, d in fixed):
                raise ValueError(f"input {name!r} has dims {dims} in the model; --input-shape gave {list(shape)}")
            shapes[name] = tuple(shape)
            continue
        shape = [d if isinstance(d, int) and d > 0 else None for d in dims]
        if shape and shape[0] is None:
            shape[0] = BATCH if batch is None else batch
        if None in shape:
            raise ValueError(f"input {name!r} has symbolic dims {dims}: give its size, e.g. --input-shape "
                             f"{name}={'x'.join(str(d) if d is not None else '16' for d in shape)}")
        shapes[name] = tuple(shape)
    return shapes


def simplify(model: onnx.ModelProto, shapes: dict[str, tuple]) -> onnx.ModelProto:
    """``model`` with its inputs set to ``shapes`` (ints, or a name for a symbolic dim; none given: left as
    they are), shapes inferred and constant subgraphs folded (onnxslim).

    Transformer exports compute shapes at run time (Shape -> Gather -> Expand ...);
    with the input shapes known those subgraphs fold away, and TVM's frontend imports
    what is left.
    """
    import onnxslim

    model = onnx.ModelProto.FromString(model.SerializeToString())
    for value in model.graph.input:
        if value.name in shapes:
            dims = value.type.tensor_type.shape.dim
            for dim, size in zip(dims, shapes[value.name], strict=True):
                if isinstance(size, str):
                    dim.dim_param = size
                else:
                    dim.dim_value = size
    try:
        return onnxslim.slim(model)
    except Exception as err:  # onnxslim raises from its own passes and from onnx's shape inference
        raise ValueError(f"the ONNX graph could not be simplified for input shapes {shapes}: "
                         f"{describe_error(err)}") from err


def _producers(graph) -> dict[str, onnx.NodeProto]:
    return {out: node for node in graph.node for out in node.output}


def _trace_initializer(name: str, producers: dict, initializers: dict, ndim: int) -> tuple[str, list[int]] | None:
    """The initializer behind an op's input ``name`` through Transpose/Cast/Identity, and ``perm``:
    axis ``a`` of the tensor the op reads is axis ``perm[a]`` of the stored initializer."""
    perm = list(range(ndim))
    while name not in initializers:
        node = producers.get(name)
        if node is None or node.op_type not in PASS_THROUGH:
            return None
        if node.op_type == "Transpose":
            attr = next((a for a in node.attribute if a.name == "perm"), None)
            step = list(attr.ints) if attr is not None else list(range(ndim))[::-1]
            perm = [step[p] for p in perm]
        name = node.input[0]
    return name, perm


def _layer_name(initializer: str, node: onnx.NodeProto, index: int) -> str:
    """``fc1.weight`` -> ``fc1``; a name an exporter or a folding pass made up (``onnx::MatMul_4``,
    ``/fc/MatMul_output_0_weight``) -> the node's path (``/fc/MatMul`` -> ``fc``), else the op and
    its position."""
    if not initializer.startswith(("onnx::", "/")):
        return initializer.removesuffix(".weight")
    path = [part for part in node.name.split("/") if part][:-1]
    return ".".join(path) or f"{node.op_type.lower()}_{index}"


def weight_sites(model: onnx.ModelProto, embeddings: bool = False) -> tuple[dict[str, WeightSite], dict[str, str]]:
    """The quantizable weights of ``model`` by layer name, and those left in float with the reason.

    A weight is a float initializer read (directly or through Transpose/Cast/Identity) as
    MatMul's B (2-D), Gemm's B, Conv's W (groups = 1) or, with ``embeddings``, Gather's
    table. An initializer read by several ops (tied embeddings) is one site, the first.
    """
    graph = model.graph
    initializers = {t.name: t for t in graph.initializer}
    producers = _producers(graph)
    sites: dict[str, WeightSite] = {}
    skipped: dict[str, str] = {}
    seen = set()
    for index, node in enumerate(graph.node):
        slot = WEIGHT_SLOTS.get(node.op_type)
        if embeddings and node.op_type == EMBEDDING_SLOT[0]:
            slot = EMBEDDING_SLOT[1]
        if slot is None or len(node.input) <= slot:
            continue
        ndim = 4 if node.op_type == "Conv" else 2
        traced = _trace_initializer(node.input[slot], producers, initializers, ndim)
        if traced is None:
            continue
        init_name, perm = traced
        init = initializers[init_name]
        if init_name in seen or init.data_type not in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16,
                                                       onnx.TensorProto.BFLOAT16):
            continue
        shape = tuple(init.dims)
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        if len(shape) != ndim and node.op_type != "Conv":
            continue
        if node.op_type == "Conv":
            if len(shape) not in (3, 4):
                continue
            if attrs.get("group", 1) != 1:
                skipped[init_name] = f"grouped convolution (group={attrs['group']}): kept in float"
                seen.add(init_name)
                continue
            axis = perm[1] if len(shape) == 4 else 1
        elif node.op_type == "Gemm":
            axis = perm[1] if attrs.get("transB", 0) else perm[0]
        elif node.op_type == "MatMul":
            axis = perm[0]  # B is (K, N) as the op reads it: its axis 0 holds the input channels
        else:  # Gather: rows of the table are looked up; each row is quantized along its own axis
            axis = perm[1]
        seen.add(init_name)
        layer = _layer_name(init_name, node, index)
        while layer in sites:
            layer += "_"
        multiplies = node.input[0] if node.op_type in ("MatMul", "Gemm") and not attrs.get("transA", 0) else ""
        sites[layer] = WeightSite(layer, init_name, node.op_type, axis, shape, multiplies)
    return sites, skipped


def initializer_array(model: onnx.ModelProto, name: str) -> np.ndarray:
    return numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == name))


def weight_rows(model: onnx.ModelProto, site: WeightSite) -> np.ndarray:
    """A 2-D site's weight as rows of input channels (out, in), float64: the form LiftQuant codes."""
    weight = initializer_array(model, site.initializer).astype(np.float64)
    return np.ascontiguousarray(weight if site.axis == 1 else weight.T)


def with_weights(model: onnx.ModelProto, site_rows: dict[WeightSite, np.ndarray]) -> onnx.ModelProto:
    """A copy of ``model`` whose sites hold other weights, given as rows (out, in) in float."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    by_name = {site.initializer: (site, rows) for site, rows in site_rows.items()}
    for i, init in enumerate(model.graph.initializer):
        if init.name in by_name:
            site, rows = by_name[init.name]
            value = rows if site.axis == 1 else rows.T
            dtype = onnx.helper.tensor_dtype_to_np_dtype(init.data_type)
            model.graph.initializer[i].CopyFrom(numpy_helper.from_array(np.ascontiguousarray(value, dtype), init.name))
    return model


def with_outputs(model: onnx.ModelProto, names: list[str]) -> onnx.ModelProto:
    """A copy of ``model`` that also outputs the float tensors ``names`` (activations to calibrate on)."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    present = {o.name for o in model.graph.output}
    model.graph.output.extend(onnx.helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None)
                              for n in dict.fromkeys(names) if n not in present)
    return model
