"""Pass 1, import: a torch module (through ``torch.export``) or an ONNX file into TVM Relax.

The result keeps every parameter as a function input with its value beside it, and
names the weights a plan may quantize by layer, so ``lower`` can swap them for
packed codes before anything is bound as a constant.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass
class ImportedModel:
    """A Relax module whose ``main`` takes the model inputs, then the parameters."""

    mod: object  # tvm.IRModule
    params: dict[str, np.ndarray]  # parameter variable name -> value
    layers: dict[str, str]  # layer name -> variable name of its weight
    inputs: list[dict]  # [{"name", "shape", "dtype"}]
    outputs: list[dict]  # [{"shape", "dtype"}]
    source: str  # "torch" or "onnx"


def _signature(mod, num_inputs: int) -> tuple[list[dict], list[dict]]:
    func = mod["main"]
    inputs = [{"name": p.name, "shape": [int(d) for d in p.ty.shape], "dtype": str(p.ty.dtype)}
              for p in func.params[:num_inputs]]
    ret = func.ret_ty
    fields = list(ret.fields) if hasattr(ret, "fields") else [ret]
    outputs = [{"shape": [int(d) for d in t.shape], "dtype": str(t.dtype)} for t in fields]
    return inputs, outputs


def _detach(mod, num_inputs: int) -> tuple[object, dict[str, np.ndarray]]:
    from tvm import relax

    mod, params = relax.frontend.detach_params(mod)
    names = [p.name for p in mod["main"].params[num_inputs:]]
    values = [p.numpy() for p in params.get("main", [])]
    return mod, dict(zip(names, values, strict=True))


def import_torch(model, example_inputs: tuple) -> ImportedModel:
    """``torch.export`` the module in eval mode and translate it to Relax."""
    import torch
    from tvm.relax.frontend.torch import from_exported_program

    from .plan import plannable_layers

    if not isinstance(example_inputs, tuple) or not example_inputs:
        raise ValueError("example_inputs must be a non-empty tuple of tensors")
    model = model.eval()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = torch.export.export(model, example_inputs)
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
    return ImportedModel(mod, params, layers, inputs, outputs, "torch")


WEIGHT_OPS = {"MatMul": 1, "Gemm": 1, "Conv": 1}


def import_onnx(path) -> ImportedModel:
    """Read an ONNX file and translate it to Relax; weights of MatMul/Gemm/Conv become layers."""
    import onnx
    from tvm.relax.frontend.onnx import from_onnx

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"ONNX file {str(path)!r} does not exist")
    try:
        model = onnx.load(str(path))
        onnx.checker.check_model(model)
    except Exception as err:  # onnx raises DecodeError, ValidationError, ...
        raise ValueError(f"{path} is not a valid ONNX model: {describe_error(err)}") from err
    initializers = {i.name for i in model.graph.initializer}
    graph_inputs = [i for i in model.graph.input if i.name not in initializers]
    try:
        mod = from_onnx(model, keep_params_in_input=True)
    except Exception as err:  # the frontend raises on unsupported ops
        raise ValueError(f"TVM cannot import {path.name}: {describe_error(err)}") from err
    mod, params = _detach(mod, len(graph_inputs))
    sanitized = {_sanitize(name): name for name in initializers}
    layers = {}
    for node in model.graph.node:
        slot = WEIGHT_OPS.get(node.op_type)
        if slot is None or len(node.input) <= slot or node.input[slot] not in initializers:
            continue
        var = next((v for v in params if sanitized.get(v) == node.input[slot] or v == node.input[slot]), None)
        if var is not None and params[var].ndim in (2, 4):
            layers[node.input[slot].removesuffix(".weight")] = var
    inputs, outputs = _signature(mod, len(graph_inputs))
    return ImportedModel(mod, params, layers, inputs, outputs, "onnx")


def _sanitize(name: str) -> str:
    return re.sub(r"[^0-9a-zA-Z_]", "_", name)


def describe_error(err: BaseException) -> str:
    """``Type: first line of the message``: what a library's exception says, in one line."""
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0] if text else ''}"
