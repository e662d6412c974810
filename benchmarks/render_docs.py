"""Render the result tables of the docs from the committed files in benchmarks/results/.

    python benchmarks/render_docs.py           # rewrite the generated blocks of every page
    python benchmarks/render_docs.py --check   # exit 1 if a page differs from what it renders

A page asks for a table with a block

    <!-- results: NAME -->
    (generated; anything here is replaced)
    <!-- end results -->

where NAME is a renderer of ``RENDERERS``. Each renderer reads one results file and returns
Markdown: a line saying where the figures come from (file, command, git SHA, CPU, threads,
load) and the table. A tree marked dirty in the file is said in that line. Tests run
``--check``, so a page never shows figures its committed file does not hold.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections import Counter
from pathlib import Path

from seed_stats import interval

from edgekit.utils.output import markdown_table

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(r"(<!-- results: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- end results -->)", re.DOTALL)


def load(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())


def meta_of(data: dict) -> dict:
    """The provenance of a results file, whichever of the two layouts it uses."""
    if "meta" in data:
        return data["meta"]
    return {**({"command": data["command"]} if "command" in data else {}), **data.get("provenance", {})}


def pm(stat: dict, digits: int = 3, sign: str = "+-", signed: bool = False) -> str:
    """``mean +- 95% half-width`` of a ``seed_stats.interval`` record (pages differ in the sign they print);
    ``signed`` prints the mean's sign, for differences."""
    return f"{stat['mean']:{'+' if signed else ''}.{digits}f} {sign} {stat['ci95']:.{digits}f}"


def flat_stat(record: dict, key: str) -> dict:
    """The ``pm`` record of a summary that stores ``key`` and ``key_ci95`` side by side."""
    return {"mean": record[key], "ci95": record[f"{key}_ci95"]}


def table(header: list[str], rows: list[list]) -> str:
    if len(set(header)) != len(header):  # rows become dicts keyed by header: a repeated name would drop a column
        raise ValueError(f"repeated column names in {header}")
    return markdown_table([dict(zip(header, row, strict=True)) for row in rows], header)


def source_line(file: str, meta: dict) -> str:
    """Where the figures come from: file, command, commit, machine, threads and load. A dirty tree or a
    missing git SHA is said with the words tests/test_docs.py looks for."""
    sha = meta.get("git_sha", "unknown")
    dirty = (" (**made on a tree with uncommitted changes: provenance incomplete**)" if sha.endswith("-dirty")
             else " (**no git SHA recorded: provenance incomplete**)" if sha == "unknown" else "")
    cpu = meta.get("cpu", {})
    ext = ", ".join(e for e in cpu.get("vector_extensions", []) if e.startswith(("avx", "asimd", "sve")))
    load_before = cpu.get("load_average")
    load_after = meta.get("load_average_after")
    loads = f"load average {load_before[0]} before" if load_before else "load not recorded"
    if load_after:
        loads += f", {load_after[0]} after"
    threads = meta.get("threads")
    threads = f"{threads} thread{'' if threads == 1 else 's'}" if threads else "threads not recorded"
    return (f"From `benchmarks/results/{file}`, written by `{meta.get('command', 'unknown command')}` at git "
            f"{sha[:10]}{dirty} on {cpu.get('model', 'an unknown CPU')} ({ext or 'no vector extensions recorded'}), "
            f"{threads}, {loads}.")


def render_codecs() -> str:
    data = load("codecs.json")
    meta, rows = data["meta"], data["rows"]
    isas = list(meta["isas"])
    layouts = ("1-D", "2-D", "2-D axis 0")
    columns = [(isa, layout) for isa in isas for layout in layouts]
    header = ["format"] + [f"{isa}, {layout}" for isa, layout in columns]

    def rates(key: str) -> list[list[str]]:
        return [[r["format"]] + [f"{r[f'{key} Gelem/s {isa} {layout}']:.2f}" for isa, layout in columns] for r in rows]

    baselines = [[r["format"],
                  f"{r['torch emulation Gelem/s']:.3f}" if r["torch emulation Gelem/s"] else "n/a",
                  f"{r['ml_dtypes cast Gelem/s']:.2f}",
                  f"{r['x torch']:.1f}x" if r["x torch"] else "n/a",
                  f"{r['x ml_dtypes']:.1f}x",
                  (f"{r['quantize extra memory % of input']:.2g}% / {r['dequantize extra memory % of input']:.2g}%"
                   if "quantize extra memory % of input" in r else "not measured")] for r in rows]
    return "\n\n".join([
        source_line("codecs.json", meta) + f" {meta['elements']:,} float32 values, best of {meta['repeats']}; "
        "billions of elements per second.",
        "Quantize and pack:",
        table(header, rates("quantize+pack")),
        "Unpack and dequantize:",
        table(header, rates("unpack+dequantize")),
        f"Against the baselines (2-D, kernels compiled for {isas[0]}):",
        table(["format", "PyTorch emulation", "ml_dtypes cast", "vs PyTorch", "vs ml_dtypes",
               "extra memory (quantize / dequantize)"], baselines),
    ])


def render_user_models() -> str:
    data = load("user_models.json")
    formats = list(dict.fromkeys(r["format"] for r in data["accuracy"]))
    models = list(dict.fromkeys(r["model"] for r in data["accuracy"]))
    cosine = {(r["model"], r["format"]): r for r in data["accuracy"]}
    builds = {r["model"]: r for r in data["builds"] if r["batch"] == 1}
    worst = {m: max(r["max_rel_diff_vs_onnxruntime"] for r in data["builds"] if r["model"] == m) for m in builds}
    rows = []
    for model in models:
        cells = []
        for fmt in formats:
            r = cosine[model, fmt]
            done, total = r["layers"].split("/")
            cells.append(f"{r['cosine']:.4f}" + ("" if done == total else f" ({r['layers']} layers)"))
        b = builds[model]
        cells += [f"{worst[model]:.1e}", "yes" if b["symbolic_batch"] else "no",
                  f"{b['tvm_mxfp4_ms']:.2f} / {b['onnxruntime_fp32_ms']:.2f} ms"]
        rows.append([model, *cells])
    batches = sorted({r["batch"] for r in data["builds"]})
    header = ["model", *formats, f"build vs onnxruntime (batches {', '.join(map(str, batches))})", "any batch", "TVM MXFP4 / ORT fp32 (batch 1)"]
    sym = {r["build"]: r["median_ms"] for r in data["symbolic_batch"]}
    (any_batch, any_ms), (_, one_ms) = sorted(sym.items(), key=lambda kv: "batch 1" == kv[0])
    return "\n\n".join([
        source_line("user_models.json", data["meta"]),
        table(header, rows),
        (f"One build for any batch has a price at batch 1 in convolutions: ResNet-18's {any_batch} build took "
         f"{any_ms:.1f} ms against {one_ms:.1f} ms for its batch-1 build ({any_ms / one_ms:.2f}x, interleaved medians)."),
    ])


