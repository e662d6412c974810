"""Pass 1, import: a torch module (through ``torch.export``) or an ONNX file into TVM Relax.

The result keeps every parameter as a function input with its value beside it, and
names the weights a plan may quantize by layer, so ``lower`` can swap them for
packed codes before anything is bound as a constant.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

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


def import_onnx(model, sites: dict | None = None) -> ImportedModel:
    """An ONNX graph (a path or a ``ModelProto`` with static input shapes, see ``onnx_graph``) into Relax.

    ``sites``: the weights a plan may quantize (``onnx_graph.weight_sites``, found when not
    given); those TVM's lowering can take (MatMul, Gemm, Conv) become layers.
    """
    import onnx
    from tvm.relax.frontend.onnx import from_onnx

    from .onnx_graph import read_onnx, weight_sites

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
    return ImportedModel(mod, params, layers, inputs, outputs, "onnx")



def describe_error(err: BaseException) -> str:
    """``Type: first line of the message``: what a library's exception says, in one line."""
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0] if text else ''}"
