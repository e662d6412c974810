"""Stage 1, import: a torch module (through ``torch.export``) or an ONNX file into TVM Relax.

The result keeps every parameter as a function input with its value beside it, and
names the weights a plan may quantize by layer, so ``lower`` can swap them for
packed codes before anything is bound as a constant.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from .errors import describe_error
from .onnx_graph import read_onnx, weight_sites


@dataclass
class ImportedModel:
    """A Relax module whose ``main`` takes the model inputs, then the parameters."""

    mod: object  # tvm.IRModule
    params: dict[str, np.ndarray]  # parameter variable name -> value
    layers: dict[str, str]  # layer name -> variable name of its weight
    inputs: list[dict]  # [{"name", "shape", "dtype"}]
    outputs: list[dict]  # [{"shape", "dtype"}]; a symbolic dim is its name
    source: str  # "torch" or "onnx"
    max_batch: int | None = None  # the largest batch a symbolic batch dim may take; None: shapes are static


BATCH = "batch"  # the name of a symbolic batch dim


def _dim(d):
    from tvm import tirx

    return int(d) if isinstance(d, tirx.IntImm) else str(d)


def _signature(mod, num_inputs: int) -> tuple[list[dict], list[dict]]:
    func = mod["main"]
    inputs = [{"name": p.name, "shape": [_dim(d) for d in p.ty.shape], "dtype": str(p.ty.dtype)}
              for p in func.params[:num_inputs]]
    ret = func.ret_ty
    fields = list(ret.fields) if hasattr(ret, "fields") else [ret]
    outputs = [{"shape": [_dim(d) for d in t.shape], "dtype": str(t.dtype)} for t in fields]
    return inputs, outputs


def bound_batch(mod, max_batch: int | None):
    """``mod`` whose main states the largest value of each symbolic dim, so memory is planned for it."""
    if max_batch is None:
        return mod
    from tvm import tirx

    symbols = {str(d) for p in mod["main"].params for d in getattr(p.ty, "shape", []) if isinstance(d, tirx.Var)}
    if not symbols:
        return mod
    mod["main"] = mod["main"].with_attr("tir_var_upper_bound", dict.fromkeys(sorted(symbols), max_batch))
    return mod


def check_max_batch(max_batch) -> int | None:
    if max_batch is not None and (isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1):
        raise ValueError(f"max_batch must be a positive integer (or None for the example's fixed batch), "
                         f"got {max_batch!r}")
    return max_batch


def _detach(mod, num_inputs: int) -> tuple[object, dict[str, np.ndarray]]:
    from tvm import relax

    mod, params = relax.frontend.detach_params(mod)
    names = [p.name for p in mod["main"].params[num_inputs:]]
    values = [p.numpy() for p in params.get("main", [])]
    return mod, dict(zip(names, values, strict=True))


def import_torch(model, example_inputs: tuple, max_batch: int | None = None) -> ImportedModel:
    """``torch.export`` the module in eval mode and translate it to Relax.

    ``max_batch``: every input's first dim becomes one symbolic batch of 1 to ``max_batch``
    (the example's batch is then only a sample); None keeps the example's shapes.
    """
    import torch
    from tvm.relax.frontend.torch import from_exported_program

    from .plan import plannable_layers

    if not isinstance(example_inputs, tuple) or not example_inputs:
        raise ValueError("example_inputs must be a non-empty tuple of tensors")
    model = model.eval()
    dynamic = None
    if check_max_batch(max_batch) is not None and max_batch > 1:
        # torch specializes a size of 1, so the traced sample has a batch of 2
        example_inputs = tuple(x[:1].expand(2, *x.shape[1:]).contiguous() for x in example_inputs)
        batch = torch.export.Dim(BATCH, min=1, max=max_batch)
        dynamic = tuple({0: batch} for _ in example_inputs)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = torch.export.export(model, example_inputs, dynamic_shapes=dynamic)
    except Exception as err:  # torch raises many exception types here
        raise ValueError(f"torch.export could not trace {type(model).__name__}: {describe_error(err)}") from err
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            mod = from_exported_program(program, keep_params_as_input=True)
    except Exception as err:  # the frontend raises on ops it has no translation for
        raise ValueError(f"TVM cannot import {type(model).__name__}: {describe_error(err)}") from err
    mod, params = _detach(mod, len(example_inputs))
    to_fqn = program.graph_signature.inputs_to_parameters
    layers = {}
    for layer in plannable_layers(model):
        var = next((v for v, fqn in to_fqn.items() if fqn == f"{layer}.weight"), None)
        if var in params:
            layers[layer] = var
    inputs, outputs = _signature(mod, len(example_inputs))
    return ImportedModel(bound_batch(mod, max_batch), params, layers, inputs, outputs, "torch",
                         max_batch if dynamic else None)


def import_onnx(model, sites: dict | None = None, max_batch: int | None = None) -> ImportedModel:
    """An ONNX graph (a path or a ``ModelProto``, see ``onnx_graph``) into Relax.

    ``sites``: the weights a plan may quantize (``onnx_graph.weight_sites``, found when not
    given); those TVM's lowering can take (MatMul, Gemm, Conv) become layers.
    ``max_batch``: the largest value of the graph's symbolic batch dim, if it has one.
    """
    import onnx
    from tvm.relax.frontend.onnx import from_onnx


    if not isinstance(model, onnx.ModelProto):
        model = read_onnx(model)
    if sites is None:
        sites, _ = weight_sites(model)
    initializers = {i.name for i in model.graph.initializer}
    graph_inputs = [i for i in model.graph.input if i.name not in initializers]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mod = from_onnx(model, keep_params_in_input=True)
    except Exception as err:  # the frontend raises on unsupported ops
        raise ValueError(f"TVM cannot import the ONNX graph: {describe_error(err)}") from err
    mod, params = _detach(mod, len(graph_inputs))
    layers = {}
    for layer, site in sites.items():
        var = site.initializer.removeprefix("onnx::")  # the frontend's name for an initializer's variable
        if site.op != "Gather" and var in params:
            layers[layer] = var
    inputs, outputs = _signature(mod, len(graph_inputs))
    symbolic = any(isinstance(d, str) for i in inputs for d in i["shape"])
    return ImportedModel(bound_batch(mod, max_batch if symbolic else None), params, layers, inputs, outputs, "onnx",
                         check_max_batch(max_batch) if symbolic else None)