def render_gemv() -> str:
    data = load("gemv.json")
    meta = data["meta"]
    gemv = [[r["backend"], f"{r['bits/weight']:g}", f"{r['bytes/call (MiB)']:.1f}", f"{r['median (ms)']:.2f}",
             f"{r['min (ms)']:.2f}", f"{r['GB/s']:.1f}", f"{r['x onnxruntime fp32']:.2f}"] for r in data["gemv"]]
    parts = [
        source_line("gemv.json", meta) + f" GEMV {meta['n']}x{meta['k']}, batch 1, {meta['rounds']} interleaved "
        f"rounds; ratios of medians to {meta['reference']}.",
        table(["backend", "bits/weight", "MiB read/call", "median (ms)", "min (ms)", "GB/s (median)",
               "x onnxruntime fp32"], gemv),
    ]
    parts.append(gemv_byte_rates(data["gemv"], meta["reference"]))
    if data.get("gemv_in_cache"):
        parts.append(gemv_roof(data["gemv_in_cache"], data["gemv"], meta))
    for enc in data.get("liftquant_encodes", []):
        took = f"in {enc['encode_seconds']} s" if enc["encode_seconds"] is not None else "in an earlier run"
        parts.append(f"{enc['format']}: {enc['bits_per_weight']:.3f} bits per weight stored, relative weight MSE "
                     f"{enc['relative_weight_mse']:.4f}, encoded {took}.")
    if data["model"]:
        model = [[r["backend"], f"{r['bits/weight']:g}", f"{1e3 * r['median (ms)']:.1f}", f"{1e3 * r['min (ms)']:.1f}",
                  f"{r['x onnxruntime fp32']:.2f}"] for r in data["model"]]
        parts += ["The digits MLP (64-256-256-10) at batch 1, same run:",
                  table(["backend", "bits/weight", "median (us)", "min (us)", "x onnxruntime fp32"], model)]
    return "\n\n".join(parts)


AVX2_SUFFIX = " [avx2]"  # bench_gemv's rows built for AVX2 and FMA alone


def block_format_shares(rows: list[dict], ref_gbps: float) -> list[str]:
    """Each block format's TVM GEMV's bytes read per second as a share of ``ref_gbps``, for this CPU and
    with AVX2 alone (the ``[avx2]`` rows)."""
    from edgekit.simulators.weight_formats import resolve

    by_name = {r["backend"]: r for r in rows}
    shares = []
    for r in rows:
        if (r["backend"].startswith("tvm ") and not r["backend"].endswith(AVX2_SUFFIX)
                and resolve(r["format"]).family == "block"):
            avx2 = by_name.get(r["backend"] + AVX2_SUFFIX)
            shares.append(f"{r['backend'].removeprefix('tvm ')} {100 * r['GB/s'] / ref_gbps:.0f}%"
                          + (f" ({100 * avx2['GB/s'] / ref_gbps:.0f}% with AVX2 alone)" if avx2 else ""))
    return shares


def gemv_byte_rates(rows: list[dict], reference: str) -> str:
    """Each block format's bytes read per second as a share of the reference's (:func:`block_format_shares`),
    and each LiftQuant layer's speed-up, from the table's medians."""
    from edgekit.simulators.weight_formats import resolve

    by_name = {r["backend"]: r for r in rows}
    ref = by_name[reference]["GB/s"]
    tvm = [r for r in rows if r["backend"].startswith("tvm ") and not r["backend"].endswith(AVX2_SUFFIX)]
    layers = [f"{r['format']} {r['x onnxruntime fp32']:.1f}x" + (
        f" ({by_name[r['backend'] + AVX2_SUFFIX]['x onnxruntime fp32']:.1f}x with AVX2 alone)"
        if r["backend"] + AVX2_SUFFIX in by_name else "")
        for r in tvm if resolve(r["format"]).family == "liftquant" and r["backend"].endswith(" layer")]
    text = (f"Bytes read per second as a share of {reference}'s {ref:.1f} GB/s: "
            + ", ".join(block_format_shares(rows, ref)) + ".")
    if layers:
        text += f" The LiftQuant layer (rotation and GEMV) against {reference}'s time: " + ", ".join(layers) + "."
    return text


def gemv_roof(in_cache: list[dict], rows: list[dict], meta: dict) -> str:
    """The decode roof: the block formats' byte rates on the weight the L2 caches hold, as shares of the
    reference's rate on the large weight, beside the reference's own rate in cache."""
    reference = meta["reference"]
    ref = next(r for r in rows if r["backend"] == reference)["GB/s"]
    ref_in_cache = next(r for r in in_cache if r["backend"] == reference)["GB/s"]
    size = meta["cache_size"]
    return (f"The decode roof, the same kernels on a {size}x{size} weight whose codes the L2 caches hold (same run, "
            f"rounds of their own), as a share of {reference}'s {ref:.1f} GB/s on the {meta['n']}x{meta['k']} "
            f"weight: " + ", ".join(block_format_shares(in_cache, ref))
            + f". {reference} itself reads {ref_in_cache:.1f} GB/s on the {size}x{size} weight.")


def render_mx_training() -> str:
    data = load("mx_training.json")
    seeds = data["config"]["seed"]
    rows = []
    for scheme, row in data["summary"].items():
        forward, backward = data["schemes"][scheme]
        ce, excess = row["validation_cross_entropy"], row.get("excess_over_bf16")
        rows.append([scheme, forward, backward, f"{ce['mean']:.4f} ± {ce['ci95']:.4f}",
                     f"{excess['mean']:+.4f} ± {excess['ci95']:.4f}" if excess else "(reference)"])
    bias = [[r["format"], f"{r['mean_error']:+.2e}", f"{r['mean_abs_error']:.2e}", f"{100 * r['bias_over_mean_abs']:+.2f}%"]
            for r in data["clipping_bias"]]
    config = ", ".join(f"{k}={v}" for k, v in data["config"].items() if k not in ("schemes", "seed"))
    return "\n\n".join([
        source_line("mx_training.json", data["meta"]) + f" Seeds {', '.join(map(str, seeds))}; {config}.",
        table(["scheme", "forward GEMM", "backward GEMMs", "validation cross-entropy (95% CI)",
               "excess over BF16, paired by seed (95% CI)"], rows),
        "Mean rounding error of 2^20 Gaussian values (rows of 1024, blocks and channels along rows):",
        table(["format", "mean error", "mean absolute error", "bias / mean absolute error"], bias),
    ])


PHASEALIGN_LABELS = {"cosine": "`cosine` (MaskCLIP)", "phasealign": "`phasealign` (all three parts)"}


def render_phasealign() -> str:
    data = load("phasealign.json")
    summary = data["summary"]
    rows = []
    for method in data["methods"]:
        knobs = "; ".join(f"{int(r)}, {g}, {int(h)}" for r, g, h in zip(
            summary[f"residual_readout_{method}"]["values"], summary[f"gamma_{method}"]["values"],
            summary[f"hops_{method}"]["values"], strict=True))
        rows.append([PHASEALIGN_LABELS.get(method, f"`{method}`"), pm(summary[f"miou_{method}"]),
                     pm(summary[f"boundary_f_{method}"]), f"{summary[f'val_miou_{method}']['mean']:.3f}", knobs])
    return "\n\n".join([
        (source_line("phasealign.json", meta_of(data)) + f" Seeds {', '.join(map(str, data['seeds']))}; "
         "mean and 95% t-interval over seeds."),
        (f"The tiny CLIP's zero-shot accuracy among all prompts on one-object scenes: novel combinations "
         f"{pm(summary['novel_accuracy'])}, base combinations {pm(summary['base_accuracy'])}."),
        table(["method", "test mIoU (novel)", "test boundary F", "val mIoU (base)",
               "knobs per seed (residual read-out, gamma, hops)"], rows),
    ])


def render_dnachunker() -> str:
    data = load("dnachunker.json")
    columns = [("masked_accuracy", 3), ("mean_chunk", 2), ("chunk_in_motif", 2), ("chunk_in_repeat", 2),
               ("chunk_in_background", 2), ("snp_far_moves", 3), ("insertion_far_moves", 3)]
    rows = [[r["variant"], f"{r['lr']:g}", *(pm(r[key], digits, "±") for key, digits in columns)]
            for r in data["rows"]]
    return "\n\n".join([
        source_line("dnachunker.json", meta_of(data)) + f" Seeds {', '.join(map(str, data['seeds']))}.",
        table(["variant", "lr", "masked-base accuracy", "mean chunk", "chunk in motifs", "chunk in repeats",
               "chunk in background", "far moves, SNP", "far moves, insertion"], rows),
    ])


