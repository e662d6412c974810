"""Stage 2, plan: which layer's weight is stored in which format.

A plan maps module names (``model.named_modules()``) of Linear and Conv layers to a
weight format: a block format from the simulators' table (``mxfp4``, ``nvfp4`` ...),
a LiftQuant configuration (``liftquant_24to10``; ``liftquant:2.4`` picks one by its code
bits; Linear layers only) or one of the float baselines ``fp32`` / ``fp16``. Every pass
downstream (lowering, ONNX export, manifests) reads the plan, so it is plain data.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from torch import nn

from edgekit.simulators import BlockFormat
from edgekit.simulators import weight_formats as wf

BASELINES = tuple(wf.weight_format_names("float"))
PLANNED_LAYERS = (nn.Linear, nn.Conv1d, nn.Conv2d)


def weight_format_names() -> list[str]:
    """Every fixed name a plan entry may hold (the weight-format table's)."""
    return wf.weight_format_names()


def check_weight_format(name: str) -> str:
    """The canonical name of a plan entry (``mxfp8`` -> ``mxfp8_e4m3``), or a clear error."""
    return wf.canonical_name(name)


def block_format(name: str) -> BlockFormat | None:
    """The simulators' block format of a plan entry; None for the float and LiftQuant rows."""
    return wf.resolve(name).block


def is_liftquant(name: str) -> bool:
    """Whether a (checked) plan entry is a LiftQuant configuration rather than a block format."""
    return wf.resolve(name).family == "liftquant"


def plannable_layers(model: nn.Module) -> dict[str, nn.Module]:
    """The Linear/Conv modules of ``model`` by name: what a plan may quantize."""
    return {name: m for name, m in model.named_modules() if isinstance(m, PLANNED_LAYERS)}


def make_plan(model: nn.Module | Iterable[str], default: str = "mxfp4",
              overrides: Mapping[str, str] | None = None) -> dict[str, str]:
    """Every Linear/Conv weight gets ``default``; ``overrides`` names layers that differ.

    ``model`` is a torch module or the layer names of an imported model
    (``ImportedModel.layers``).

    A layer whose input-channel count is not a multiple of the format's block size is
    still planned: the codecs pad its last block, and the lowering handles the tail.
    """
    default = check_weight_format(default)
    layers = list(plannable_layers(model) if isinstance(model, nn.Module) else model)
    plan = dict.fromkeys(layers, default)
    plan.update(check_plan(layers, overrides or {}, what="plan override"))
    return plan


def check_plan(layers: Iterable[str], plan: Mapping[str, str], what: str = "plan") -> dict[str, str]:
    """``plan`` with canonical format names, or an error naming a layer not among ``layers``."""
    layers = list(layers)
    checked = {}
    for layer, fmt in plan.items():
        if layer not in layers:
            known = ", ".join(layers) or "(none)"
            raise ValueError(f"{what} names layer {layer!r}, which is not a Linear/Conv layer of "
                             f"the model; layers: {known}")
        checked[layer] = check_weight_format(fmt)
    return checked


def parse_overrides(items: list[str]) -> dict[str, str]:
    """``["fc1=mxint8", "head=fp16"]`` -> ``{"fc1": "mxint8", "head": "fp16"}`` (CLI ``--layer``)."""
    out = {}
    for item in items:
        layer, sep, fmt = item.partition("=")
        if not sep or not layer.strip() or not fmt.strip():
            raise ValueError(f"layer override {item!r} must look like NAME=FORMAT (e.g. fc1=mxint8)")
        out[layer.strip()] = fmt.strip()
    return out


def read_codes(path, layers) -> dict:
    """LiftQuant tensors by layer from an ``edgekit quantize --codes`` file, checked against ``layers``;
    a plan takes their formats for those layers."""
    from edgekit.simulators.liftquant import load_tensors

    try:
        tensors = load_tensors(path)
    except (OSError, ValueError, KeyError) as err:
        raise ValueError(f"--codes {str(path)!r} is not a codes file written by `edgekit quantize --codes`: "
                         f"{type(err).__name__}: {err}") from None
    strange = sorted(set(tensors) - set(layers))
    if strange:
        raise ValueError(f"--codes {str(path)!r} codes layers {', '.join(strange)} that the model does not have "
                         f"(its layers: {', '.join(layers)})")
    return tensors
