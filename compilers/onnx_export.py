"""Export a torch model to standard ONNX with its planned weights stored as packed codes.

Each weight the plan quantizes is kept in the file as the simulators' own bytes
(:class:`~edgekit.simulators.QuantizedTensor` ``codes`` and ``scales``, uint8, in the
shapes the codecs store them) and decoded inside the graph with standard ONNX ops only:

* unpack: 8-bit codes are used as they are; 4-bit codes (FP4/INT4, two per byte, low
  nibble first) by ``BitwiseAnd`` / ``BitShift`` then ``Unsqueeze`` + ``Concat`` +
  ``Reshape``; 6-bit codes (four per three bytes, LSB first) by ``Reshape`` to byte
  triples, ``Gather`` of each byte, ``BitShift`` / ``BitwiseAnd`` / ``BitwiseOr`` into
  four codes, then ``Unsqueeze`` + ``Concat`` + ``Reshape``;
* decode: ``Cast`` to int32 and ``Gather`` from the element value table
  (``kernel_tables``: every one of the 2^bits codes, float32), ``Reshape`` into blocks,
  times the block scale (``Gather`` from the 256-entry scale table, ``Unsqueeze`` to
  broadcast over the block); NVFP4 then multiplies by its FP32 tensor scale. This is the
  operation order and float32 rounding of ``kernels.decode``, so the result is bit-exact
  with :func:`edgekit.simulators.dequantize`;
* layout: ``Reshape`` the blocks back into rows, ``Slice`` off the padding of a partial
  last block, and ``Transpose`` the input-channel axis back into place (Conv weights).

LiftQuant weights (Linear layers) are stored and decoded by :mod:`.liftquant_onnx`.

The decoded tensor takes the name of the initializer it replaces (``fc1.weight``), so
the MatMul / Gemm / Conv that read it are left untouched.

The float graph comes from PyTorch's TorchScript exporter (``torch.onnx.export(...,
dynamo=False)``; the dynamo exporter needs onnxscript, which is not installed), in eval
mode and without constant folding: folding would fuse BatchNorm into Conv weights and
pre-transpose MatMul weights under generated names, and the planned weights could no
longer be found by name. onnxruntime folds the constant subgraphs itself when it loads
the model.
"""

from __future__ import annotations

import io
import json
import math
import os
import warnings
from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper
from torch import nn

from edgekit.simulators import QuantizedTensor, quantize
from edgekit.simulators import weight_formats as wf
from edgekit.simulators.codec import kernel_tables
from edgekit.simulators.formats import code_group
from edgekit.simulators.liftquant import codebook_bytes
from edgekit.simulators.liftquant import quantize as liftquant_quantize
from edgekit.simulators.weight_formats import WeightFormat
from edgekit.utils.files import atomic_write

from .errors import describe_error
from .liftquant_onnx import liftquant_weight_nodes
from .onnx_graph import WeightSite
from .onnx_nodes import PREFIX, DecodeBuilder, stack_last
from .plan import check_plan, is_liftquant, plannable_layers

DEFAULT_OPSET = 18  # BitwiseAnd / BitwiseOr need opset 18
MIN_OPSET = 18
MAX_OPSET = 20  # the newest opset torch's TorchScript exporter writes
MAX_PROTO_BYTES = 2**31 - 1  # protobuf's limit for one serialized model
PLAN_KEY = "edgekit.plan"  # metadata entry that records the plan a file was exported with