def render_labbuilder() -> str:
    data = load("labbuilder.json")
    keys = ("collision_rate", "out_of_bounds_rate", "weighted_safety_violations", "reachable_step_fraction")
    rows = [[method, *(pm(stats[k], 3, "±") for k in keys)] for method, stats in data["summary"].items()]
    return "\n\n".join([
        source_line("labbuilder.json", meta_of(data)) + f" {data['specs_per_seed']} specifications per seed, "
        f"{data['iterations']} iterations.",
        table(["method", "collision rate", "out-of-bounds rate", "weighted safety violations", "reachable steps"], rows),
    ])


NEMO_LABELS = {"single": "single (first candidate as written)", "single_validated": "single_validated (simulator + repair)"}


def render_nemo() -> str:
    data = load("nemo.json")
    rows = []
    for condition, stat in data["summary"]["accuracy"].items():
        label = NEMO_LABELS.get(condition) or (f"{condition} ({data['candidates']} candidates)"
                                               if condition in ("self_consistency", "mbr") else condition)
        rows.append([label, pm(stat, 3, "±"), ", ".join(f"{v:.3f}" for v in stat["per_seed"])])
    by_family = data["summary"]["accuracy_by_family"]
    conditions = list(data["summary"]["accuracy"])
    family_rows = [[family, *(f"{stats[c]['mean']:.2f}" for c in conditions)] for family, stats in by_family.items()]
    return "\n\n".join([source_line("nemo.json", meta_of(data)), table(["condition", "accuracy", "per seed"], rows),
                        "By family (mean over seeds):", table(["family", *conditions], family_rows)])


def render_fuzzeval() -> str:
    data = load("fuzzeval.json")
    keys = ("violation_rate", "fdr_mean", "selection_rate", "recall")
    parts = [source_line("fuzzeval.json", meta_of(data)) + f" {data['problems']} problems, "
             f"{data['candidates_per_problem']} candidates each, {data['splits']} splits, delta {data['delta']}."]
    for split, by_eps in data["summary"].items():
        for eps in sorted(by_eps, key=float, reverse=True):
            rows = [[method, *(pm(stats[k], 3, "±") for k in keys)] for method, stats in by_eps[eps].items()]
            parts += [f"Split over {split}s, epsilon = {float(eps):g}:",
                      table(["method", "P(test FDR > epsilon)", "test FDR", "selection rate",
                             "recall of correct programs"], rows)]
    return "\n\n".join(parts)


def render_cgmmd() -> str:
    data = load("cgmmd.json")

    def cell(row, key, digits):
        return pm(row[key], digits, "±") if key in row else "–"

    synthetic = [[r["task"], r["method"], f"{r['lr']:g}", cell(r, "cond_mmd", 3), cell(r, "w1", 3),
                  cell(r, "std_error", 3), cell(r, "mode_coverage", 2), f"{min(r['latency_ms']['values']):.2f}"]
                 for r in data["rows"] if "w1" in r]
    digits = [[r["task"], r["method"], f"{r['lr']:g}", cell(r, "cond_mmd", 3), cell(r, "psnr", 2),
               cell(r, "psnr_of_mean", 2), cell(r, "diversity", 3), f"{min(r['latency_ms']['values']):.2f}"]
              for r in data["rows"] if "psnr" in r]
    return "\n\n".join([
        (source_line("cgmmd.json", meta_of(data)) + f" Seeds {', '.join(map(str, data['seeds']))}; mean ± 95% "
         "t-interval; sampling time is the fastest seed's (the machine is shared)."),
        "Synthetic conditionals (W1 and coverage against the true conditional at 200 x values):",
        table(["task", "method", "lr", "held-out ECMMD²", "W1 to the truth", "cond. std error", "mode coverage",
               "ms / 1000 samples"], synthetic),
        ("Digits (test images; PSNR of one sample and of the mean of 20 samples against the clean image; "
         "diversity = mean per-pixel standard deviation over the 20 samples):"),
        table(["task", "method", "lr", "held-out ECMMD²", "PSNR, one sample (dB)", "PSNR, mean of 20 samples",
               "diversity", "ms / 1000 samples"], digits),
    ])


def render_liftquant_search() -> str:
    data = load("liftquant_search.json")
    searches = ("fast", "fast+local", "slices")
    rows = []
    for r in data["configs"]:
        exact = (f"{r['mse_exact']:.4f} ({r['samples_exact']})" if "mse_exact" in r
                 else f"(2^{r['D']} codes)")
        rows.append([r["format"].removeprefix("liftquant_"), f"{r['bits']:.3g}", r["default_search"],
                     *(f"{r[f'mse_{s}']:.4f}" if f"mse_{s}" in r else "" for s in searches), exact,
                     *(f"{100 * r[k]:+.1f}%" if k in r else "" for k in ("fast_local_over_exact", "slices_over_exact")),
                     *(f"{r[f'weights_per_s_{s}']:,.0f}" if f"weights_per_s_{s}" in r else ""
                       for s in (*searches, "exact"))])
    runs = [[run["search"] + (" (default)" if run["default"] else ""), run["rows_timed"],
             f"{run['pipeline_seconds']:.1f}" + (" (extrapolated)" if run["extrapolated"] else ""),
             f"{run['pipeline_cpu_seconds']:.1f}", f"{run['pipeline_weights_per_s']:,.0f}",
             f"{run['bits_per_weight']:.4f}", f"{run['relative_mse']:.4f}"] for run in data["layer"]["runs"]]
    shape = "x".join(map(str, data["layer"]["shape"]))
    return "\n\n".join([
        (source_line("liftquant_search.json", data["meta"]) + f" MSE per dimension on {data['samples']} N(0, 1) "
         "chunks (exact on fewer where the chunk count is given)."),
        table(["configuration", "D/d bits", "default", "fast", "fast+local", "slices", "exact (chunks)",
               "fast+local over exact", "slices over exact", "fast (weights/s)", "fast+local (weights/s)",
               "slices (weights/s)", "exact (weights/s)"], rows),
        (f"Encoding a {shape} layer at {data['layer']['format']} (the whole per-layer pipeline: rotation, "
         "scales, the search, least-squares scales, packing):"),
        table(["search", "rows timed", "seconds for the layer", "CPU seconds", "weights/s", "bits/weight",
               "relative MSE"], runs),
    ])


DCLA_TARGETS = {"toy": "toy 2-d", "deconvolution": "deconvolution 64 px"}
DCLA_PENALTIES = {"l1_minus_l2": "l1 - l2", "capped_l1": "capped l1"}
DCLA_METHODS = {"dcla": "DC-LA", "myula_r1": "MYULA on r1", "subgradient": "sub-gradient"}


def render_dcla() -> str:
    data = load("dcla.json")
    rows = []
    for r in data["summary"]:
        error = pm(flat_stat(r, "w1"), 4) if "w1" in r else f"MSE {pm(flat_stat(r, 'mse'), 4)}"
        rows.append([DCLA_TARGETS.get(r["target"], r["target"]), DCLA_PENALTIES.get(r["penalty"], r["penalty"]),
                     DCLA_METHODS.get(r["method"], r["method"]), error,
                     pm(flat_stat(r, "coverage90"))])
    return "\n\n".join([
        source_line("dcla.json", meta_of(data)),
        table(["target", "prior", "sampler", "W1 to quadrature / MSE", "exact mass of 90% interval / pixel coverage"],
              rows),
    ])


