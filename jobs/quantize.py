"""``edgekit quantize``: LiftQuant a model to a bit-width, a size, or a target's memory.

Passes, each a function of plain inputs:

1. :func:`calibrate`: run the model's own training loss on a few seeded batches (train
   split) and collect, per Linear layer, the input second moment ``E[x x^T]`` and the
   mean squared loss gradient per output channel (a diagonal Fisher weight); keep the
   model inputs as calibration batches.
2. :func:`sensitivities`: for every layer and candidate configuration, the Fisher-weighted
   output error ``sum_n F_n ((W - W_hat) E[x x^T] (W - W_hat)^T)_nn`` measured by coding a
   seeded sample of rows, and the exact bytes the whole layer would take.
3. :func:`plan`: the knapsack (:mod:`edgekit.simulators.liftquant.budget`) picks one
   configuration per layer so that bits/weight or bytes land within 1% below the request.
4. :func:`quantize_units`: code each layer (input multipliers chosen per layer from
   activation RMS), then fine-tune codes and scales unit by unit (a transformer block,
   or a lone layer) on block-output MSE, inputs from the already-quantized model and
   targets from the float one.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from edgekit.simulators import formats
from edgekit.simulators.liftquant import (
    LiftQuantTensor,
    awq_input_scales,
    codebook_bytes,
    layer_nbytes,
    output_error,
    quantize,
    save_tensors,
)
from edgekit.simulators.liftquant.budget import TOLERANCE, Choice, Option, choose
from edgekit.simulators.liftquant.finetune import finetune_unit

SIZE_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30}
ALPHAS = (0.0, 0.25, 0.5)  # input-multiplier strengths tried per layer
SAMPLE_ROWS = 32  # rows per layer coded for the sensitivity estimate


def parse_size(text: str) -> int:
    """``"300MB"``, ``"1.5GiB"``, ``"123456"`` -> bytes (decimal kB/MB/GB, binary KiB/MiB/GiB)."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(text))
    unit = match.group(2).lower() if match else ""
    if not match or unit not in SIZE_UNITS and unit != "":
        raise ValueError(f"budget must be a size such as 300MB, 1.5GiB or 123456 (units: B, kB, MB, GB, KiB, MiB, "
                         f"GiB), got {text!r}")
    return int(float(match.group(1)) * SIZE_UNITS.get(unit or "b"))


def linear_layers(model: nn.Module) -> dict[str, nn.Linear]:
    """The Linear layers LiftQuant codes, by module name (Conv weights stay float)."""
    return {name: m for name, m in model.named_modules() if isinstance(m, nn.Linear)}


@dataclass
class LayerStats:
    gram: np.ndarray  # E[x x^T] (K, K)
    act_rms: np.ndarray  # sqrt(diag(gram))
    fisher: np.ndarray  # mean squared loss gradient per output channel (N,)


def calibrate(entry, config, model: nn.Module, batches: int, seed: int) -> tuple[dict[str, LayerStats], list]:
    """(statistics per Linear layer, model inputs of each batch) from the model's training loss."""
    layers = linear_layers(model)
    spec = entry.train_spec(config)
    sums = {name: [0.0, 0.0, 0] for name in layers}  # gram, grad^2 sum, rows seen
    inputs = []
    hooks = [model.register_forward_pre_hook(
        lambda m, args, kwargs: inputs.append((tuple(a.detach() for a in args), dict(kwargs))), with_kwargs=True)]
    for name, layer in layers.items():
        def forward_hook(m, args, out, name=name):
            x = args[0].detach().reshape(-1, args[0].shape[-1]).double()
            sums[name][0] = sums[name][0] + x.T @ x
            sums[name][2] += x.shape[0]
            if out.requires_grad:
                out.register_hook(lambda g, name=name: accumulate_grad(name, g))

        def accumulate_grad(name, g):
            g = g.detach().reshape(-1, g.shape[-1]).double()
            sums[name][1] = sums[name][1] + (g * g).sum(0)

        hooks.append(layer.register_forward_hook(forward_hook))
    model.eval()
    try:
        for b in range(batches):
            model.zero_grad()
            torch.manual_seed(seed + b)
            spec.loss(model, np.random.default_rng([seed, b]), b).backward()
    finally:
        for h in hooks:
            h.remove()
        model.zero_grad()
    stats = {}
    for name, (gram, grad2, rows) in sums.items():
        g = (gram / rows).numpy()
        stats[name] = LayerStats(g, np.sqrt(np.diag(g)), (grad2 / rows).numpy())
    return stats, inputs