def _unpack(b: DecodeBuilder, codes: str, bits: int, lead: tuple, row_bytes: int) -> str:
    """uint8 codes, one per element, from the packed bytes (the layout of ``reference.unpack_codes``).

    A group of bytes (:func:`~edgekit.simulators.formats.code_group`) is read as one little-endian
    word; code ``t`` is its bits ``[bits*t, bits*(t+1))``. The first code needs no shift and the
    last no mask (the word has no bits above it).
    """
    per, nbytes = code_group(bits)
    if per == 1:  # one code per byte: the bytes are the codes
        return codes
    groups = row_bytes // nbytes
    if nbytes == 1:
        word, dtype, const = codes, TensorProto.UINT8, b.u8
    else:
        grouped = b.op("Cast", [b.reshape(codes, lead + (groups, nbytes), "byte_groups")], "wide_bytes",
                       to=TensorProto.UINT32)
        parts = [b.op("Gather", [grouped, b.scalar_i64(j)], f"byte{j}", axis=-1) for j in range(nbytes)]
        word = parts[0]
        for j in range(1, nbytes):
            shifted = b.op("BitShift", [parts[j], b.u32(8 * j)], f"byte{j}_up", direction="LEFT")
            word = b.op("BitwiseOr", [word, shifted], f"word{j}")
        dtype, const = TensorProto.UINT32, b.u32
    out = []
    for t in range(per):
        code = word if t == 0 else b.op("BitShift", [word, const(bits * t)], f"code{t}_down", direction="RIGHT")
        if t < per - 1:
            code = b.op("BitwiseAnd", [code, const((1 << bits) - 1)], f"code{t}")
        if dtype != TensorProto.UINT8:
            code = b.op("Cast", [code], f"code{t}_u8", to=TensorProto.UINT8)
        out.append(code)
    return stack_last(b, out, lead, groups, "unpacked")


def decode_weight_nodes(name: str, q: QuantizedTensor) -> tuple[list[onnx.NodeProto], list[TensorProto], str]:
    """The decode subgraph of one quantized tensor: ``(nodes, initializers, output_name)``.

    The initializers hold ``q.codes`` and ``q.scales`` byte for byte (uint8, stored
    shapes), the float32 value tables, and small constants whose names start with
    ``edgekit_decode::`` (shared by every subgraph). The nodes compute
    ``dequantize(q)`` bit-exactly into the float32 tensor ``output_name`` (= ``name``),
    of shape ``q.shape``.
    """
    if not isinstance(q, QuantizedTensor):
        raise ValueError(f"q must be a QuantizedTensor, got {type(q).__name__}")  # noqa: TRY004
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    fmt = q.format
    bits, block = fmt.element.bits, fmt.block_size
    lead, row_bytes = q.codes.shape[:-1], q.codes.shape[-1]
    n_blocks = q.scales.shape[-1]
    n = q.shape[q.axis]
    values, scale_values = kernel_tables(fmt)

    b = DecodeBuilder(name)
    codes = b.own("codes", q.codes)
    scales = b.own("scales", q.scales)
    element_table = b.const(f"values_{fmt.element.name}", values)
    scale_table = b.const(f"scales_{fmt.scale.name}", scale_values)

    unpacked = _unpack(b, codes, bits, lead, row_bytes)
    index = b.op("Cast", [unpacked], "code_index", to=TensorProto.INT32)
    elements = b.op("Gather", [element_table, index], "elements", axis=0)
    blocks = b.reshape(elements, lead + (n_blocks, block), "element_blocks")
    scale_index = b.op("Cast", [scales], "scale_index", to=TensorProto.INT32)
    scale = b.op("Gather", [scale_table, scale_index], "block_scale", axis=0)
    scale = b.op("Unsqueeze", [scale, b.i64([-1])], "block_scale_col")
    out = b.op("Mul", [blocks, scale], "scaled")
    if fmt.tensor_scale:
        ts = b.own("tensor_scale", np.array(q.tensor_scale, np.float32))
        out = b.op("Mul", [out, ts], "tensor_scaled")
    out = b.reshape(out, lead + (n_blocks * block,), "rows")
    if n_blocks * block != n:
        out = b.op("Slice", [out, b.i64([0]), b.i64([n]), b.i64([-1])], "trimmed")
    ndim = len(q.shape)
    if q.axis != ndim - 1:
        perm = [d if d < q.axis else (ndim - 1 if d == q.axis else d - 1) for d in range(ndim)]
        out = b.op("Transpose", [out], "transposed", perm=perm)
    return b.nodes, list(b.inits.values()), b.finish(out)