def render_fedrgl() -> str:
    data = load("fl_fedrgl.json")

    def diff(test: dict) -> str:
        star = " *" if test["significant"] else ""
        return f"{test['difference']:+.3f} ({test['p']:.3f}){star}"

    rows = [[r["graph"], r["noise"], str(r["clients"]),
             *(pm(r[m], 3, "±") for m in ("fedavg", "fedprox", "fedavg+cadf", "fedrgl")),
             *(diff(r[f"fedrgl vs {m}"]) for m in ("fedavg", "fedprox", "fedavg+cadf"))] for r in data["table"]]
    steps = ("+ pseudo-labels", "+ entropy weights", "+ proximal term")
    ablation = []
    for r in data["ablation"]:
        cells = [pm(r["cadf"], 3, "±")]
        for step in steps:
            test = r[f"{step} vs previous"]
            cells.append(f"{pm(r[step], 3, '±')} ({test['difference']:+.3f}, p {test['p']:.3f}"
                         f"{', *' if test['significant'] else ''})")
        ablation.append([r["graph"], r["noise"], str(r["clients"]), *cells])
    return "\n\n".join([
        (source_line("fl_fedrgl.json", meta_of(data)) + " Test accuracy, mean ± 95% half-width over seeds "
         f"{', '.join(map(str, data['protocol']['seeds']))}; differences are FedRGL less the baseline, with the "
         "paired t-test's p (`*`: p < 0.05):"),
        table(["graph", "noise", "clients", "FedAvg", "FedProx", "FedAvg+CADF", "FedRGL", "FedRGL − FedAvg (p)", "− FedProx (p)",
               "− FedAvg+CADF (p)"], rows),
        ("Ablation, the same seeds; each step adds one part to the one before (p: paired t-test against the previous "
        "step):"),
        table(["graph", "noise", "clients", "CADF (after warm-up)", "+ pseudo-labels and contrastive loss",
               "+ entropy-weighted aggregation (the paper's FedRGL)",
               f"+ proximal term (fedrgl_mu {data['protocol']['ablation']['+ proximal term']['fedrgl_mu']:g})"],
              ablation),
    ])


def render_gptq() -> str:
    data = load("gptq_liftquant.json")
    summary = data["summary"]
    scaled = {False: "no", True: "yes"}
    points = sorted((e for e in summary["points"] if e["model"] == "lm"),
                    key=lambda e: (round(e["bits_per_weight"], 3), e["method"]))
    rows = [[e["method"], e["config"], scaled[e["scaling"]], f"{e['bits_per_weight']:.3f}",
             pm(e["test_above_fp32"], 4, "±", signed=True), f"{math.exp(e['test_above_fp32']['mean']):.4f}"]
            for e in points]

    def choice(c: dict) -> str:
        return (f"{c['config']}{' + scaling' if c['scaling'] else ''}, {c['bits_per_weight']:.3f} bits: "
                f"{pm(c['test_above_fp32'], 4, '±', signed=True)}")

    def resolved(stat: dict) -> str:
        text = pm(stat, 4, "±", signed=True)
        return f"**{text}**" if abs(stat["mean"]) > stat["ci95"] else text

    budgets = [[b["model"], f"{b['budget_bits']:g}", *(choice(b["choices"][m]) for m in ("rtn", "gptq", "liftquant")),
                resolved(b["liftquant_minus_rtn"]), resolved(b["liftquant_minus_gptq"])] for b in summary["budgets"]]
    fp32 = summary["fp32_test"]
    return "\n\n".join([
        (source_line("gptq_liftquant.json", meta_of(data)) + f" fp32 test cross-entropy: LM "
         f"{fp32['lm']['mean']:.4f} nats/byte, digits {fp32['digits']['mean']:.4f}."),
        "LM, every point (test cross-entropy above fp32, paired by seed; perplexity ratio = exp of the mean):",
        table(["method", "grid / configuration", "input scaling", "bits/weight", "test CE above fp32",
               "perplexity ratio"], rows),
        ("The budget claim: per budget in bits per weight, each method's point with the best validation mean among "
         "those that fit (either input-scaling setting), its test excess, and LiftQuant's paired difference to the "
         "other two choices (negative: LiftQuant better; bold: the 95% interval excludes 0):"),
        table(["model", "budget", "RTN", "GPTQ", "LiftQuant", "LiftQuant - RTN", "LiftQuant - GPTQ"], budgets),
    ])


ORACLE_FUNCTIONS = {"quantized_net": "MXFP4 digits MLP"}


def render_comparison_oracle() -> str:
    data = load("comparison_oracle.json")

    def name(r: dict) -> str:
        return ORACLE_FUNCTIONS.get(r["function"], r["function"])

    runs = data["scaling"]
    exact = sum(r["queries"] == r["bound"] for r in runs)
    below = sum(r["error"] < r["epsilon"] for r in runs)
    scaling = [[name(r), r["n"], f"{r['epsilon']:g}", r["seeds"], f"{r['queries_max']:.0f}", f"{r['bound_max']:.0f}",
                f"{r['error_max']:.2g}"] for r in data["scaling_summary"]]
    tester = [[name(r), r["n"], f"{r['epsilon']:g}", f"{r['queries']:.0f}",
               f"{r['plan_error_close']:.3f} / {r['plan_error_far']:.3f}", pm(flat_stat(r, "error_close")),
               pm(flat_stat(r, "error_far"))] for r in data["tester_summary"]]
    methods = (("comparison_estimator", 4), ("finite_difference", 5), ("two_point", 3), ("sign_average", 3))
    equal = [[name(r), f"{r['epsilon']:g}", r["queries"], *(pm(flat_stat(r, key), digits) for key, digits in methods)]
             for r in data["equal_queries_summary"]]
    return "\n\n".join([
        source_line("comparison_oracle.json", data["meta"]) + f" Seeds {', '.join(map(str, data['meta']['seeds']))}.",
        (f"Estimator: measured queries equal the bound in {exact} of {len(runs)} runs, and the error is below "
         f"epsilon in {below} of {len(runs)} (largest over seeds):"),
        table(["function", "n", "epsilon", "seeds", "queries", "bound", "max error"], scaling),
        (f"Tester error rates at the boundaries, mean over seeds x {data['meta']['trials']} trials with 95% interval, "
         "against the plan's exact worst case:"),
        table(["function", "n", "epsilon", "queries", "plan (close / far)", "measured close, said far",
               "measured far, said close"], tester),
        "Equal queries (n = 64, the estimator's own count), error ||estimate - g||, mean +- 95%:",
        table(["function", "epsilon", "queries", "comparison estimator", "finite differences (values)",
               "two-point (values)", "sign average (comparisons)"], equal),
    ])


SUDOKU_GREEDY = ("confidence", "entropy", "margin")


def render_sudoku(file: str) -> str:
    data = load(file)
    cells = {(r["format"], r["rounds"], r["method"]): r for r in data["summary"]}
    budgets = list(dict.fromkeys((r["format"], r["rounds"]) for r in data["summary"]))
    methods = (*SUDOKU_GREEDY, "info_gain")
    solve, errors = [], []
    for fmt, rounds in budgets:
        by = {m: cells[fmt, rounds, m] for m in methods}
        best = max(SUDOKU_GREEDY, key=lambda m: by[m]["solve_rate"]["mean"])
        gain = by[best]["info_gain_minus_this_solve_rate"]
        ms = " / ".join(f"{1e3 * by[m]['seconds_per_puzzle']['mean']:.2f}" for m in ("confidence", "info_gain"))
        solve.append([fmt, by["info_gain"]["forward_calls"], *(pm(by[m]["solve_rate"], 3, "±") for m in methods),
                      f"{pm(gain, 3, '±', signed=True)} ({best})", by["info_gain"]["rows"], ms])
        errors.append([fmt, by["info_gain"]["forward_calls"], *(f"{by[m]['violations']['mean']:.2f}" for m in methods),
                       *(f"{by[m]['cell_accuracy']['mean']:.3f}" for m in methods)])
    return "\n\n".join([
        source_line(file, meta_of(data)) + f" Seeds {', '.join(map(str, data['seeds']))}; {data['test_puzzles']} test "
        "puzzles. Solve rate, mean ± 95% t-interval over seeds; the difference to the best greedy sampler is paired by "
        "seed:",
        table(["weights", "forward calls", "confidence", "entropy", "margin", "Info-Gain",
               "Info-Gain − best greedy (paired)", "Info-Gain rows / puzzle", "ms / puzzle: confidence / Info-Gain"],
              solve),
        "Mean constraint violations per puzzle and cell accuracy (means over seeds):",
        table(["weights", "forward calls", *(f"{what}: {m}" for what in ("violations", "cell accuracy")
                                             for m in ("confidence", "entropy", "margin", "Info-Gain"))], errors),
    ])