def sample_rows(rows: int, seed: int) -> np.ndarray:
    return np.sort(np.random.default_rng(seed).choice(rows, min(rows, SAMPLE_ROWS), replace=False))


def weighted_error(w: np.ndarray, q: LiftQuantTensor, stats: LayerStats, rows: np.ndarray) -> float:
    """Fisher-weighted output error of the sampled ``rows``, scaled to the whole layer."""
    err = output_error(w, q.dequantize(), stats.gram)
    return float((stats.fisher[rows] * err).sum() * stats.fisher.size / len(rows))


def layer_options(shapes: dict[str, tuple], candidates: list[str], group_size: int | None) -> dict[str, list[Option]]:
    """Options per layer (its weight's (out, in) shape) with their exact bytes and no cost yet: enough to
    check a request."""
    return {name: [Option(c, layer_nbytes(formats.get_liftquant_format(c), tuple(shape), group_size=group_size,
                                          input_scales=True), 0.0) for c in candidates]
            for name, shape in shapes.items()}


def float_rows(layers: dict[str, nn.Linear]) -> dict[str, np.ndarray]:
    """Each Linear layer's weight (out, in) in float64: what LiftQuant codes."""
    return {name: layer.weight.detach().double().numpy() for name, layer in layers.items()}


def sensitivities(weights: dict[str, np.ndarray], stats: dict[str, LayerStats], options: dict[str, list[Option]], *,
                  group_size: int | None, seed: int, log: Callable[[str], None]) -> dict[str, list[Option]]:
    """The options with their cost: the Fisher-weighted output error, from a seeded sample of rows."""
    costed = {}
    for li, (name, w) in enumerate(weights.items()):
        rows = sample_rows(w.shape[0], seed + li)
        costed[name] = [dataclasses.replace(o, cost=weighted_error(
            w[rows], quantize(w[rows], o.format, group_size=group_size, seed=seed), stats[name], rows))
            for o in options[name]]
        log(f"sensitivity {name} {tuple(w.shape)}: " + ", ".join(f"{o.format.removeprefix('liftquant_')} {o.cost:.3g}"
                                                               for o in costed[name]))
    return costed


def plan(options: dict[str, list[Option]], *, total_weights: int, bits: float | None = None,
         budget_bytes: int | None = None, fixed_bytes: int = 0, ceiling: bool = False) -> Choice:
    """The knapsack for ``bits`` per quantized weight, or for a model of ``budget_bytes`` (float parts
    included as ``fixed_bytes``), landing within 1% below it; with ``ceiling`` (a target's
    memory) anywhere below it. Raises ValueError for a request no configuration can meet."""
    books = {f.name: codebook_bytes(f) for f in (formats.get_liftquant_format(o.format)
                                                 for o in next(iter(options.values())))}
    if bits is not None:
        lowest = sum(min(o.nbytes for o in opts) for opts in options.values()) * 8 / total_weights
        highest = (sum(max(o.nbytes for o in opts) for opts in options.values()) + sum(books.values())) * 8 \
            / total_weights
        if not lowest <= bits <= highest:
            raise ValueError(f"--bits {bits} is out of reach: these layers take {lowest:.3f} to {highest:.3f} bits "
                             "per weight with the candidate configurations (scales and codebooks included)")
        return choose(options, bits * total_weights / 8, books)
    room = budget_bytes - fixed_bytes
    if room <= 0:
        raise ValueError(f"the budget of {budget_bytes} bytes does not even hold the model's float parameters "
                         f"({fixed_bytes} bytes), let alone the smallest encoding")
    return choose(options, room, books, tolerance=1.0 if ceiling else TOLERANCE)


def units_of(model: nn.Module, layer_names: list[str]) -> list[tuple[str, list[str]]]:
    """Fine-tuning units: each block of ``model.blocks`` with its layers, then every other layer alone."""
    units = []
    blocks = getattr(model, "blocks", None)
    taken = set()
    if isinstance(blocks, nn.ModuleList):
        for i in range(len(blocks)):
            inside = [n for n in layer_names if n.startswith(f"blocks.{i}.")]
            if inside:
                units.append((f"blocks.{i}", inside))
                taken.update(inside)
    units += [(n, [n]) for n in layer_names if n not in taken]
    return units