def onnx_session(path, providers=None, threads: int | None = None, level: str = "ORT_ENABLE_BASIC"):
    """An onnxruntime session of the model at ``path`` (or its serialized bytes), at ``ORT_ENABLE_BASIC``
    unless ``level`` says otherwise.

    Higher levels fuse dequantize patterns into kernels whose numerics differ from the
    simulators (see NOTES); BASIC only folds constants and removes redundant nodes.
    ``threads`` fixes the intra-op threads (and one inter-op thread), for timing.
    """
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    if threads is not None:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    return ort.InferenceSession(os.fspath(path), options, providers=providers or ["CPUExecutionProvider"])


# ---- export ------------------------------------------------------------------
def _check_path(path) -> Path:
    try:
        target = Path(os.fspath(path))
    except TypeError:
        raise ValueError(f"path must be a str or os.PathLike, got {type(path).__name__}") from None
    if target.is_dir():
        raise ValueError(f"path {str(target)!r} is a directory; give a file name such as model.onnx")
    parent = target.parent
    if not parent.is_dir():
        raise ValueError(f"cannot write {str(target)!r}: directory {str(parent)!r} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"cannot write {str(target)!r}: directory {str(parent)!r} is not writable")
    return target


def _check_plan(model: nn.Module, plan) -> dict[str, str]:
    if not isinstance(plan, dict):
        raise ValueError(  # noqa: TRY004
            f"plan must be a dict of layer name -> format (see compilers.plan.make_plan), got {type(plan).__name__}")
    layers = plannable_layers(model)
    checked = check_plan(layers, plan)
    convolutions = sorted(layer for layer, fmt in checked.items()
                          if is_liftquant(fmt) and not isinstance(layers[layer], nn.Linear))
    if convolutions:
        raise ValueError(f"LiftQuant codes Linear weights only; layers {', '.join(convolutions)} are convolutions: "
                         "plan them in a block format or a float baseline")
    return checked


def _float_graph(model: nn.Module, example_inputs: tuple, opset: int) -> onnx.ModelProto:
    """The model's float ONNX graph from the TorchScript exporter, weights named as parameters."""
    buffer = io.BytesIO()
    names = [f"input{i}" for i in range(len(example_inputs))]
    all_tensors = all(isinstance(x, torch.Tensor) for x in example_inputs)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # the TorchScript exporter is deprecated
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            torch.onnx.export(
                model, example_inputs, buffer, dynamo=False, export_params=True,
                keep_initializers_as_inputs=False, opset_version=opset,
                training=torch.onnx.TrainingMode.EVAL, do_constant_folding=False,
                input_names=names if all_tensors else None,
            )
        return onnx.load_from_string(buffer.getvalue())
    except Exception as error:  # the exporter raises many types; report its first line
        raise ValueError(f"torch.onnx.export could not export {type(model).__name__}: "
                         f"{describe_error(error)}") from error


def _weight_array(module: nn.Module, layer: str) -> np.ndarray:
    weight = getattr(module, "weight", None)
    if not isinstance(weight, torch.Tensor):
        raise ValueError(f"layer {layer!r} has no weight tensor")  # noqa: TRY004
    if weight.dtype != torch.float32:
        raise ValueError(f"layer {layer!r} has a {weight.dtype} weight; export_onnx expects a float32 model "
                         f"(call model.float() first)")
    return weight.detach().cpu().contiguous().numpy()


def _layer_entry(fmt_name: str, shape: tuple, codes_bytes: int, scales_bytes: int, extra_bytes: int = 0) -> dict:
    numel = math.prod(shape)
    return {
        "format": fmt_name,
        "shape": list(shape),
        "codes_bytes": int(codes_bytes),
        "scales_bytes": int(scales_bytes),
        "weight_bits": 8.0 * (codes_bytes + scales_bytes + extra_bytes) / numel,
        "numel": int(numel),
        "tensor_scale_bytes": int(extra_bytes),
    }


def export_onnx(model: nn.Module, example_inputs: tuple, plan: dict[str, str], path, *,
                opset: int = DEFAULT_OPSET) -> dict:
    """Export ``model`` to standard ONNX at ``path`` with the planned weights stored packed.

    plan: layer name -> weight format (``compilers.plan.make_plan``): ``fp32`` keeps the
    float weight, ``fp16`` stores it as float16 and casts it in the graph, a block format
    stores the codes of ``quantize(w, fmt, axis=1)`` (blocks along input channels) and
    decodes them in the graph (:func:`decode_weight_nodes`), a LiftQuant configuration
    (Linear layers) stores the LiftQuant encoding compile builds and decodes it in the
    graph (:mod:`.liftquant_onnx`). Layers not in the plan keep their float weights.

    Returns ``{"path", "opset", "layers": {name: {format, shape, codes_bytes,
    scales_bytes, weight_bits, numel, tensor_scale_bytes}}, "totals": {...}}``; the
    weight_bits count padding, block scales and the NVFP4 tensor scale (LiftQuant: row,
    group and input scales and the rotation), and the totals each LiftQuant codebook once. The file is
    written to a temporary file in the same directory and renamed into place, so a
    failure leaves no partial ``.onnx``.
    """
    if not isinstance(model, nn.Module):
        raise ValueError(f"model must be a torch.nn.Module, got {type(model).__name__}")  # noqa: TRY004
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    if not isinstance(example_inputs, tuple) or not example_inputs:
        raise ValueError(f"example_inputs must be a non-empty tuple of inputs, got {type(example_inputs).__name__}")
    if isinstance(opset, bool) or not isinstance(opset, int) or not MIN_OPSET <= opset <= MAX_OPSET:
        raise ValueError(f"opset must be an integer in [{MIN_OPSET}, {MAX_OPSET}] (BitwiseAnd needs 18; the "
                         f"TorchScript exporter writes at most {MAX_OPSET}), got {opset!r}")
    target = _check_path(path)
    plan = _check_plan(model, plan)
    modules = dict(model.named_modules())

    onnx_model = _float_graph(model, example_inputs, opset)
    inits = {t.name: t for t in onnx_model.graph.initializer}
    missing = [f"{layer}.weight" for layer in plan if f"{layer}.weight" not in inits]
    if missing:
        found = ", ".join(n for n in inits if n.endswith(".weight")) or "(none)"
        raise ValueError(f"planned weight(s) {', '.join(map(repr, missing))} not among the initializers of the "
                         f"exported graph of {type(model).__name__} (is the layer used in forward, or its weight "
                         f"shared?); weights found: {found}")
    sites = {}
    for layer in plan:
        weight = _weight_array(modules[layer], layer)
        wname = f"{layer}.weight"
        stored = numpy_helper.to_array(inits[wname])
        if stored.shape != weight.shape or not np.array_equal(stored, weight, equal_nan=True):
            raise ValueError(f"initializer {wname!r} of the exported graph does not hold the weight of layer "
                             f"{layer!r} (shape {stored.shape} vs {weight.shape})")
        sites[layer] = WeightSite(layer, wname, "Gemm" if weight.ndim == 2 else "Conv", 1, weight.shape)
    return write_quantized(onnx_model, plan, sites, target, type(model).__name__)


def export_onnx_graph(onnx_model: onnx.ModelProto, plan: dict[str, str], sites: dict[str, WeightSite], path) -> dict:
    """A user's ONNX graph (``onnx_graph.simplify``d, weights found by ``onnx_graph.weight_sites``) with the
    planned weights stored packed, at ``path``; returns what :func:`export_onnx` returns."""
    target = _check_path(path)
    plan = check_plan(list(sites), plan)
    lifted = sorted(layer for layer, fmt in plan.items() if is_liftquant(fmt) and len(sites[layer].shape) != 2)
    if lifted:
        raise ValueError(f"LiftQuant codes 2-D (MatMul/Gemm/Gather) weights only; layers {', '.join(lifted)} are "
                         "convolutions: plan them in a block format or a float baseline")
    onnx_model = onnx.ModelProto.FromString(onnx_model.SerializeToString())
    opset = next((o.version for o in onnx_model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset < MIN_OPSET:  # the decode subgraphs need BitwiseAnd (opset 18)
        try:
            from onnx import version_converter

            onnx_model = version_converter.convert_version(onnx_model, MIN_OPSET)
        except Exception as error:
            raise ValueError(f"the model is ONNX opset {opset}; the decode subgraphs need opset {MIN_OPSET} and "
                             f"onnx could not convert it: {describe_error(error)}") from error
    return write_quantized(onnx_model, plan, sites, target, "the model")


def _float_nodes(site: WeightSite, row: WeightFormat, weight: np.ndarray, decoded: str):
    """The weight stored in the row's float dtype, cast to float32 in the graph."""
    wname = site.initializer
    stored = weight.astype(row.dtype)
    nodes = [helper.make_node("Cast", [f"{wname}::{row.name}"], [decoded], name=f"{wname}::decode/cast",
                              to=TensorProto.FLOAT)]
    own = [numpy_helper.from_array(stored, f"{wname}::{row.name}")]
    return nodes, own, _layer_entry(row.name, weight.shape, stored.nbytes, 0), 0


def _liftquant_nodes(site: WeightSite, row: WeightFormat, weight: np.ndarray, decoded: str):
    """LiftQuant codes and scales of the weight's rows of input channels, decoded by ``M @ c``."""
    wname = site.initializer
    rows = weight if site.axis == 1 else weight.T  # LiftQuant codes rows of input channels
    lq = liftquant_quantize(np.ascontiguousarray(rows), row.liftquant)  # the encoding edgekit compile builds
    row_name = decoded if site.axis == 1 else f"{wname}::rows"
    nodes, own, _ = liftquant_weight_nodes(row_name, lq)
    if site.axis != 1:
        nodes.append(helper.make_node("Transpose", [row_name], [decoded], name=f"{wname}::decode/transpose",
                                      perm=[1, 0]))
    entry = _layer_entry(row.name, weight.shape, lq.codes.nbytes, lq.nbytes - lq.codes.nbytes)
    return nodes, own, entry, codebook_bytes(lq.format)


def _block_nodes(site: WeightSite, row: WeightFormat, weight: np.ndarray, decoded: str):
    """Packed codes and block scales, decoded by the block format's lookup subgraph."""
    q = quantize(weight, row.block, axis=site.axis)
    nodes, own, _ = decode_weight_nodes(decoded, q)
    entry = _layer_entry(row.name, weight.shape, q.codes.nbytes, q.scales.nbytes, 4 if q.format.tensor_scale else 0)
    return nodes, own, entry, 0


WEIGHT_DECODERS = {"float": _float_nodes, "liftquant": _liftquant_nodes, "block": _block_nodes}
"""The decode subgraph of each weight-format family (:mod:`edgekit.simulators.weight_formats`)."""


def _weight_nodes(site: WeightSite, fmt_name: str, weight: np.ndarray, dtype: int):
    """(nodes, initializers, layer entry, codebook bytes) that compute ``site``'s weight from its stored form."""
    wname = site.initializer
    decoded = wname if dtype == TensorProto.FLOAT else f"{wname}::float32"
    row = wf.resolve(fmt_name)
    nodes, own, entry, codebook = WEIGHT_DECODERS[row.family](site, row, weight, decoded)
    if decoded != wname:  # the graph reads the weight in its own dtype (float16, bfloat16)
        nodes.append(helper.make_node("Cast", [decoded], [wname], name=f"{wname}::decode/cast_back", to=dtype))
    return nodes, own, entry, codebook


def write_quantized(onnx_model: onnx.ModelProto, plan: dict[str, str], sites: dict[str, WeightSite], target: Path,
                    label: str) -> dict:
    """Replace each planned site's initializer by its stored form and decode subgraph, check, write atomically."""
    graph = onnx_model.graph
    inits = {t.name: t for t in graph.initializer}
    shared: dict[str, TensorProto] = {}
    replaced: dict[str, TensorProto] = {}
    new_nodes: list[onnx.NodeProto] = []
    layers: dict[str, dict] = {}
    codebooks: dict[str, int] = {}  # bytes of each LiftQuant configuration's M, stored once
    decoded = set()
    for layer, fmt_name in plan.items():
        site = sites[layer]
        init = inits[site.initializer]
        weight = numpy_helper.to_array(init).astype(np.float32)
        if wf.resolve(fmt_name).dtype == "float32":  # stored as it is: nothing to decode
            layers[layer] = _layer_entry(fmt_name, weight.shape, weight.nbytes, 0)
            continue
        nodes, own, layers[layer], codebook = _weight_nodes(site, fmt_name, weight, init.data_type)
        if codebook:
            codebooks[fmt_name] = codebook
        for tensor in own:
            if tensor.name.startswith(PREFIX):
                if tensor.name in shared and shared[tensor.name].raw_data != tensor.raw_data:
                    raise AssertionError(f"shared constant {tensor.name} differs between layers")
                shared.setdefault(tensor.name, tensor)
            else:
                replaced[tensor.name] = tensor
        new_nodes.extend(nodes)
        decoded.add(site.initializer)
        del inits[site.initializer]

    clash = (set(shared) | set(replaced)) & set(inits)
    if clash:
        raise ValueError(f"the exported graph already has initializers named {sorted(clash)}")
    kept = [t for t in graph.initializer if t.name in inits]
    del graph.initializer[:]
    graph.initializer.extend(kept + list(replaced.values()) + list(shared.values()))
    kept_inputs = [i for i in graph.input if i.name not in decoded]
    del graph.input[:]
    graph.input.extend(kept_inputs)
    old_nodes = list(graph.node)
    del graph.node[:]
    graph.node.extend(new_nodes + old_nodes)
    kept_props = [p for p in onnx_model.metadata_props if p.key != PLAN_KEY]  # a file edgekit exported before
    del onnx_model.metadata_props[:]
    onnx_model.metadata_props.extend(kept_props)
    onnx_model.metadata_props.append(onnx.StringStringEntryProto(key=PLAN_KEY, value=json.dumps(plan, sort_keys=True)))

    try:
        onnx.checker.check_model(onnx_model, full_check=True)
    except Exception as error:
        raise ValueError(f"the exported ONNX model of {label} fails onnx.checker: {describe_error(error)}") from error
    if onnx_model.ByteSize() > MAX_PROTO_BYTES:
        raise ValueError(f"the exported model is {onnx_model.ByteSize()} bytes, over protobuf's 2 GiB limit "
                         f"for one file (external data is not supported)")
    data = onnx_model.SerializeToString()
    atomic_write(target, data)

    totals = {
        "layers": len(layers),
        "numel": sum(e["numel"] for e in layers.values()),
        "codes_bytes": sum(e["codes_bytes"] for e in layers.values()),
        "scales_bytes": sum(e["scales_bytes"] for e in layers.values()),
        "tensor_scale_bytes": sum(e["tensor_scale_bytes"] for e in layers.values()),
        "codebook_bytes": sum(codebooks.values()),
        "fp32_bytes": 4 * sum(e["numel"] for e in layers.values()),
        "file_bytes": len(data),
    }
    totals["weight_bytes"] = (totals["codes_bytes"] + totals["scales_bytes"] + totals["tensor_scale_bytes"]
                              + totals["codebook_bytes"])
    totals["weight_bits"] = 8.0 * totals["weight_bytes"] / totals["numel"] if totals["numel"] else 0.0
    opset = next((o.version for o in onnx_model.opset_import if o.domain in ("", "ai.onnx")), None)
    return {"path": str(target), "opset": opset, "layers": layers, "totals": totals}