def render_usable_information() -> str:
    data = load("usable_information.json")

    directed = [f"{kind}_{d}_{what}" for kind, what in (("info", "linear"), ("info", "mlp"))
                for d in ("a_to_b", "b_to_a")] + [f"stitch_{d}_{task}" for task in ("fine", "coarse")
                                                   for d in ("a_to_b", "b_to_a")]
    asym = [[r["width_a"], r["layer"] + 1, *(pm(flat_stat(r, k), 2 if k.startswith("info") else 3) for k in directed[:4]),
             f"{r['cka']:.3f}", f"{r['rsa']:.2f}", *(pm(flat_stat(r, k)) for k in directed[4:])]
            for r in data["pairs_summary"]]
    diffs = []
    for width in dict.fromkeys(r["width_a"] for r in data["pairs"]):
        pairs = [r for r in data["pairs"] if r["width_a"] == width]
        diffs.append([width, *(pm(interval([r[f"{k}_a_to_b_{x}"] - r[f"{k}_b_to_a_{x}"] for r in pairs]), digits,
                                  signed=True)
                               for k, x, digits in (("stitch", "fine", 3), ("stitch", "coarse", 3), ("info", "linear", 2),
                                                    ("info", "mlp", 2))), len(pairs)])
    inv = data["invertible_summary"][0]
    keys = ("cka", "rsa", "info_fz_to_z_linear", "info_fz_to_z_mlp", "info_z_to_fz_linear", "info_z_to_fz_mlp",
            "info_z_to_z_mlp")
    quant = {(r["format"], r["layer"]): r for r in data["quantization_summary"]}
    formats = list(dict.fromkeys(f for f, _ in quant))
    layers = sorted({layer for _, layer in quant})
    qrows = [[f, *(pm(flat_stat(quant[f, layer], "info_quant_to_float"), 2) for layer in layers),
              f"{quant[f, 0]['cka']:.5f}", f"{quant[f, 0]['accuracy']:.3f}"] for f in formats]
    accuracy = {}
    for name, acc in data["network_accuracy"].items():
        accuracy.setdefault(int(name[1:].split("s")[0]), []).append(acc)
    return "\n\n".join([
        (source_line("usable_information.json", data["meta"]) + f" Seeds {', '.join(map(str, data['meta']['seeds']))}; "
         "means +- 95% t-interval over seeds. Test accuracy of the networks: "
         + ", ".join(f"width {w} {min(a):.3f}-{max(a):.3f}" for w, a in accuracy.items()) + "."),
        "**Asymmetry** (I_V in nats per coordinate; \"A -> B\" for stitching is A's front into B's back):",
        table(["A width", "hidden layer", "I_V(A->B) linear", "I_V(B->A) linear", "I_V(A->B) MLP", "I_V(B->A) MLP",
               "CKA", "RSA", "stitch A->B fine", "stitch B->A fine", "stitch A->B coarse", "stitch B->A coarse"], asym),
        "A->B minus B->A, paired over both layers and the seeds:",
        table(["A width", "stitching, fine", "stitching, coarse", "I_V linear", "I_V MLP", "pairs"], diffs),
        "**Invertible nonlinear map**:",
        table(["linear CKA(z, f(z))", "RSA", "I_V(f(z) -> z) linear", "I_V(f(z) -> z) MLP", "I_V(z -> f(z)) linear",
               "I_V(z -> f(z)) MLP", "I_V(z -> z) MLP (ceiling of the family)"], [[pm(flat_stat(inv, k), 2) for k in keys]]),
        "**What quantization destroys** (width 256, linear family, I_V(quantized -> float) per coordinate):",
        table(["format", *(f"hidden layer {layer + 1}" if layer < layers[-1] else "logits" for layer in layers),
               "CKA hidden layer 1", "accuracy"], qrows),
    ])


def render_ossd() -> str:
    data = load("ossd.json")
    summary = data["summary"]
    rows = [[f"`{v}`", pm(summary[f"novel_ap50_{v}"]), pm(summary[f"base_ap50_{v}"]),
             pm(summary[f"novel_ap50_{v}_minus_base"], signed=True) if v != "base" else "",
             ", ".join(f"{a:g}" for a in summary[f"alpha_{v}"]["values"]),
             ", ".join(f"{w:g}" for w in summary[f"semantic_weight_{v}"]["values"]) if data["variants"][v][0] else ""]
            for v in data["variants"]]
    return "\n\n".join([
        source_line("ossd.json", meta_of(data)) + f" Mean and 95% t-interval over seeds "
        f"{', '.join(map(str, data['seeds']))} (AP50, test; `alpha` and the semantic distillation weight, of "
        f"{', '.join(f'{w:g}' for w in data['semantic_weights'])}, chosen per seed on validation novel scenes):",
        table(["variant", "novel AP50", "base AP50", "novel AP50 minus `base`, paired by seed", "alpha per seed",
               "semantic weight per seed"], rows),
    ])


def render_meanflow_policy() -> str:
    data = load("meanflow_policy.json")
    tasks = data["tasks"]
    costs = [[r["method"], r["NFE"], *(pm(r["success"][t], 2, "±") for t in tasks),
              pm(r["success_mean_over_tasks"], 2, "±"), pm(r["train_s"], 0, "±"),
              *(pm(r[k], d, "±") if r[k] else "" for k, d in (("peak_rss_increase_mib", 0), ("rss_vs_jvp", 2),
                                                               ("step_ms", 0), ("step_vs_jvp", 2)))]
             for r in data["costs"]]
    gaps = [[f"{g['method']} at {g['NFE']} NFE", pm(g, 2, "±", signed=True), f"{g['p']:.2g}",
             f"{g['below']} of {g['pairs']}"] for g in data["omp_less"]]
    meta = data["meta"]
    return "\n\n".join([
        source_line("meanflow_policy.json", meta) + f" Success rate (mean ± 95% t-interval over seeds "
        f"{', '.join(map(str, data['seeds']))}, each on {meta['config']['eval_episodes']} held-out episodes); "
        f"training time of {meta['config']['steps']} steps at batch {meta['config']['batch']}, one thread, "
        f"{meta['jobs']} runs at once; peak memory and step time at batch {data['memory'][0]['batch']}, a fresh "
        "process per method and seed, the JVP of plain MeanFlow as the reference:",
        table(["method", "NFE", *tasks, "mean over tasks", "train (s)", "peak RSS increase (MiB)", "RSS vs JVP",
               "step (ms)", "step vs JVP"], costs),
        "OMP at one network evaluation less each other row, paired by task and seed:",
        table(["OMP (1 NFE) less", "success difference", "p (paired t)", "OMP lower on"], gaps),
    ])