def parameter_paths(unit_name: str, names: list[str]) -> dict[str, str]:
    """Layer name -> the path of its weight inside the unit (``"attn.q.weight"``, or ``"weight"`` for a lone layer)."""
    if names == [unit_name]:
        return {unit_name: "weight"}
    return {n: n.removeprefix(unit_name + ".") + ".weight" for n in names}


def capture(model: nn.Module, unit_name: str, batches: list, *, outputs: bool) -> list:
    """The (args, kwargs) a unit receives, or its outputs, over the calibration batches."""
    unit = model.get_submodule(unit_name)
    seen = []
    if outputs:
        hook = unit.register_forward_hook(lambda m, args, out: seen.append(out.detach()))
    else:
        hook = unit.register_forward_pre_hook(
            lambda m, args, kwargs: seen.append((tuple(a.detach() for a in args), dict(kwargs))), with_kwargs=True)
    try:
        with torch.no_grad():
            for args, kwargs in batches:
                model(*args, **kwargs)
    finally:
        hook.remove()
    return seen


def choose_input_scales(w: np.ndarray, fmt, stats: LayerStats, *, group_size, seed: int) -> tuple[float, np.ndarray]:
    """(alpha, multipliers) with the lowest output error on a sample of rows, among :data:`ALPHAS`."""
    rows = sample_rows(w.shape[0], seed)
    best = None
    for alpha in ALPHAS:
        m = awq_input_scales(stats.act_rms, alpha)
        q = quantize(w[rows], fmt, input_scales=m, group_size=group_size, seed=seed)
        err = float(output_error(w[rows], q.dequantize(), stats.gram).sum())
        if best is None or err < best[0]:
            best = (err, alpha, m)
    return best[1], best[2]


def code_layer(name: str, w: np.ndarray, config: str, stats: LayerStats, *, group_size: int | None, seed: int,
               log: Callable[[str], None]) -> tuple[LiftQuantTensor, dict]:
    """One layer's weight (out, in) in LiftQuant ``config``, with the input multipliers that serve it best."""
    fmt = formats.get_liftquant_format(config)
    alpha, m = choose_input_scales(w, fmt, stats, group_size=group_size, seed=seed)
    tensor = quantize(w, fmt, input_scales=m, group_size=group_size, seed=seed)
    if tensor.padding:
        log(f"{name}: {w.shape[1]} inputs are not a multiple of d={fmt.chunk}: padded with {tensor.padding} "
            "zero columns")
    return tensor, {"alpha": alpha}


def quantize_units(model: nn.Module, choice: dict[str, str], stats: dict[str, LayerStats], batches: list, *,
                   group_size: int | None, finetune_steps: int, seed: int,
                   log: Callable[[str], None]) -> tuple[nn.Module, dict[str, LiftQuantTensor], dict[str, dict]]:
    """(model with simulated LiftQuant weights, tensors, per-layer notes), unit by unit (see module docstring)."""
    qmodel = copy.deepcopy(model).eval()
    tensors, notes = {}, {}
    for unit_name, names in units_of(model, list(choice)):
        start = time.perf_counter()
        for name in names:
            w = model.get_submodule(name).weight.detach().double().numpy()
            tensors[name], notes[name] = code_layer(name, w, choice[name], stats[name], group_size=group_size,
                                                    seed=seed, log=log)
        summary = {"start_loss": None, "final_loss": None, "steps": 0}
        if finetune_steps:
            inputs = capture(_with_weights(qmodel, tensors, names), unit_name, batches, outputs=False)
            targets = capture(model, unit_name, batches, outputs=True)
            paths = parameter_paths(unit_name, names)
            tuned, summary = finetune_unit(qmodel.get_submodule(unit_name), {paths[n]: tensors[n] for n in names},
                                           inputs, targets, steps=finetune_steps, seed=seed)
            tensors.update({n: tuned[paths[n]] for n in names})
        _with_weights(qmodel, tensors, names)
        for n in names:
            notes[n].update({"unit": unit_name, "unit_error_before": summary["start_loss"],
                             "unit_error_after": summary["final_loss"]})
        log(f"{unit_name}: {len(names)} layer(s) coded"
            + (f", block error {summary['start_loss']:.4g} -> {summary['final_loss']:.4g}" if finetune_steps else "")
            + f" ({time.perf_counter() - start:.0f} s)")
    return qmodel, tensors, notes


