"""LiftQuant against GPTQ and round-to-nearest at equal bytes, and the best of each within a budget (run by hand).

    python benchmarks/gptq_liftquant.py [--seeds 0 1 2] [-o benchmarks/results/gptq_liftquant.json]

Two zoo models: the evaluation LM at the size of ``liftquant_accuracy.py`` (width 128,
3 layers) and the digits MLP. Every Linear weight whose input width the largest group
(128) divides is quantized by every method (the digits MLP's 64-input first layer stays
float for all); bits per weight count every stored byte of those layers.

Per seed, every method gets the same calibration (the model's own training loss on 8
seeded train batches, :func:`edgekit.jobs.quantize.calibrate`) and the same seeded
incoherence rotation of each weight's input axis, and each runs without and with
activation-aware input scaling (AWQ multipliers, strength per layer from 0, 0.25, 0.5 by
the output error on the calibration statistics; the float16 multipliers are counted):

* round-to-nearest and GPTQ (:mod:`edgekit.simulators.gptq`) on INT2/3/4 with a float16
  scale and zero per group of 64 or 128 inputs, and on MXINT4/MXFP4;
* LiftQuant (:mod:`edgekit.simulators.liftquant`) at ten configurations, 2.2 to 4.2 bits,
  without fine-tuning (no method here is fine-tuned).

The held-out data is cut in two, a validation half and a test half (the LM: the first and
the second half of its validation bytes, seeded random windows in each; digits: a seeded
half of its held-out split each). GPTQ's damping (0.01 or 0.1) is chosen per point on the
validation half, and the best configuration of each method within a budget on the
validation means; the test half of every point is scored once. Figures are each point's
excess over fp32 on the same held-out samples (paired by seed), with 95% t-intervals over
the seeds (``seed_stats.interval``). Each point is saved as it finishes
and a rerun with the same output skips the points already there.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from seed_stats import interval
from threadpoolctl import threadpool_limits

from edgekit.jobs.quantize import ALPHAS, calibrate, code_layer, linear_layers
from edgekit.models import digits, lm, registry
from edgekit.simulators import formats
from edgekit.simulators import gptq as gq
from edgekit.simulators.incoherence import Incoherence
from edgekit.simulators.liftquant import codebook_bytes, output_error
from edgekit.simulators.liftquant import quantize as liftquant
from edgekit.utils.files import atomic_write
from edgekit.utils.provenance import load_average, provenance, require_clean_tree

MODELS = {"lm": ["width=128", "layers=3", "heads=2", "mlp=384", "seq_len=128", "steps=600"], "digits": []}
# what is chosen on and reported, lower is better: nats per byte (LM) or per sample (digits); an excess
# of c nats over fp32 is a perplexity ratio of exp(c)
METRIC = {"lm": "cross_entropy", "digits": "cross_entropy"}
GRIDS = [f"int{b}_g{g}" for b in gq.INT_BITS for g in (64, 128)] + list(gq.MX_FORMATS)
LIFTQUANT = ["16to8", "22to10", "24to10", "20to8", "22to8", "12to4", "20to6", "14to4", "15to4", "16to4"]
DAMPS = (0.01, 0.1)
BUDGETS = (2.75, 3.0, 4.0)
CALIBRATION_BATCHES = 8
LM_WINDOWS = 256  # per half and seed
MAX_GROUP = 128


@dataclass
class Task:
    name: str
    entry: object
    config: object
    model: torch.nn.Module
    layers: dict[str, torch.nn.Linear]
    halves: Callable[[int], dict]  # seed -> {"validation": data, "test": data}
    score: Callable[[torch.nn.Module, object], dict]


def lm_task(entry, config, model) -> Task:
    val = lm.load_corpus(config)[1]
    cut = len(val) // 2

    def halves(seed):
        out = {}
        for i, (name, lo, hi) in enumerate((("validation", 0, cut), ("test", cut, len(val)))):
            starts = np.sort(np.random.default_rng([seed, i]).integers(lo, hi - config.seq_len - 1, LM_WINDOWS))
            out[name] = torch.from_numpy(val[starts[:, None] + np.arange(config.seq_len + 1)].astype(np.int64))
        return out

    @torch.no_grad()
    def score(m, windows):
        logits = torch.cat([m(chunk[:, :-1]) for chunk in windows.split(config.eval_batch)])
        nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).double(), windows[:, 1:].reshape(-1)).item()
        return {"perplexity": math.exp(nll), "cross_entropy": nll, "tokens": windows[:, 1:].numel()}

    return Task("lm", entry, config, model, quantized_layers(model), halves, score)


def digits_task(entry, config, model) -> Task:
    _, _, x, y = digits.load_digits_split(config.test_fraction, config.seed)
    cut = len(x) // 2

    def halves(seed):
        order = np.random.default_rng(seed).permutation(len(x))
        return {"validation": (x[order[:cut]], y[order[:cut]]), "test": (x[order[cut:]], y[order[cut:]])}

    @torch.no_grad()
    def score(m, data):
        logits = m(torch.from_numpy(data[0])).double()
        target = torch.from_numpy(data[1])
        return {"cross_entropy": F.cross_entropy(logits, target).item(),
                "accuracy": float((logits.argmax(1) == target).double().mean()), "samples": len(target)}

    return Task("digits", entry, config, model, quantized_layers(model), halves, score)


def quantized_layers(model) -> dict[str, torch.nn.Linear]:
    return {n: m for n, m in linear_layers(model).items() if m.weight.shape[1] % MAX_GROUP == 0}


def with_weights(model, weights: dict[str, np.ndarray]) -> torch.nn.Module:
    out = copy.deepcopy(model).eval()
    with torch.no_grad():
        for name, w in weights.items():
            out.get_submodule(name).weight.copy_(torch.from_numpy(np.asarray(w, np.float32)))
    return out


def grid_weights(task: Task, stats, grid, method: str, scaling: bool, damp: float, seed: int) -> tuple[dict, int]:
    """(W_hat per layer, stored bytes) for RTN or GPTQ on ``grid``; with ``scaling`` the AWQ strength
    per layer with the lowest calibration output error."""
    weights, nbytes = {}, 0
    for name, layer in task.layers.items():
        w = layer.weight.detach().double().numpy()
        gram, rotation = stats[name].gram, Incoherence(w.shape[1], seed)
        candidates = [gq.input_scales(gram, a) for a in ALPHAS] if scaling else [None]
        coded = [gq.quantize_layer(w, gram, grid, method=method, scales=m, rotation=rotation, damp=damp)
                 for m in candidates]
        weights[name] = min(coded, key=lambda q: output_error(w, q, gram).sum())
        nbytes += gq.layer_nbytes(grid, w.shape, scales=scaling, rotate=True)
    return weights, nbytes


def liftquant_weights(task: Task, stats, config: str, scaling: bool, seed: int) -> tuple[dict, int]:
    fmt = formats.get_liftquant_format(config)
    weights, nbytes = {}, codebook_bytes(fmt)
    for name, layer in task.layers.items():
        w = layer.weight.detach().double().numpy()
        if scaling:  # LiftQuant's own rule: the AWQ strength by output error on a sample of rows
            tensor, _ = code_layer(name, w, config, stats[name], group_size=None, seed=seed, log=lambda _: None)
        else:
            tensor = liftquant(w, fmt, seed=seed)
        weights[name], nbytes = tensor.dequantize(), nbytes + tensor.nbytes
    return weights, nbytes


def run_point(task: Task, stats, data, method: str, config: str, scaling: bool, seed: int) -> dict:
    start = time.perf_counter()
    total = sum(layer.weight.numel() for layer in task.layers.values())
    row = {"model": task.name, "method": method, "config": config, "scaling": scaling, "seed": seed}
    if method == "liftquant":
        weights, nbytes = liftquant_weights(task, stats, config, scaling, seed)
    elif method == "rtn":
        weights, nbytes = grid_weights(task, stats, gq.grid_named(config), "rtn", scaling, 0.0, seed)
    else:  # damping chosen on the validation half
        tried = {}
        for damp in DAMPS:
            weights, nbytes = grid_weights(task, stats, gq.grid_named(config), "gptq", scaling, damp, seed)
            tried[damp] = (task.score(with_weights(task.model, weights), data["validation"]), weights)
        damp = min(DAMPS, key=lambda d: tried[d][0][METRIC[task.name]])
        weights = tried[damp][1]
        row.update(damp=damp, validation_by_damp={str(d): tried[d][0] for d in DAMPS})
    candidate = with_weights(task.model, weights)
    row.update(bits_per_weight=8 * nbytes / total, bytes=nbytes, weights=total,
               validation=task.score(candidate, data["validation"]), test=task.score(candidate, data["test"]),
               seconds=round(time.perf_counter() - start, 1))
    return row


def summarize(rows: list[dict]) -> dict:
    """Per model and point: bits, and over seeds the test metric and its excess over fp32 on the same
    held-out samples (paired, which removes the spread between the seeds' samples); per budget, each
    method's point with the best validation mean among those that fit, and LiftQuant's paired
    difference to the others' choices."""
    fp32 = {(r["model"], r["seed"]): r for r in rows if r["method"] == "fp32"}
    points = {}
    for r in rows:
        if r["method"] != "fp32":
            points.setdefault((r["model"], r["method"], r["config"], r["scaling"]), []).append(r)
    table = []
    for (model, method, config, scaling), rs in sorted(points.items()):
        metric, rs = METRIC[model], sorted(rs, key=lambda r: r["seed"])
        base = [fp32[model, r["seed"]] for r in rs]
        entry = {"model": model, "method": method, "config": config, "scaling": scaling,
                 "bits_per_weight": float(np.mean([r["bits_per_weight"] for r in rs])),
                 "seeds": [r["seed"] for r in rs],
                 "validation_above_fp32": float(np.mean([r["validation"][metric] - b["validation"][metric]
                                                         for r, b in zip(rs, base, strict=True)])),
                 "test": interval([r["test"][metric] for r in rs]),
                 "test_above_fp32": interval([r["test"][metric] - b["test"][metric]
                                              for r, b in zip(rs, base, strict=True)])}
        if method == "gptq":
            entry["damp_chosen"] = [r["damp"] for r in rs]
        if model == "digits":
            entry["test_accuracy"] = interval([r["test"]["accuracy"] for r in rs])
        table.append(entry)
    budgets = []
    for model in sorted({e["model"] for e in table}):
        for budget in BUDGETS:
            chosen = {}
            for method in ("rtn", "gptq", "liftquant"):
                fits = [e for e in table if e["model"] == model and e["method"] == method
                        and e["bits_per_weight"] <= budget]
                if fits:
                    chosen[method] = min(fits, key=lambda e: e["validation_above_fp32"])
            row = {"model": model, "budget_bits": budget,
                   "choices": {m: {k: e[k] for k in ("config", "scaling", "bits_per_weight", "validation_above_fp32",
                                                     "test", "test_above_fp32")} for m, e in chosen.items()}}
            if "liftquant" in chosen:
                lift = chosen["liftquant"]["test_above_fp32"]["values"]
                for other in ("rtn", "gptq"):
                    if other in chosen:
                        row[f"liftquant_minus_{other}"] = interval(
                            np.subtract(lift, chosen[other]["test_above_fp32"]["values"]))
            budgets.append(row)
    fp32_test = {m: interval([fp32[k]["test"][METRIC[m]] for k in sorted(fp32) if k[0] == m])
                 for m in sorted({k[0] for k in fp32})}
    return {"metric": METRIC, "fp32_test": fp32_test, "points": table, "budgets": budgets}


def plot(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = sorted({e["model"] for e in summary["points"]})
    fig, axes = plt.subplots(1, len(models), figsize=(6.5 * len(models), 4.8))
    colors = {"rtn": "tab:gray", "gptq": "tab:blue", "liftquant": "tab:red"}
    for ax, model in zip(np.atleast_1d(axes), models, strict=True):
        pts = [e for e in summary["points"] if e["model"] == model]
        for method, color in colors.items():
            for scaling in (False, True):
                sel = [e for e in pts if e["method"] == method and e["scaling"] == scaling]
                ax.errorbar([e["bits_per_weight"] for e in sel], [e["test_above_fp32"]["mean"] for e in sel],
                            yerr=[e["test_above_fp32"]["ci95"] for e in sel], fmt="o", color=color, capsize=2,
                            markerfacecolor=color if scaling else "white",
                            label=f"{method}{' + AWQ scaling' if scaling else ''}")
            front, best = [], math.inf  # the method's Pareto front: no point of it fewer bits and lower error
            for e in sorted((e for e in pts if e["method"] == method), key=lambda e: e["bits_per_weight"]):
                if e["test_above_fp32"]["mean"] < best:
                    best = e["test_above_fp32"]["mean"]
                    front.append((e["bits_per_weight"], best))
            if front:
                ax.step(*zip(*front), where="post", color=color, alpha=0.6)
        ax.axhline(0.0, color="black", linestyle=":", label="fp32")
        for b in BUDGETS:
            ax.axvline(b, color="green", linestyle="--", alpha=0.3)
        ax.set_xlabel("bits per weight (codes, scales, multipliers, codebooks, rotation data)")
        ax.set_ylabel(f"test {summary['metric'][model]} above fp32 (paired; mean, 95% interval)")
        ax.set_yscale("symlog", linthresh=1e-2)
        ax.set_title(f"{model}: accuracy vs stored bits (budgets dashed)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--liftquant", nargs="*", default=LIFTQUANT, help="LiftQuant configurations")
    parser.add_argument("--grids", nargs="*", default=GRIDS, help="RTN and GPTQ grids")
    parser.add_argument("-o", "--output", type=Path, default=Path("benchmarks/results/gptq_liftquant.json"))
    parser.add_argument("--allow-dirty", action="store_true")
    args = parser.parse_args()
    for name in args.grids:
        gq.grid_named(name)
    for name in args.liftquant:
        formats.get_liftquant_format(name)
    sha = require_clean_tree(args.allow_dirty)
    torch.set_num_threads(1)
    threadpool_limits(1)
    result = json.loads(args.output.read_text()) if args.output.is_file() else {"rows": []}
    if result.get("provenance", {}).get("git_sha", sha) != sha:
        raise SystemExit(f"{args.output} holds points of another commit; remove it or pass another --output")
    result.update(provenance=provenance(seed=args.seeds[0], threads=1), command=" ".join(sys.argv))
    rows = result["rows"]
    done = {(r["model"], r["method"], r["config"], r["scaling"], r["seed"]) for r in rows}

    def save():
        atomic_write(args.output, json.dumps(result, indent=2) + "\n")

    jobs = [("rtn", g, s) for g in args.grids for s in (False, True)] \
        + [("gptq", g, s) for g in args.grids for s in (False, True)] \
        + [("liftquant", c, s) for c in args.liftquant for s in (False, True)]
    for model_name in args.models:
        entry = registry.get_model(model_name)
        config = registry.make_config(entry, registry.parse_config_items(MODELS[model_name]))
        model = registry.train(entry, config, log=print).model.eval()
        task = (lm_task if model_name == "lm" else digits_task)(entry, config, model)
        result.setdefault("configs", {})[model_name] = dataclasses.asdict(config)
        for seed in args.seeds:
            data = task.halves(seed)
            if (model_name, "fp32", "fp32", False, seed) not in done:
                rows.append({"model": model_name, "method": "fp32", "config": "fp32", "scaling": False, "seed": seed,
                             "bits_per_weight": 32.0, "validation": task.score(model, data["validation"]),
                             "test": task.score(model, data["test"])})
                save()
            stats = None
            for method, config_name, scaling in jobs:
                if (model_name, method, config_name, scaling, seed) in done:
                    continue
                if stats is None:
                    stats, _ = calibrate(entry, config, model, CALIBRATION_BATCHES, seed)
                rows.append(run_point(task, stats, data, method, config_name, scaling, seed))
                r = rows[-1]
                print(f"{model_name} seed {seed} {method:9s} {config_name:9s} scaling={scaling!s:5s} "
                      f"{r['bits_per_weight']:.3f} bits  val {r['validation'][METRIC[model_name]]:.4f}  "
                      f"test {r['test'][METRIC[model_name]]:.4f}  ({r['seconds']} s)", flush=True)
                save()
    result["summary"] = summarize(rows)
    result["provenance"]["load_average_after"] = load_average()
    save()
    plot(result["summary"], args.output.with_suffix(".png"))
    for b in result["summary"]["budgets"]:
        for method, c in b["choices"].items():
            print(f"{b['model']:6s} <= {b['budget_bits']} bits  {method:9s} {c['config']:9s} scaling={c['scaling']!s:5s} "
                  f"{c['bits_per_weight']:.3f} bits  test above fp32 {c['test_above_fp32']['mean']:+.4f} "
                  f"+- {c['test_above_fp32']['ci95']:.4f}")

if __name__ == "__main__":
    main()
