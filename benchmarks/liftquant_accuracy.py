"""Validation perplexity of the evaluation language model against bits per weight (run by hand).

    EDGEKIT_CACHE_DIR=/tmp/liftquant-cache python benchmarks/liftquant_accuracy.py \\
        [--config width=128 ...] [--finetune-steps 100] [-o benchmarks/results/liftquant_accuracy.json]

Every Linear weight of the LM (``edgekit.models.registry.train("lm", config)``, the default
config unless ``--config`` overrides it; the first call trains it) is quantized and
``lm.evaluate`` gives the validation perplexity:

* fp32;
* LiftQuant, one configuration for every layer (2.0 to 4.0 bits), with its incoherence
  rotation, input multipliers from activation statistics and least-squares scales, then
  with block-output fine-tuning; and mixed configurations chosen by the knapsack at
  requested bit-widths;
* MXFP4, MXINT4, NVFP4, and round-to-nearest INT2 / INT3 (asymmetric, one float16 scale
  and one float16 zero point per group of 64 inputs, the clipping ratio per group chosen
  from 1.0 down to 0.5 for the lowest squared error), all after the same incoherence
  rotation of each weight's input axis. Only LiftQuant gets input multipliers from the
  calibration here; ``gptq_liftquant.py`` gives them to every method, beside GPTQ.

Bits per weight count every stored byte: codes, scales, zero points, codebooks and
rotation side data. Each point is appended to the JSON as it finishes and a rerun skips
points already there (only in a file written by the same commit and LM config); the plot (PNG)
is redrawn at the end.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import time
from pathlib import Path

import numpy as np
import torch

from edgekit.jobs.quantize import calibrate, linear_layers, quantize_model, quantize_units
from edgekit.models import lm, registry
from edgekit.simulators import get_format, quantize_dequantize
from edgekit.simulators import quantize as block_quantize
from edgekit.simulators import weight_formats as wf
from edgekit.simulators.gptq import IntGrid, rtn
from edgekit.simulators.incoherence import Incoherence
from edgekit.simulators.liftquant import codebook_bytes
from edgekit.utils.files import atomic_write
from edgekit.utils.provenance import load_average, provenance, require_clean_tree

UNIFORM = ["16to8", "22to10", "24to10", "20to8", "22to8", "12to4", "14to4", "16to4"]
MIXED_BITS = [2.3, 3.2]
BLOCK_FORMATS = wf.names("block", lambda r: r.element_bits == 4)
RTN_BITS = [2, 3]
RTN_GROUP = 64


def rtn_group(w: np.ndarray, bits: int, group: int) -> np.ndarray:
    """Asymmetric round-to-nearest per group along axis 1, float16 scale and zero, clipping searched."""
    return rtn(w, IntGrid(bits, group))


def rotated(model, fn) -> torch.nn.Module:
    """A copy whose Linear weights are ``H^T fn(H w)`` row by row: the same rotation LiftQuant uses."""
    out = copy.deepcopy(model)
    with torch.no_grad():
        for layer in linear_layers(out).values():
            w = layer.weight.detach().double().numpy()
            rot = Incoherence(w.shape[1], 0)
            w_hat = rot.invert(fn(np.ascontiguousarray(rot.apply(w, axis=1), np.float32)), axis=1)
            layer.weight.copy_(torch.from_numpy(w_hat.astype(np.float32)))
    return out


def side_bytes(model) -> int:
    return sum(Incoherence(layer.weight.shape[1]).side_bytes for layer in linear_layers(model).values())


def total_weights(model) -> int:
    return sum(layer.weight.numel() for layer in linear_layers(model).values())


def baseline_points(model, config, done) -> list[dict]:
    rows = []
    n = total_weights(model)
    for name in BLOCK_FORMATS:
        if name in done:
            continue
        fmt = get_format(name)
        nbytes = sum(block_quantize(np.ascontiguousarray(layer.weight.detach().numpy()), fmt, axis=1).nbytes
                     for layer in linear_layers(model).values()) + side_bytes(model)
        candidate = rotated(model, lambda w, fmt=fmt: quantize_dequantize(w, fmt, axis=1).astype(np.float64))
        rows.append({"method": name, "bits_per_weight": 8 * nbytes / n, **lm.evaluate(candidate, config)})
    for bits in RTN_BITS:
        name = f"rtn_int{bits}_g{RTN_GROUP}"
        if name in done:
            continue
        nbytes = n * bits / 8 + n // RTN_GROUP * 4 + side_bytes(model)  # codes + fp16 scale and zero per group
        candidate = rotated(model, lambda w, bits=bits: rtn_group(w, bits, RTN_GROUP))
        rows.append({"method": name, "bits_per_weight": 8 * nbytes / n, **lm.evaluate(candidate, config)})
    return rows


def liftquant_point(entry, config, model, stats, batches, name: str, finetune_steps: int, seed: int) -> dict:
    start = time.perf_counter()
    choice = {layer: f"liftquant_{name}" for layer in linear_layers(model)}
    qmodel, tensors, _ = quantize_units(model, choice, stats, batches, group_size=None, finetune_steps=finetune_steps,
                                        seed=seed, log=print)
    nbytes = sum(t.nbytes for t in tensors.values()) + codebook_bytes(next(iter(tensors.values())).format)
    return {"method": f"liftquant_{name}" + ("+ft" if finetune_steps else ""),
            "bits_per_weight": 8 * nbytes / total_weights(model), "finetune_steps": finetune_steps,
            "seconds": round(time.perf_counter() - start, 1), **lm.evaluate(qmodel, config)}


def plot(rows: list[dict], fp32: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, pick, style in (("LiftQuant", lambda r: r["method"].startswith("liftquant") and "+ft" not in r["method"]
                                and "mixed" not in r["method"], "o-"),
                               ("LiftQuant + fine-tuning", lambda r: r["method"].endswith("+ft"), "s-"),
                               ("LiftQuant mixed (knapsack)", lambda r: "mixed" in r["method"], "D")):
        pts = sorted((r["bits_per_weight"], r["perplexity"]) for r in rows if pick(r))
        if pts:
            ax.plot(*zip(*pts), style, label=label)
    labelled: list[float] = []
    baselines = sorted((r for r in rows if not r["method"].startswith("liftquant") and r["method"] != "fp32"),
                       key=lambda r: r["bits_per_weight"])
    for r in baselines:  # fp32 is the dotted line: a marker at 32 bits would squeeze the rest
        ax.plot(r["bits_per_weight"], r["perplexity"], "x", markersize=9)
        near = sum(abs(r["bits_per_weight"] - bits) < 0.3 for bits in labelled)  # stack labels of close points
        ax.annotate(r["method"], (r["bits_per_weight"], r["perplexity"]), textcoords="offset points",
                    xytext=(-10, 8 + 11 * near), fontsize=8)
        labelled.append(r["bits_per_weight"])
    ax.axhline(fp32, color="gray", linestyle=":", label=f"fp32 ({fp32:.3f})")
    ax.set_xlabel("bits per weight (codes, scales, codebooks, rotation data)")
    ax.set_ylabel("validation perplexity (bytes)")
    ax.set_title("byte-level LM on the CPython stdlib: perplexity vs bits per weight")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--finetune-steps", type=int, default=100)
    parser.add_argument("--calibration-batches", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--uniform", nargs="*", default=UNIFORM)
    parser.add_argument("--finetuned", nargs="*", default=UNIFORM, help="uniform points also run with fine-tuning")
    parser.add_argument("--mixed-bits", nargs="*", type=float, default=MIXED_BITS)
    parser.add_argument("--config", nargs="*", default=[], metavar="KEY=VALUE",
                        help="LM config overrides (default: the default config)")
    parser.add_argument("-o", "--output", type=Path, default=Path("benchmarks/results/liftquant_accuracy.json"))
    parser.add_argument("--allow-dirty", action="store_true", help="run on a tree with uncommitted changes")
    args = parser.parse_args()
    sha = require_clean_tree(args.allow_dirty)
    torch.set_num_threads(1)
    entry = registry.get_model("lm")
    config = registry.make_config(entry, registry.parse_config_items(args.config))
    model = registry.train(entry, config, log=print).model.eval()
    result = json.loads(args.output.read_text()) if args.output.is_file() else {"rows": []}
    rows = result["rows"]
    done = {r["method"] for r in rows}

    def save():
        args.output.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(args.output, json.dumps(result, indent=2) + "\n")  # a stopped run leaves whole points

    previous = result.get("lm_config")
    if previous is not None and previous != dataclasses.asdict(config):
        raise SystemExit(f"{args.output} holds points of another LM config ({previous}); pass that config or "
                         "another --output")
    made_by = result.get("meta", {}).get("git_sha")
    if rows and made_by != sha:
        raise SystemExit(f"{args.output} holds points made by {made_by or 'an unrecorded commit'}, not {sha}; "
                         "move it away or pass another --output")
    # recorded first, so a stopped run still says what it scored and with which code
    result["lm_config"] = dataclasses.asdict(config)
    result.setdefault("meta", provenance(seed=args.seed, threads=torch.get_num_threads()))
    if "fp32" not in done:
        rows.append({"method": "fp32", "bits_per_weight": 32.0, **lm.evaluate(model, config)})
        save()
    for row in baseline_points(model, config, done):
        rows.append(row)
        print(row, flush=True)
        save()
    stats, batches = calibrate(entry, config, model, args.calibration_batches, args.seed)
    jobs = [(n, 0) for n in args.uniform] + [(n, args.finetune_steps) for n in args.finetuned]
    for name, steps in jobs:
        if f"liftquant_{name}" + ("+ft" if steps else "") in done:
            continue
        rows.append(liftquant_point(entry, config, model, stats, batches, name, steps, args.seed))
        print(rows[-1], flush=True)
        save()
    for bits in args.mixed_bits:
        if f"liftquant_mixed_{bits}" in done:
            continue
        start = time.perf_counter()
        out, _, _ = quantize_model(entry, config, model, bits=bits, candidates=args.uniform,
                                        calibration_batches=args.calibration_batches,
                                        finetune_steps=args.finetune_steps, seed=args.seed, log=print)
        rows.append({"method": f"liftquant_mixed_{bits}", "bits_per_weight": out["totals"]["bits_per_weight"],
                     "requested_bits": bits, "finetune_steps": args.finetune_steps,
                     "formats": {r["layer"]: r["format"] for r in out["layers"]},
                     "seconds": round(time.perf_counter() - start, 1), **out["quantized"]})
        print(rows[-1], flush=True)
        save()
    result["meta"]["load_average_after"] = load_average()
    save()
    fp32 = next(r["perplexity"] for r in rows if r["method"] == "fp32")
    plot(rows, fp32, args.output.with_suffix(".png"))
    for r in sorted(rows, key=lambda r: r["bits_per_weight"]):
        print(f"{r['method']:28s} {r['bits_per_weight']:7.3f} bits  perplexity {r['perplexity']:.4f}")


if __name__ == "__main__":
    main()