def _with_weights(model: nn.Module, tensors: dict[str, LiftQuantTensor], names: list[str]) -> nn.Module:
    """Write the simulated weights of ``names`` into ``model`` (in place); returns it."""
    with torch.no_grad():
        for n in names:
            model.get_submodule(n).weight.copy_(torch.from_numpy(tensors[n].dequantize()))
    return model


def float_bytes(model: nn.Module, quantized: list[str]) -> int:
    """Bytes of every parameter LiftQuant leaves float (float32), i.e. all but the coded weights."""
    coded = {id(model.get_submodule(n).weight) for n in quantized}
    return sum(p.numel() * p.element_size() for p in model.parameters() if id(p) not in coded)


def target_memory(target: str) -> int:
    from edgekit.targets import load_target

    t = load_target(target)
    if not t.memory_bytes:
        raise ValueError(f"target {target!r} does not state its memory; pass --budget instead")
    return int(t.memory_bytes)


def quantize_model(entry, config, model: nn.Module, *, bits: float | None = None, budget_bytes: int | None = None,
                   ceiling: bool = False, candidates: list[str] | None = None, group_size: int | None = None,
                   calibration_batches: int = 8, finetune_steps: int = 200, seed: int = 0,
                   log: Callable[[str], None] = print) -> tuple[dict, nn.Module, dict[str, LiftQuantTensor]]:
    """The whole job on a loaded model: (result, quantized model, LiftQuant tensors); see the module docstring.

    ``ceiling``: ``budget_bytes`` is a memory to stay under (a target's), not a size to land on.
    """
    if (bits is None) == (budget_bytes is None):
        raise ValueError("give exactly one of bits or budget_bytes")
    names = [formats.get_liftquant_format(c).name for c in (candidates or formats.LIFTQUANT_FORMATS)]
    layers = linear_layers(model)
    if not layers:
        raise ValueError(f"model {entry.name!r} has no Linear layers for LiftQuant to code")
    total_weights = sum(layer.weight.numel() for layer in layers.values())
    fixed = float_bytes(model, list(layers))
    request = {"total_weights": total_weights, "bits": bits, "budget_bytes": budget_bytes, "fixed_bytes": fixed,
               "ceiling": ceiling}
    options = layer_options({name: tuple(layer.weight.shape) for name, layer in layers.items()}, names, group_size)
    plan(options, **request)  # a request no configuration can meet is refused before any work
    start = time.perf_counter()
    stats, batches = calibrate(entry, config, model, calibration_batches, seed)
    log(f"calibrated {len(layers)} layers on {len(batches)} batches")
    options = sensitivities(float_rows(layers), stats, options, group_size=group_size, seed=seed, log=log)
    choice = plan(options, **request)
    chosen = {name: opt.format for name, opt in choice.layers.items()}
    qmodel, tensors, notes = quantize_units(model, chosen, stats, batches, group_size=group_size,
                                            finetune_steps=finetune_steps, seed=seed, log=log)
    used = {t.format.name: t.format for t in tensors.values()}
    quantized_bytes = sum(t.nbytes for t in tensors.values()) + sum(codebook_bytes(f) for f in used.values())
    rows = [{"layer": name, "shape": list(t.shape), "format": t.format.name, "bits/weight": t.bits_per_weight,
             "bytes": t.nbytes, "padding": t.padding, "sensitivity": choice.layers[name].cost, **notes[name]}
            for name, t in tensors.items()]
    metrics_float = entry.evaluate(model, config)
    metrics_quant = entry.evaluate(qmodel, config)
    totals = {
        "weights": total_weights,
        "quantized_bytes": quantized_bytes,
        "codebook_bytes": quantized_bytes - sum(t.nbytes for t in tensors.values()),
        "bits_per_weight": 8 * quantized_bytes / total_weights,
        "float_bytes": fixed,
        "model_bytes": quantized_bytes + fixed,
        "requested_bits": bits,
        "requested_bytes": budget_bytes,
        "planned_cost": choice.cost,
        "seconds": round(time.perf_counter() - start, 1),
    }
    result = {"layers": rows, "totals": totals, "metric": entry.metric,
              "float": metrics_float, "quantized": metrics_quant,
              "settings": {"candidates": names, "group_size": group_size, "calibration_batches": calibration_batches,
                           "finetune_steps": finetune_steps, "seed": seed}}
    return result, qmodel, tensors