def render_liftquant_accuracy() -> str:
    data = load("liftquant_accuracy.json")
    rows = []
    for r in sorted(data["rows"], key=lambda r: (round(r["bits_per_weight"], 3), r["method"])):
        label = r["method"]
        if "formats" in r:
            counts = Counter(f.removeprefix("liftquant_") for f in r["formats"].values())
            label += " (" + ", ".join(f"{f} x{n}" if n > 1 else f for f, n in counts.most_common()) + ")"
        rows.append([label, f"{r['bits_per_weight']:.3f}", f"{r['perplexity']:.4f}", r.get("finetune_steps", "")])
    return "\n\n".join([
        source_line("liftquant_accuracy.json", meta_of(data)) + f" Validation perplexity on "
        f"{data['rows'][0]['tokens']} tokens:",
        table(["method", "bits/weight", "perplexity", "fine-tuning steps"], rows),
    ])


def render_diloco(file: str) -> str:
    """One fl_diloco.py grid: a condition column where the file has faulty links, a missing column where
    anything went missing."""
    data = load(file)
    rows = data["table"]
    faulty = [r["drop"] > 0 or r["outage"] > 0 or r["straggler"] >= 0 for r in rows]
    conditions, missing = any(faulty), any(r["missing"] for r in rows)
    header = [*(["condition"] if conditions else []), "bandwidth Mbit/s", "run", "final loss", "utilization",
              "sim time (s)", "MB sent", "disagreement", *(["missing"] if missing else [])]
    cells = [[*([("faults" if bad else "healthy")] if conditions else []), f"{r['bandwidth Mbit/s']:g}", r["run"],
              f"{r['final loss']:.3f}", f"{r['utilization']:.3f}", f"{r['sim time (s)']:.1f}", f"{r['MB sent']:.1f}",
              f"{r['disagreement']:.3f}", *([r["missing"]] if missing else [])] for r, bad in zip(rows, faulty, strict=True)]
    goal = [[f"{g['bandwidth Mbit/s']:g}", f"{g['diloco utilization']:.3f}", "yes" if g["applies (diloco < 60%)"] else "no",
             f"{g['gossip k=0 utilization']:.3f}", f"{g['loss gap']:+.4f}", "yes" if g["met"] else "no"]
            for g in data["goal"]]
    return "\n\n".join([
        source_line(file, data["meta"]),
        table(header, cells),
        "The goal check (healthy network, gossip k = 0 against DiLoCo; loss gap = gossip's final loss less DiLoCo's):",
        table(["bandwidth Mbit/s", "diloco utilization", "applies (diloco < 60%)", "gossip k=0 utilization",
               "loss gap", "met"], goal),
    ])


def render_diloco_grid(file: str) -> str:
    """fl_diloco.py's seed summary: per condition, bandwidth and run, mean +- 95% interval over seeds."""
    data = load(file)

    def cell(stat, digits=3):
        return "–" if stat is None else pm(stat, digits, "±")

    lag = any(s.get("slowest worker behind (s)") for s in data["summary"])  # a grid where gossip workers fell behind
    rows = [[s["condition"], f"{s['bandwidth Mbit/s']:g}", s["run"], cell(s["mean worker loss"]),
             cell(s["worst worker loss"]), cell(s["oracle loss"]), cell(s["utilization"], 2), cell(s["sim time (s)"], 1),
             f"{s['reached target']}/{len(s['seeds'])}", cell(s["time to target (s)"], 1), cell(s["MB sent"], 1),
             cell(s["updates missed"], 1), cell(s["inner steps lost per worker"], 1),
             *([cell(s["slowest worker behind (s)"], 1), cell(s["slowest worker behind (rounds)"], 1)] if lag else [])]
            for s in sorted(data["summary"], key=lambda s: (s["condition"], s["bandwidth Mbit/s"], s["run"]))]
    goal = [[f"{g['bandwidth Mbit/s']:g}", g["topology"], f"{g['diloco utilization']:.3f}",
             f"{g['gossip k=0 utilization']:.3f}", f"{g['loss gap']:+.4f}", "yes" if g["met"] else "no"]
            for g in data["goal"]]
    seeds = sorted({seed for s in data["summary"] for seed in s["seeds"]})
    parts = [
        source_line(file, data["meta"]) + f" Seeds {', '.join(map(str, seeds))}; mean ± 95% interval over seeds.",
        table(["condition", "bandwidth Mbit/s", "run", "mean worker loss", "worst worker loss",
               "oracle loss (average model)", "utilization", "sim time (s)", "reached target", "time to target (s)",
               "MB sent",
               "updates missed", "inner steps lost per worker",
               *(["slowest worker behind (s)", "slowest worker behind (rounds)"] if lag else [])], rows),
        ("Target: within 2% of the final loss DiLoCo reaches on the healthy network at the same bandwidth and seed. "
         "Updates missed: DiLoCo's worker updates past the deadline (their inner steps are lost), gossip's neighbour "
         "payloads not there in time (their weight stays on the receiver's own parameters)."
         + (" Slowest worker behind: gossip's staleness, the most the slowest worker finished a round after the "
            "median worker, in seconds and in the run's mean round times." if lag else "")),
    ]
    if goal:  # a grid with gossip runs
        parts += [("The goal check per gossip topology (healthy network, means over seeds; loss gap = gossip k = 0's "
                   "mean worker loss less DiLoCo's, relative):"),
                  table(["bandwidth Mbit/s", "topology", "diloco utilization", "gossip k=0 utilization", "loss gap",
                         "met"], goal)]
    return "\n\n".join(parts)


def render_fluxnet_study() -> str:
    """Rollout error per problem and variant (fp32 / MXFP8 / MXFP4 weights), and the worst drift and bound
    violation of each variant over problems and formats."""
    data = load("fluxnet_study.json")
    rows = data["rows"]
    variants = list(dict.fromkeys((r["arch"], r["head"]) for r in rows if r["arch"] != "persistence"))
    formats = list(dict.fromkeys(r["format"] for r in rows if r["arch"] != "persistence"))
    by = {(r["pde"], r["arch"], r["head"], r["format"]): r for r in rows}
    names = [f"{arch} {head}".strip() for arch, head in variants]
    errors = [[pde, f"{by[pde, 'persistence', '', '']['rollout_rel_l2']:.3g}",
               *(" / ".join(f"{by[pde, arch, head, fmt]['rollout_rel_l2']:.3g}" for fmt in formats)
                 for arch, head in variants)]
              for pde in dict.fromkeys(r["pde"] for r in rows)]
    of = {v: [r for r in rows if (r["arch"], r["head"]) == v] for v in variants}
    worst = [["largest mass drift", *(f"{max(r['mass_drift'] for r in of[v]):.2g}" for v in variants)],
             ["largest share of values out of bounds",
              *(f"{max(r['lower_violations'] + r['upper_violations'] for r in of[v]):.3g}" for v in variants)]]
    return "\n\n".join([
        source_line("fluxnet_study.json", data["meta"]) + f" Rollout relative L2, {' / '.join(formats)} weights; "
        "persistence is the error of never moving:",
        table(["problem", "persistence", *names], errors),
        table(["", *names], worst),
    ])


# (results file, methods shown from it, label suffix): each run changes one thing against fl_rieselect.json.
RIESELECT_ROWS = (("fl_rieselect.json", ("full", "random", "topk", "rieselect"), ""),
                  ("fl_rieselect_nocap.json", ("rieselect",), ", no cap (`--growth 1e9`)"),
                  ("fl_rieselect_coordinated.json", ("random", "topk"), ", coordinated (ablation)"),
                  ("fl_rieselect_b0.5.json", ("random", "topk", "rieselect"), ""),
                  ("fl_rieselect_b0.5_overlap0.3.json", ("rieselect",), ", overlap 0.3"),
                  ("fl_rieselect_b0.5_coordinated.json", ("random", "topk"), ", coordinated (ablation)"))


