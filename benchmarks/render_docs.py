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
import re
import sys
from pathlib import Path

from edgekit.output import markdown_table

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
    return {**data["provenance"], **({"command": data["command"]} if "command" in data else {})}


def pm(stat: dict, digits: int = 3, sign: str = "+-") -> str:
    """``mean +- 95% half-width`` of a ``seed_stats.interval`` record (pages differ in the sign they print)."""
    return f"{stat['mean']:.{digits}f} {sign} {stat['ci95']:.{digits}f}"


def table(header: list[str], rows: list[list]) -> str:
    return markdown_table([dict(zip(header, row, strict=True)) for row in rows], header)


def source_line(file: str, meta: dict) -> str:
    """Where the figures come from: file, command, commit, machine, threads and load."""
    sha = meta.get("git_sha", "unknown")
    dirty = " (**made on a tree with uncommitted changes**)" if sha.endswith("-dirty") else ""
    cpu = meta.get("cpu", {})
    ext = ", ".join(e for e in cpu.get("vector_extensions", []) if e.startswith(("avx", "asimd", "sve")))
    load_before = cpu.get("load_average")
    load_after = meta.get("load_average_after")
    loads = f"load average {load_before[0]} before" if load_before else "load not recorded"
    if load_after:
        loads += f", {load_after[0]} after"
    return (f"From `benchmarks/results/{file}`, written by `{meta.get('command', 'unknown command')}` at git "
            f"{sha[:10]}{dirty} on {cpu.get('model', 'an unknown CPU')} ({ext or 'no vector extensions recorded'}), "
            f"{meta.get('threads', '?')} thread{'' if meta.get('threads') == 1 else 's'}, {loads}.")


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
    return "\n\n".join([source_line("nemo.json", meta_of(data)), table(["condition", "accuracy", "per seed"], rows)])


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
        error = (f"{r['w1']:.4f} +- {r['w1_ci95']:.4f}" if "w1" in r else f"MSE {r['mse']:.4f} +- {r['mse_ci95']:.4f}")
        rows.append([DCLA_TARGETS.get(r["target"], r["target"]), DCLA_PENALTIES.get(r["penalty"], r["penalty"]),
                     DCLA_METHODS.get(r["method"], r["method"]), error,
                     f"{r['coverage90']:.3f} +- {r['coverage90_ci95']:.3f}"])
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

    rows = [[r["graph"], r["noise"], *(pm(r[m], 3, "±") for m in ("fedavg", "fedprox", "fedavg+cadf", "fedrgl")),
             *(diff(r[f"fedrgl vs {m}"]) for m in ("fedavg", "fedprox", "fedavg+cadf"))] for r in data["table"]]
    steps = ("+ pseudo-labels", "+ entropy weights", "+ proximal term")
    ablation = []
    for r in data["ablation"]:
        cells = [pm(r["cadf"], 3, "±")]
        for step in steps:
            test = r[f"{step} vs previous"]
            cells.append(f"{pm(r[step], 3, '±')} ({test['difference']:+.3f}, p {test['p']:.3f}"
                         f"{', *' if test['significant'] else ''})")
        ablation.append([r["graph"], r["noise"], *cells])
    return "\n\n".join([
        (source_line("fl_fedrgl.json", meta_of(data)) + " Test accuracy, mean ± 95% half-width over seeds "
         f"{', '.join(map(str, data['protocol']['seeds']))}; differences are FedRGL less the baseline, with the "
         "paired t-test's p (`*`: p < 0.05):"),
        table(["graph", "noise", "FedAvg", "FedProx", "FedAvg+CADF", "FedRGL", "FedRGL − FedAvg (p)", "− FedProx (p)",
               "− FedAvg+CADF (p)"], rows),
        ("Ablation, the same seeds; each step adds one part to the one before (p: paired t-test against the previous "
        "step):"),
        table(["graph", "noise", "CADF (after warm-up)", "+ pseudo-labels and contrastive loss",
               "+ entropy-weighted aggregation", "+ proximal term (= FedRGL)"], ablation),
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


RENDERERS = {"cgmmd": render_cgmmd, "codecs": render_codecs, "dcla": render_dcla, "directedit": render_directedit, "dnachunker": render_dnachunker, "fedrgl": render_fedrgl, "fuzzeval": render_fuzzeval,
             "labbuilder": render_labbuilder, "liftquant-search": render_liftquant_search, "nemo": render_nemo, "gemv": render_gemv, "mx-training": render_mx_training, "phasealign": render_phasealign,
             "user-models": render_user_models}


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
