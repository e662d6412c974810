"""``edgekit quantize --method gptq``: GPTQ every Linear layer of a zoo model on one INT or MX grid.

Passes, each a function of plain inputs:

1. :func:`choose_grid`: among the candidate grids (INT2/3/4 with a float16 scale and zero
   per group of 64 or 128 inputs, MXINT4, MXFP4), the one that stores the most bytes
   within the request (bits per weight, a model size, or a target's memory). An integer
   width cannot land on an arbitrary budget: the rest of it stays unused.
2. :func:`edgekit.jobs.quantize.calibrate`: the input second moment ``E[x x^T]`` of every
   layer from the model's training loss on a few seeded batches (the Hessian GPTQ uses).
3. :func:`code_layer`: the seeded incoherence rotation of the input axis, optionally
   activation-aware input multipliers (the strength with the lowest calibration output
   error, as LiftQuant chooses them), then GPTQ (:mod:`edgekit.simulators.gptq`).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch import nn

from edgekit.simulators import gptq as gq
from edgekit.simulators.incoherence import Incoherence
from edgekit.simulators.liftquant import output_error

from .quantize import ALPHAS, calibrate, float_bytes, linear_layers, requested_bytes

GRIDS = [f"int{b}_g{g}" for b in gq.INT_BITS for g in (64, 128)] + list(gq.MX_FORMATS)


def grid_bytes(grid: gq.Grid, shapes: dict[str, tuple[int, int]], scaling: bool) -> int:
    return sum(gq.layer_nbytes(grid, shape, scales=scaling, rotate=True) for shape in shapes.values())


def choose_grid(shapes: dict[str, tuple[int, int]], grids: list[str], *, scaling: bool, bits: float | None = None,
                budget_bytes: int | None = None, fixed_bytes: int = 0, explicit: bool = False) -> gq.Grid:
    """The candidate grid with the most stored bytes within ``bits`` per weight or ``budget_bytes`` (the
    model, float parts included as ``fixed_bytes``). Grids whose group does not divide every layer are
    an error when the user named them (``explicit``), else left out."""
    usable = []
    for name in grids:
        grid = gq.grid_named(name)
        bad = {n: s[1] for n, s in shapes.items() if s[1] % grid.group_size}
        if bad and explicit:
            raise ValueError(f"grid {grid.name}: its group of {grid.group_size} inputs does not divide layer(s) "
                             + ", ".join(f"{n!r} ({w} inputs)" for n, w in bad.items())
                             + "; pick a grid with a smaller group (--grids)")
        if not bad:
            usable.append(grid)
    if not usable:
        raise ValueError(f"no grid among {', '.join(grids)} divides every layer's input width "
                         f"({sorted({s[1] for s in shapes.values()})})")
    weights = sum(s[0] * s[1] for s in shapes.values())
    room = bits * weights / 8 if bits is not None else budget_bytes - fixed_bytes
    sized = sorted(((grid_bytes(g, shapes, scaling), g) for g in usable), key=lambda t: t[0])
    fits = [(b, g) for b, g in sized if b <= room]
    if not fits:
        smallest = sized[0]
        raise ValueError(f"the request leaves {room:.0f} bytes for the quantized layers; the smallest grid, "
                         f"{smallest[1].name}, needs {smallest[0]} ({8 * smallest[0] / weights:.3f} bits per weight"
                         f"{', input multipliers included' if scaling else ''})")
    return fits[-1][1]


def code_layer(w: np.ndarray, gram: np.ndarray, grid: gq.Grid, *, scaling: bool, damp: float,
               seed: int) -> tuple[np.ndarray, float | None]:
    """(W_hat, AWQ strength or None): GPTQ of one weight (out, in) after the seeded rotation."""
    rotation = Incoherence(w.shape[1], seed)
    best = None
    for alpha in (ALPHAS if scaling else (None,)):
        m = None if alpha is None else gq.input_scales(gram, alpha)
        q = gq.quantize_layer(w, gram, grid, method="gptq", scales=m, rotation=rotation, damp=damp)
        err = float(output_error(w, q, gram).sum())
        if best is None or err < best[0]:
            best = (err, q, alpha)
    return best[1], best[2]


def quantize_gptq(entry, config, model: nn.Module, *, bits: float | None = None, budget_bytes: int | None = None,
                  grids: list[str] | None = None, scaling: bool = True, damp: float = gq.DAMP,
                  calibration_batches: int = 8, seed: int = 0,
                  log: Callable[[str], None] = print) -> tuple[dict, nn.Module]:
    """(result in the shape of ``quantize_job.quantize_model``'s, model with the simulated weights)."""
    layers = linear_layers(model)
    if not layers:
        raise ValueError(f"model {entry.name!r} has no Linear layers for GPTQ to quantize")
    if not damp > 0:
        raise ValueError(f"--damp must be positive, got {damp}")
    shapes = {name: tuple(layer.weight.shape) for name, layer in layers.items()}
    total_weights = sum(s[0] * s[1] for s in shapes.values())
    fixed = float_bytes(model, list(layers))
    grid = choose_grid(shapes, grids or GRIDS, scaling=scaling, bits=bits, budget_bytes=budget_bytes,
                       fixed_bytes=fixed, explicit=grids is not None)
    start = time.perf_counter()
    stats, batches = calibrate(entry, config, model, calibration_batches, seed)
    log(f"calibrated {len(layers)} layers on {len(batches)} batches; grid {grid.name}")
    qmodel = copy.deepcopy(model).eval()
    rows = []
    for name, layer in layers.items():
        w = layer.weight.detach().double().numpy()
        q, alpha = code_layer(w, stats[name].gram, grid, scaling=scaling, damp=damp, seed=seed)
        with torch.no_grad():
            qmodel.get_submodule(name).weight.copy_(torch.from_numpy(q.astype(np.float32)))
        nbytes = gq.layer_nbytes(grid, w.shape, scales=scaling, rotate=True)
        rows.append({"layer": name, "shape": list(w.shape), "format": f"gptq_{grid.name}",
                     "bits/weight": 8 * nbytes / w.size, "bytes": nbytes, "padding": 0, "alpha": alpha})
        log(f"{name} {tuple(w.shape)}: GPTQ {grid.name}" + (f", input scaling alpha {alpha}" if scaling else ""))
    quantized_bytes = sum(r["bytes"] for r in rows)
    totals = {"weights": total_weights, "quantized_bytes": quantized_bytes, "codebook_bytes": 0,
              "bits_per_weight": 8 * quantized_bytes / total_weights, "float_bytes": fixed,
              "model_bytes": quantized_bytes + fixed, "requested_bits": bits, "requested_bytes": budget_bytes,
              "seconds": round(time.perf_counter() - start, 1)}
    result = {"layers": rows, "totals": totals, "metric": entry.metric,
              "float": entry.evaluate(model, config), "quantized": entry.evaluate(qmodel, config),
              "settings": {"method": "gptq", "grid": grid.name, "candidates": grids or GRIDS,
                           "input_scaling": scaling, "damp": damp, "calibration_batches": calibration_batches,
                           "seed": seed}}
    return result, qmodel


def run_gptq(model: str, *, bits: float | None = None, budget: str | None = None, target: str | None = None,
             candidates=None, group_size=None, codes=None, inputs=None, grids: list[str] | None = None,
             input_scaling: bool = True, damp: float = 0.01, calibration_batches: int = 8, seed: int = 0,
             save: Path | None = None, cache_dir=None, log: Callable[[str], None] = print) -> dict:
    """``edgekit quantize --method gptq``: a zoo model, every Linear layer on the grid that fits the request.

    Options of LiftQuant (``candidates``, ``group_size``, ``codes``, model files) are refused by name.
    """
    from edgekit.models.registry import save_checkpoint

    from .compile import GRAPH_SUFFIXES
    from .evaluate import resolve

    budget_bytes = requested_bytes(bits, budget, target)

    if Path(model).suffix.lower() in GRAPH_SUFFIXES or inputs:
        raise ValueError("--method gptq calibrates a zoo model (name or checkpoint) on its training data; "
                         "a model file (.onnx, .pt2) takes --method liftquant")
    if candidates or group_size:
        raise ValueError("--configs and --group-size choose LiftQuant configurations; GPTQ takes --grids "
                         "(e.g. int4_g128,int3_g64,mxfp4)")
    if codes:
        raise ValueError("--codes writes LiftQuant's packed codes; with --method gptq use --save")
    entry, config, module, _ = resolve(model, {}, cache_dir=cache_dir, log=log)
    result, qmodel = quantize_gptq(entry, config, module, bits=bits, budget_bytes=budget_bytes, grids=grids,
                                   scaling=input_scaling, damp=damp, calibration_batches=calibration_batches,
                                   seed=seed, log=log)
    result["model"] = entry.name
    result["totals"]["target"] = target
    if save:
        save_checkpoint(save, entry.name, config, qmodel)
        result["checkpoint"] = str(save)
    return result