def render_rieselect() -> str:
    """The methods' table (one row per method and run), then RieSelect's average loss less each other
    row's at the same budget and against full upload, seed by seed."""
    from edgekit.jobs.fl import CONTINUAL_TASKS

    sources, rows, per_seed = [], [], {}
    for file, methods, suffix in RIESELECT_ROWS:
        data = load(file)
        sources.append(f"- {source_line(file, data['meta'])}")
        summary = {r["method"]: r for r in data["table"]}
        for method in methods:
            runs = sorted((r for r in data["runs"] if r["job"]["selection"] == method), key=lambda r: r["job"]["seed"])
            covered = [r["layers_covered"] for r in runs if "layers_covered" in r]
            label, budget = method + suffix, summary[method]["budget"]
            per_seed[label, budget] = {r["job"]["seed"]: r["average_loss"] for r in runs}
            task_means = [sum(r["task_losses"][i] for r in runs) / len(runs) for i in range(len(CONTINUAL_TASKS))]
            rows.append([label, f"{budget:g}", summary[method]["average loss"],
                         " / ".join(f"{r['average_loss']:.3f}" for r in runs),
                         " / ".join(f"{loss:.3f}" for loss in task_means),
                         f"{float(summary[method]['forgetting']):.3f}", f"{summary[method]['uplink MB']:.2f}",
                         f"{sum(covered) / len(covered):.2f}" if covered else "–"])
    seeds = sorted(per_seed["full", 1.0])
    differences = []
    for budget in sorted({b for _, b in per_seed if b < 1}):
        mine = per_seed["rieselect", budget]
        for (label, other_budget), theirs in per_seed.items():
            if label != "rieselect" and other_budget in (budget, 1.0):
                delta = [mine[s] - theirs[s] for s in seeds]
                differences.append([f"{budget:g}", label, f"{other_budget:g}",
                                    *(f"{d:+.3f}" for d in delta), f"{sum(delta) / len(delta):+.3f}",
                                    f"{sum(d < 0 for d in delta)} of {len(delta)}"])
    return "\n\n".join([
        "\n".join(sources),
        table(["method", "budget", "average loss (mean ± SD over seeds)", "per seed",
               f"final loss per task ({' / '.join(CONTINUAL_TASKS)}, mean)", "forgetting", "uplink MB", "covered"], rows),
        "RieSelect's average loss less each other run's, seed by seed (negative: RieSelect lower):",
        table(["RieSelect budget", "against", "its budget", *(f"seed {s}" for s in seeds), "mean", "RieSelect lower on"],
              differences),
    ])


def render_rieselect_study() -> str:
    """The paper's RieSelect, its variants and the baselines on test data over task orders and seeds;
    paired differences; why the fixed basin stalls (diagnosis and the validation radius sweep)."""
    data = load("fl_rieselect_study.json")
    protocol = data["protocol"]
    rows = [[t["row"], f"{t['budget']:g}", pm(t["test_loss"], 3, "±"), pm(t["forgetting"], 3, "±"),
             f"{t['uplink_mb']:.2f}", f"{t['uplink_vs_full']:.1f}x", f"{t['layers_covered']:.2f}"] for t in data["table"]]
    pairs = [[c["row"], f"{c['budget']:g}", c["against"], pm(c, 3, "±", signed=True), f"{c['p']:.3f}",
              f"{c['lower_on']} of {c['pairs']}"] for c in data["comparisons"]]
    stalls = [[d["row"], f"{d['budget']:g}", f"{d['radius']:g}", f"{d['stalled_fraction']:.2f}",
               pm(d["final_penalty"], 3, "±"), pm(d["predicted_increase"], 3, "±"), pm(d["measured_forgetting"], 3, "±"),
               f"{d['measured_over_predicted']:.1f}" if d["measured_over_predicted"] is not None else "–"]
              for d in data["diagnosis"]]
    sweep = [[d["row"], f"{d['radius']:g}", f"{d['validation_loss']:.4f}", f"{d['stalled_fraction']:.2f}",
              f"{d['final_penalty']['mean']:.3f}", f"{d['measured_forgetting']['mean']:.3f}"]
             for d in data["radius_sweep"]]
    orders = "; ".join(" → ".join(order) for order in protocol["orders"])
    chosen = ", ".join(f"{row}: {', '.join(f'{k} {v:g}' for k, v in knob.items())}"
                       for row, knob in protocol["chosen"].items())
    return "\n\n".join([
        source_line("fl_rieselect_study.json", meta_of(data)) + f" Task orders: {orders}; seeds "
        f"{', '.join(map(str, protocol['seeds']))} in each ({len(protocol['orders']) * len(protocol['seeds'])} runs a "
        f"row). Chosen on validation loss (seed {protocol['tune_seed']}, first order, budget {protocol['budgets'][0]:g}): "
        f"{chosen}. Test loss: final test loss averaged over the tasks (nats/byte), mean ± 95% t-interval over "
        "the runs; forgetting likewise; uplink: total bytes sent by all clients, and how many times less than full upload.",
        table(["row", "budget", "test loss", "forgetting", "uplink MB", "less uplink", "covered"], rows),
        ("Each RieSelect row less another at the same budget (or full upload), paired over (order, seed), "
        "mean ± 95% t-interval, the paired t-test's p, and how many pairs RieSelect's loss is lower on:"),
        table(["RieSelect", "budget", "against", "test loss difference", "p", "lower on"], pairs),
        (f"The fixed basin, over the same runs: the fraction of the server's steps below {protocol['stalled_step']:g} "
        "(stalled), the penalty P it ended with against the radius, and each earlier task's predicted loss increase "
        "(its term of P at the end) beside its measured forgetting (test):"),
        table(["row", "budget", "radius", "stalled steps", "final P", "predicted increase per task",
               "measured forgetting per task", "measured / predicted"], stalls),
        (f"The radius on validation (tuning seed, first order, first budget, learning rate "
         f"{data['radius_sweep'][0]['lr']:g}): one run each."),
        table(["row", "radius", "validation loss", "stalled steps", "final P", "measured forgetting"], sweep),
    ])


def render_fl_engine() -> str:
    data = load("fl_engine.json")
    overhead = [[r["method"], r["rounds"], *(f"{r[k]:.2f}" for k in ("total_s", "training_s")),
                 *(f"{r[k]:.3f}" for k in ("evaluation_s", "engine_s", "overhead_s")),
                 *(f"{r[k]:.2f}" for k in ("engine_%", "overhead_%", "messages_MB")), f"{r['final_loss']:.3f}"]
                for r in data["overhead"]]
    scale = [[r["method"], r["clients"], r["rounds"], f"{r['wall_s']:.1f}", f"{r['s_per_round']:.2f}",
              f"{r['engine_s']:.2f}", f"{r['client_s']:.1f}", f"{r['messages_MB']:.1f}", f"{r['accuracy']:.3f}",
              f"{r['accuracy_round0']:.3f}"] for r in data["scale"]]
    return "\n\n".join([
        source_line("fl_engine.json", data["meta"]),
        table(["method", "rounds", "total (s)", "training (s)", "evaluation (s)", "engine (s)", "overhead (s)",
               "engine %", "overhead %", "messages MB", "final loss"], overhead),
        "Scale, same run: 100 clients of the digits MLP (hidden 64), 5 local steps a round:",
        table(["method", "clients", "rounds", "wall (s)", "s per round", "engine (s)", "clients (s)", "messages MB",
               "accuracy", "accuracy at round 0"], scale),
    ])