def graph_statistics(graph, sites: dict, feeds: dict[str, np.ndarray]) -> dict[str, LayerStats]:
    """Per 2-D weight of an ONNX graph, the second moment of what it multiplies, from one onnxruntime run on
    ``feeds``. A graph has no loss to differentiate: every output channel weighs the same."""
    from edgekit.compilers.onnx_export import onnx_session
    from edgekit.compilers.onnx_graph import with_outputs

    names = [site.activation for site in sites.values()]
    session = onnx_session(with_outputs(graph, names).SerializeToString())
    values = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds), strict=True))
    stats = {}
    for layer, site in sites.items():
        x = values[site.activation].reshape(-1, values[site.activation].shape[-1]).astype(np.float64)
        gram = x.T @ x / len(x)
        rows = site.shape[0] if site.axis == 1 else site.shape[1]
        stats[layer] = LayerStats(gram, np.sqrt(np.diag(gram)), np.ones(rows))
    return stats


def quantize_graph(source, feeds: dict[str, np.ndarray], *, bits: float | None = None, budget_bytes: int | None = None,
                   ceiling: bool = False, candidates: list[str] | None = None, group_size: int | None = None,
                   seed: int = 0, log: Callable[[str], None] = print) -> tuple[dict, dict[str, LiftQuantTensor]]:
    """LiftQuant the MatMul/Gemm weights of a model file (``compile_job.resolve_model``) calibrated on ``feeds``.

    The same passes as :func:`quantize_model` without the model's loss and fine-tuning,
    which a graph does not bring: statistics from an onnxruntime run, the knapsack on
    the output error, input multipliers per layer. Scored as the output's agreement with
    float (``simulators.metrics.output_agreement``) on the same inputs.
    """
    from edgekit.compilers.onnx_export import onnx_session
    from edgekit.compilers.onnx_graph import weight_rows, with_weights
    from edgekit.simulators.metrics import output_agreement

    sites = {name: site for name, site in source.sites.items() if site.activation and len(site.shape) == 2}
    if not sites:
        raise ValueError(f"{source.label} has no MatMul/Gemm weight for LiftQuant to code")
    names = [formats.get_liftquant_format(c).name for c in (candidates or formats.LIFTQUANT_FORMATS)]
    weights = {name: weight_rows(source.graph, site) for name, site in sites.items()}
    total_weights = sum(w.size for w in weights.values())
    coded = {site.initializer for site in sites.values()}
    fixed = sum(4 * math.prod(t.dims) for t in source.graph.graph.initializer if t.name not in coded)  # as float32
    request = {"total_weights": total_weights, "bits": bits, "budget_bytes": budget_bytes, "fixed_bytes": fixed,
               "ceiling": ceiling}
    options = layer_options({name: w.shape for name, w in weights.items()}, names, group_size)
    plan(options, **request)
    start = time.perf_counter()
    stats = graph_statistics(source.graph, sites, feeds)
    log(f"calibrated {len(sites)} layers on {len(next(iter(feeds.values())))} input rows")
    options = sensitivities(weights, stats, options, group_size=group_size, seed=seed, log=log)
    choice = plan(options, **request)
    tensors, notes = {}, {}
    for name, option in choice.layers.items():
        tensors[name], notes[name] = code_layer(name, weights[name], option.format, stats[name],
                                                group_size=group_size, seed=seed, log=log)
    used = {t.format.name: t.format for t in tensors.values()}
    quantized_bytes = sum(t.nbytes for t in tensors.values()) + sum(codebook_bytes(f) for f in used.values())
    session = onnx_session(source.graph.SerializeToString())
    simulated = onnx_session(with_weights(source.graph, {sites[n]: t.dequantize() for n, t in tensors.items()})
                             .SerializeToString())
    agreement = output_agreement(session.run(None, feeds)[0], simulated.run(None, feeds)[0])
    rows = [{"layer": name, "shape": list(t.shape), "format": t.format.name, "bits/weight": t.bits_per_weight,
             "bytes": t.nbytes, "padding": t.padding, "sensitivity": choice.layers[name].cost, **notes[name]}
            for name, t in tensors.items()]
    totals = {"weights": total_weights, "quantized_bytes": quantized_bytes,
              "codebook_bytes": quantized_bytes - sum(t.nbytes for t in tensors.values()),
              "bits_per_weight": 8 * quantized_bytes / total_weights, "float_bytes": fixed,
              "model_bytes": quantized_bytes + fixed, "requested_bits": bits, "requested_bytes": budget_bytes,
              "planned_cost": choice.cost, "seconds": round(time.perf_counter() - start, 1)}
    result = {"layers": rows, "totals": totals, "metric": "cosine", "float": {"cosine": 1.0}, "quantized": agreement,
              "settings": {"candidates": names, "group_size": group_size, "calibration": "onnxruntime run on --inputs",
                           "finetune_steps": 0, "seed": seed}}
    return result, tensors


def requested_bytes(bits: float | None, budget: str | None, target: str | None) -> int | None:
    """The byte budget of exactly one of --bits (None: a bit-width), --budget or --target."""
    if sum(x is not None for x in (bits, budget, target)) != 1:
        raise ValueError("give exactly one of --bits, --budget or --target")
    return parse_size(budget) if budget is not None else target_memory(target) if target else None


def run_quantize(model: str, *, bits: float | None = None, budget: str | None = None, target: str | None = None,
                 candidates: list[str] | None = None, group_size: int | None = None, calibration_batches: int = 8,
                 finetune_steps: int = 200, seed: int = 0, save: Path | None = None, codes: Path | None = None,
                 cache_dir=None, inputs: Path | None = None, grids: list[str] | None = None,
                 log: Callable[[str], None] = print) -> dict:
    """``edgekit quantize``: resolve MODEL, pick the request (bits, budget or target memory), run, save.

    MODEL as an ``.onnx`` or ``.pt2`` file is calibrated on ``inputs`` (an ``.npz`` keyed by
    input name; default: drawn float inputs) and not fine-tuned. GPTQ is :func:`.gptq_job.run_gptq`.
    """
    from edgekit.models.registry import save_checkpoint

    from .compile import GRAPH_SUFFIXES, resolve_model
    from .evaluate import resolve

    budget_bytes = requested_bytes(bits, budget, target)
    if grids:
        raise ValueError("--grids chooses GPTQ grids; pass --method gptq, or --configs for LiftQuant")
    if Path(model).suffix.lower() in GRAPH_SUFFIXES:
        from edgekit.compilers.onnx_export import onnx_session

        from .graph_eval import load_inputs

        if save:
            raise ValueError("--save writes a zoo checkpoint; for a model file use --codes, then "
                             "`edgekit compile MODEL --codes FILE` or `edgekit export`")
        source = resolve_model(model, seed, log, fix_shapes=False)
        feeds = load_inputs(inputs, onnx_session(source.graph.SerializeToString()), seed)
        result, tensors = quantize_graph(source, feeds, bits=bits, budget_bytes=budget_bytes,
                                         ceiling=target is not None, candidates=candidates, group_size=group_size,
                                         seed=seed, log=log)
        result["model"] = source.label
        result["totals"]["target"] = target
        if codes:
            save_tensors(codes, tensors)
            result["codes"] = str(codes)
        return result
    if inputs:
        raise ValueError("--inputs calibrates a model file (.onnx, .pt2); a zoo model calibrates on its training data")
    entry, config, module, _ = resolve(model, {}, cache_dir=cache_dir, log=log)
    result, qmodel, tensors = quantize_model(entry, config, module, bits=bits, budget_bytes=budget_bytes,
                                             ceiling=target is not None, candidates=candidates,
                                             group_size=group_size, calibration_batches=calibration_batches,
                                             finetune_steps=finetune_steps, seed=seed, log=log)
    result["model"] = entry.name
    result["totals"]["target"] = target
    if save:
        save_checkpoint(save, entry.name, config, qmodel)
        result["checkpoint"] = str(save)
    if codes:
        save_tensors(codes, tensors)
        result["codes"] = str(codes)
    return result


def result_rows(result: dict) -> list[dict]:
    """The per-layer table the CLI prints."""
    return [{k: r[k] for k in ("layer", "shape", "format", "bits/weight", "bytes", "padding", "alpha")}
            for r in result["layers"]]