def render_fluxnet_strides() -> str:
    data = load("fluxnet_strides.json")
    labels = {"fluxnet": "FluxNet", "flux_rate": "flux rate"}
    summary = {(r["pde"], r["arch"], r["stride"]): r for r in data["summary"]}
    still = {(r["pde"], r["stride"]): r["rollout_rel_l2"] for r in data["persistence"]}

    def error(stat: dict) -> str:  # a blown-up rollout is stored as the string "inf" or "nan"
        mean, half = float(stat["mean"]), float(stat["ci95"])
        return f"{mean:.3f} ± {half:.3f}" if math.isfinite(mean) else str(stat["mean"])

    def worst(stat: dict, fmt: str) -> str:
        return format(max(float(v) for v in stat["values"]), fmt)

    rows = []
    for name in data["breakdown"]:
        for stride in data["strides"]:
            fx, fr = summary[name, "fluxnet", stride], summary[name, "flux_rate", stride]
            rows.append([name, stride, f"{still[name, stride]:.3f}", error(fx["rollout_rel_l2"]),
                         error(fr["rollout_rel_l2"]), worst(fx["mass_drift"], ".1e"), worst(fr["mass_drift"], ".1e"),
                         worst(fx["out_of_bounds"], ".2%"), worst(fr["out_of_bounds"], ".2%"),
                         f"{fx['lr']:g} / {fr['lr']:g}"])
    breaks = "; ".join(
        f"{name}: " + ", ".join(f"{labels[arch]} at stride {s}" if s is not None else f"{labels[arch]} never"
                                for arch, s in by_arch.items())
        for name, by_arch in data["breakdown"].items())
    return "\n\n".join([
        (source_line("fluxnet_strides.json", meta_of(data)) + f" Seeds {', '.join(map(str, data['seeds']))}; "
         f"{data['steps']} optimizer steps for every surrogate and stride; rollouts over {data['horizon']} "
         f"solver-sampled steps; mean ± 95% t-interval over seeds (drift and out-of-bounds: the worst seed)."),
        table(["problem", "stride", "persistence", "FluxNet rollout rel. L2", "flux rate rollout rel. L2",
               "FluxNet drift", "flux rate drift", "FluxNet out of bounds", "flux rate out of bounds",
               "lr (FluxNet / flux rate)"], rows),
        f"First stride where the mean rollout error is no better than persistence's (or not finite): {breaks}.",
    ])


DIRECTEDIT_LABELS = {"plain": "plain inversion", "plain_blend": "plain inversion + mask blend",
                     "nulltext": "null-text optimisation + mask blend",
                     "directedit_noinject": "DirectEdit without value injection", "directedit": "DirectEdit"}


def render_directedit() -> str:
    data = load("directedit.json")
    summary, runs, steps = data["summary"], data["runs"], data["config"]["edit_steps"]

    def per_seed(key: str) -> str:
        return ", ".join(f"{v:g}" for v in summary[key]["values"])

    rows = []
    for method, (_res, _inj, _blend, null) in data["methods"].items():
        nfe = summary[f"nfe_{method}"]["values"]
        cost = f"{min(nfe):g}" if min(nfe) == max(nfe) else f"{min(nfe):g}-{max(nfe):g}"
        if null:
            cost += f" + {summary[f'backward_{method}']['mean']:g} backward"
        diff = summary.get(f"edit_success_directedit_minus_{method}")
        rows.append([DIRECTEDIT_LABELS.get(method, method), per_seed(f"guidance_{method}"), cost,
                     pm(summary[f"edit_success_{method}"], 3, "±"), pm(summary[f"kept_source_{method}"], 3, "±"),
                     pm(summary[f"bg_psnr_{method}"], 1, "±"),
                     f"{diff['mean']:+.3f} ± {diff['ci95']:.3f}" if diff else "–"])
    fmts = ("float", "mxfp8", "mxfp4")
    recon = [[label, *(f"{summary[f'recon_err_{m}_{f}']['mean']:.3g} ± {summary[f'recon_err_{m}_{f}']['ci95']:.2g}"
                       for f in fmts)] for m, label in (("directedit", "DirectEdit source path"),
                                                        ("plain", "plain inversion"))]
    guided = [[label, pm(summary[f"recon_err_{m}_guided"], 3, "±")] for m, label in (
        ("plain", "plain inversion"), ("directedit", "DirectEdit edit path, source caption"),
        ("nulltext", "null-text optimisation"))]
    return "\n\n".join([
        (source_line("directedit.json", meta_of(data)) + f" Seeds {', '.join(map(str, data['seeds']))}; "
         f"{data['config']['eval_scenes']} test scenes per seed, {steps} Euler steps; mean ± 95% t-interval over seeds. "
         f"Training took {', '.join(str(round(r['train_seconds'])) for r in runs)} s per seed (1 thread)."),
        table(["method", "guidance per seed", "NFE (forward)", "edit success", "source colour kept",
               "background PSNR (dB, 120 = exact)", "DirectEdit − method, paired"], rows),
        (f"DirectEdit's value-injection depth per seed: {per_seed('inject_steps')} of {steps} steps. Max |reconstruction "
         "− input| without guidance, by weight format:"),
        table(["inversion", "float32", "MXFP8", "MXFP4"], recon),
        (f"Max |reconstruction − input| under guidance (float32; scale per seed {per_seed('guidance_nulltext')}, "
         "null-text's choice):"),
        table(["path", "max error"], guided),
    ])


RENDERERS = {
    "cgmmd": render_cgmmd,
    "codecs": render_codecs,
    "comparison-oracle": render_comparison_oracle,
    "dcla": render_dcla,
    "directedit": render_directedit,
    "diloco": lambda: render_diloco("fl_diloco.json"),
    "diloco-compressed": lambda: render_diloco("fl_diloco_compressed.json"),
    "diloco-shared": lambda: render_diloco("fl_diloco_shared.json"),
    "diloco-grid": lambda: render_diloco_grid("fl_diloco_grid.json"),
    "diloco-deadline": lambda: render_diloco_grid("fl_diloco_deadline.json"),
    "dnachunker": render_dnachunker,
    "fedrgl": render_fedrgl,
    "fluxnet-strides": render_fluxnet_strides,
    "fluxnet-study": render_fluxnet_study,
    "fl-engine": render_fl_engine,
    "fuzzeval": render_fuzzeval,
    "gemv": render_gemv,
    "gptq": render_gptq,
    "labbuilder": render_labbuilder,
    "liftquant-accuracy": render_liftquant_accuracy,
    "liftquant-search": render_liftquant_search,
    "meanflow-policy": render_meanflow_policy,
    "mx-training": render_mx_training,
    "nemo": render_nemo,
    "ossd": render_ossd,
    "phasealign": render_phasealign,
    "rieselect": render_rieselect,
    "rieselect-study": render_rieselect_study,
    "sudoku-4x4": lambda: render_sudoku("sudoku_infogain.json"),
    "sudoku-9x9": lambda: render_sudoku("sudoku_infogain_9x9.json"),
    "usable-information": render_usable_information,
    "user-models": render_user_models,
}


def render_page(text: str) -> str:
    def replace(match: re.Match) -> str:
        name = match["name"]
        if name not in RENDERERS:
            raise SystemExit(f"unknown results block {name!r}; renderers: {', '.join(RENDERERS)}")
        return f"{match[1]}{RENDERERS[name]()}\n{match[4]}"

    return BLOCK.sub(replace, text)


def stale_pages() -> list[Path]:
    """Pages whose generated blocks differ from what the committed results render."""
    return [page for page in PAGES if page.read_text() != render_page(page.read_text())]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a page is out of date")
    args = parser.parse_args()
    stale = stale_pages()
    if args.check:
        for page in stale:
            print(f"{page.relative_to(ROOT)} differs from what benchmarks/render_docs.py renders", file=sys.stderr)
        raise SystemExit(1 if stale else 0)
    for page in stale:
        page.write_text(render_page(page.read_text()))
        print(f"rendered {page.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
