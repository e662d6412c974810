"""``edgekit bench``: one model, one format, one target, its backends timed side by side.

In one process and one run, for a target that runs on this machine's CPU:

* ``tvm``: the model compiled by edgekit's passes (import -> plan -> lower -> schedule ->
  build) for the target, planned weights stored as packed codes, timed with TVM's
  ``time_evaluator`` (a C++ loop: no Python call overhead);
* ``onnxruntime``: the float model (``export_onnx`` with an all-``fp32`` plan, or the ONNX
  file itself) at ``ORT_ENABLE_BASIC``;
* ``onnxruntime (quantized graph)``: ``export_onnx`` with the format's plan, the packed codes
  decoded in the graph, at ``ORT_ENABLE_BASIC``;
* ``torch eager``: the float PyTorch module under ``torch.inference_mode``.

onnxruntime and PyTorch are timed with ``time.perf_counter`` around a Python loop of calls.
Each round takes one sample per backend (the mean of enough calls to fill
``MIN_SAMPLE_S``), in an order that rotates from round to round, so drift on a noisy
machine falls on every backend alike; before each sample it waits for the previous
backend's spinning worker threads to go idle (:func:`settle`). Every backend gets the same thread count:
onnxruntime's ``intra_op_num_threads``, ``torch.set_num_threads`` and TVM's thread pool
(``TVM_NUM_THREADS`` is read when that pool starts, once per process; afterwards
``runtime.config_threadpool`` can lower the count but not raise it past the first size).
The thread count each backend really ran with is reported.
"""

from __future__ import annotations

import math
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edgekit.compilers.onnx_export import onnx_session
from edgekit.compilers.pipeline import layer_totals
from edgekit.compilers.preflight import PreflightError, preflight
from edgekit.simulators import weight_formats as wf
from edgekit.targets import host_arch

from .compile import ModelSource, load_model

TVM_THREADS_ENV = "TVM_NUM_THREADS"
MIN_SAMPLE_S = 0.02  # one sample is the mean of as many calls as fill this long
SETTLE_MAX_S = 1.0  # longest wait for spinning worker threads to stop between backends
ORT_LEVEL = "ORT_ENABLE_BASIC"
MIB = 1024 * 1024
FLOAT_ORT = "onnxruntime"
QUANT_ORT = "onnxruntime (quantized graph)"
BACKENDS = ("tvm", FLOAT_ORT, QUANT_ORT, "torch eager")
REFERENCE_BITS = wf.resolve(wf.REFERENCE).bits_per_weight()


class ForeignTarget(ValueError):
    """bench cannot time this target on this machine (its code does not run here), so nothing is benchmarked."""


def target_needs(target) -> str:
    """What a target needs to run, in words: ``aarch64 CPU``, ``CUDA GPU sm_90 on an x86_64 host``."""
    if target.device == "cpu":
        return f"{target.arch or 'its'} CPU"
    gpu = f"{'CUDA ' if target.device == 'cuda' else target.device + ' '}GPU" + (
        f" {target.cuda_arch}" if target.cuda_arch else "")
    return gpu + (f" on an {target.arch} host" if target.arch and target.arch != host_arch() else "")


def check_target(target) -> None:
    """Refuse a target that does not run here, or that bench has no timing path for."""
    from edgekit.targets import runs_here

    if not runs_here(target):
        raise ForeignTarget(f"target {target.name} does not run on this machine ({target_needs(target)} needed); "
                            "nothing benchmarked")
    if target.device != "cpu":
        raise ForeignTarget(f"target {target.name} is a {target.device} target; edgekit bench times CPU targets "
                            "only (TVM, onnxruntime and PyTorch on this machine's CPU); nothing benchmarked")


def configure_tvm_threads(threads: int) -> tuple[int, str]:
    """Ask TVM's thread pool for ``threads`` workers; (workers it has, a note when that differs)."""
    import tvm

    os.environ[TVM_THREADS_ENV] = str(threads)  # read when the pool starts (first parallel call)
    tvm.get_global_func("runtime.config_threadpool")(1, threads)  # 1: kBig, TVM's default mode
    have = int(tvm.get_global_func("runtime.NumThreads")())
    note = ""
    if have != threads:
        note = (f"TVM runs {have} thread(s), not {threads}: its thread pool started earlier in this process "
                f"with {TVM_THREADS_ENV} unset or smaller (TVM's own default on x86 is half the logical CPUs); "
                f"set {TVM_THREADS_ENV}={threads} before starting")
    return have, note


@dataclass
class Backend:
    """One way of running the model: how to call it once, and how to time ``n`` calls."""

    name: str
    fmt: str
    weight_bits: float
    weight_bytes: int
    threads: int
    call: Callable[[], np.ndarray]  # one inference, its first output as NumPy
    mean_time: Callable[[int], float]  # mean seconds per call over n calls
    timing: str
    number: int = 1
    samples: list[float] = field(default_factory=list)  # seconds per call, one per round


def python_timer(fn: Callable[[], object]) -> Callable[[int], float]:
    def mean_time(n: int) -> float:
        start = time.perf_counter()
        for _ in range(n):
            fn()
        return (time.perf_counter() - start) / n

    return mean_time


def settle(max_s: float = SETTLE_MAX_S, slice_s: float = 0.01, busy: float = 0.05) -> float:
    """Wait until the worker threads of the runtime that ran last stop spinning; seconds waited.

    onnxruntime's and TVM's pools spin for tens to hundreds of milliseconds after a call
    (seen here: about 45 ms and 150 ms of CPU); on a small machine the next backend would
    share its cores with them. Waits while this process uses more than ``busy`` of a CPU.
    """
    start = time.perf_counter()
    while time.perf_counter() - start < max_s:
        cpu, wall = time.process_time(), time.perf_counter()
        time.sleep(slice_s)
        if (time.process_time() - cpu) / (time.perf_counter() - wall) < busy:
            break
    return time.perf_counter() - start


def calibrate(backend, min_sample_s: float = MIN_SAMPLE_S) -> int:
    """Calls per sample: enough that one sample lasts at least ``min_sample_s`` (``backend.mean_time``)."""
    settle()
    backend.mean_time(1)  # warm-up
    n = 1
    for _ in range(8):
        t = backend.mean_time(n)
        if t * n >= min_sample_s:
            break
        n = max(n + 1, math.ceil(1.2 * min_sample_s / max(t, 1e-7)))
    return n


def time_interleaved(backends: list, rounds: int, progress: Callable[[Iterable, int], Iterable] | None = None,
                     min_sample_s: float = MIN_SAMPLE_S) -> None:
    """Append ``rounds`` samples to each backend's ``samples`` (seconds per call): one sample per
    backend per round, in an order that rotates from round to round, each taken after the previous
    backend's spinning workers went idle and after one warm-up call. A backend is anything with
    ``mean_time``, ``number`` and ``samples`` as :class:`Backend` has them."""
    for b in backends:
        b.number = calibrate(b, min_sample_s)
    order = range(rounds)
    for r in progress(order, rounds) if progress else order:
        for k in range(len(backends)):
            b = backends[(r + k) % len(backends)]  # rotate who goes first
            settle()  # the previous backend's spinning workers
            b.mean_time(1)  # warm the caches after the previous backend
            b.samples.append(b.mean_time(b.number))


def model_inputs(source: ModelSource, imported, seed: int) -> list[np.ndarray]:
    """Seeded random inputs of the model's input shapes (float), its example inputs otherwise."""
    rng = np.random.default_rng(seed)
    out = []
    for spec in imported.inputs:
        shape, dtype = tuple(spec["shape"]), np.dtype(spec["dtype"])
        if np.issubdtype(dtype, np.floating):
            out.append(rng.standard_normal(shape).astype(dtype))
        elif source.example_inputs:
            out.append(source.example_inputs[len(out)].numpy().astype(dtype))
        else:
            out.append(np.zeros(shape, dtype))
    return out


def tvm_backend(imported, fmt: str, target, inputs: list[np.ndarray], threads: int, log,
                activations: str = "float32") -> tuple[Backend, dict]:
    import tvm
    from tvm import relax

    from edgekit.compilers.build import build
    from edgekit.compilers.lower import lower
    from edgekit.compilers.plan import make_plan
    from edgekit.compilers.schedule import schedule
    from edgekit.targets import tvm_target

    plan = make_plan(imported.layers, fmt)
    problems = preflight(imported, plan, target)
    if problems:
        raise PreflightError(problems)
    log(f"compiling with TVM for {target.name} ({fmt}, {len(plan)} planned layers) ...")
    tvm_tgt = tvm_target(target)
    lowered = lower(imported, plan, "cpu", target=tvm_tgt, activations=activations)  # the kernels compile picks
    executable = build(schedule(lowered.mod, "cpu", tvm_tgt), tvm_tgt)
    vm = relax.VirtualMachine(executable, tvm.cpu())
    args = [tvm.runtime.tensor(x) for x in inputs]
    evaluators = {}

    def call() -> np.ndarray:
        out = vm["main"](*args)
        return (out if hasattr(out, "numpy") else out[0]).numpy()

    def mean_time(n: int) -> float:
        if n not in evaluators:
            evaluators[n] = vm.time_evaluator("main", tvm.cpu(), number=n, repeat=1)
        return float(evaluators[n](*args).results[0])

    totals = layer_totals(lowered.layers)
    stored = totals["codes_bytes"] + totals["scales_bytes"]
    name = "tvm" if activations == "float32" else f"tvm ({activations} activations)"
    backend = Backend(name, fmt, totals["weight_bits"], stored, threads, call, mean_time,
                      "tvm time_evaluator (C++ loop)")
    return backend, {"tvm_target": str(tvm_tgt), "layers": {k: v.to_json() for k, v in lowered.layers.items()}}


def ort_backend(name: str, path, fmt: str, bits: float, stored: int, inputs, threads: int) -> Backend:
    session = onnx_session(path, threads=threads, level=ORT_LEVEL)
    feeds = {i.name: x for i, x in zip(session.get_inputs(), inputs, strict=True)}

    def call() -> np.ndarray:
        return session.run(None, feeds)[0]

    return Backend(name, fmt, bits, stored, threads, call, python_timer(call), "perf_counter over session.run")


def torch_backend(module, inputs, stored: int) -> Backend:
    import torch

    tensors = [torch.from_numpy(x) for x in inputs]
    module = module.eval()

    def call() -> np.ndarray:
        with torch.inference_mode():
            out = module(*tensors)
        return (out if isinstance(out, torch.Tensor) else out[0]).numpy()

    return Backend("torch eager", wf.REFERENCE, REFERENCE_BITS, stored, torch.get_num_threads(), call, python_timer(call),
                   "perf_counter over module(x) in inference_mode")


def bench_model(model: str, fmt: str, target_spec: str, repeat: int = 20, threads: int | None = None,
                seed: int = 0, log: Callable[[str], None] = print,
                progress: Callable[[Iterable, int], Iterable] | None = None,
                min_sample_s: float = MIN_SAMPLE_S, activations: str = "float32") -> dict:
    """Time ``model`` in ``fmt`` on ``target_spec`` with every backend that applies; see the module doc.
    ``activations="mxint8"``: the TVM build's batch-1 GEMVs quantize their input (``compile --activations``).

    Returns ``{"results": [row per backend], "samples": [...], "setup": [one row]}``; raises
    :class:`ForeignTarget` for a target that does not run here (before any work).
    """
    import torch

    from edgekit.compilers.onnx_export import export_onnx, export_onnx_graph
    from edgekit.compilers.plan import check_weight_format, make_plan
    from edgekit.targets import load_target

    fmt = check_weight_format(fmt)
    if repeat < 1:
        raise ValueError(f"repeat must be at least 1, got {repeat}")
    target = load_target(target_spec)
    check_target(target)
    threads = threads or os.cpu_count() or 1
    if threads < 1:
        raise ValueError(f"threads must be at least 1, got {threads}")
    previous_env = os.environ.get(TVM_THREADS_ENV)
    previous_torch = torch.get_num_threads()
    try:
        tvm_threads, thread_note = configure_tvm_threads(threads)
        torch.set_num_threads(threads)
        source, imported = load_model(model, seed, log, max_batch=1)  # timed on one fixed input
        inputs = model_inputs(source, imported, seed)
        tvm_b, tvm_info = tvm_backend(imported, fmt, target, inputs, tvm_threads, log, activations)
        numel = sum(int(np.prod(imported.params[var].shape)) for var in imported.layers.values())
        backends = [tvm_b]
        skipped = []
        with tempfile.TemporaryDirectory(prefix="edgekit-bench-") as tmp:
            if source.is_graph:
                float_path, quant_path = Path(tmp) / "float.onnx", Path(tmp) / "quantized.onnx"
                float_path.write_bytes(source.graph.SerializeToString())
                backends.append(ort_backend(FLOAT_ORT, float_path, wf.REFERENCE, REFERENCE_BITS, 4 * numel, inputs, threads))
                if fmt == wf.REFERENCE:
                    skipped.append("onnxruntime (quantized graph): the fp32 plan is the float graph itself")
                else:
                    totals = export_onnx_graph(source.graph, make_plan(imported.layers, fmt), source.sites,
                                               quant_path)["totals"]
                    backends.append(ort_backend(QUANT_ORT, quant_path, fmt, totals["weight_bits"],
                                                totals["weight_bytes"], inputs, threads))
                skipped.append("torch eager: MODEL is a model file, not a PyTorch module")
            else:
                log("exporting the float and the quantized ONNX graphs ...")
                example = source.example_inputs
                float_path, quant_path = Path(tmp) / "float.onnx", Path(tmp) / "quantized.onnx"
                export_onnx(source.module, example, make_plan(source.module, wf.REFERENCE), float_path)
                backends.append(ort_backend(FLOAT_ORT, float_path, wf.REFERENCE, REFERENCE_BITS, 4 * numel, inputs, threads))
                if fmt == wf.REFERENCE:
                    skipped.append("onnxruntime (quantized graph): the fp32 plan exports the float graph itself")
                else:
                    totals = export_onnx(source.module, example, make_plan(source.module, fmt), quant_path)["totals"]
                    backends.append(ort_backend(QUANT_ORT, quant_path, fmt,
                                                totals["weight_bits"], totals["weight_bytes"], inputs, threads))
                backends.append(torch_backend(source.module, inputs, 4 * numel))
            checks = check_outputs(backends)
            time_interleaved(backends, repeat, progress, min_sample_s)
        for note in skipped:
            log(f"skipped {note}")
        if thread_note:
            log(thread_note)
    finally:
        torch.set_num_threads(previous_torch)
        if previous_env is None:
            os.environ.pop(TVM_THREADS_ENV, None)
        else:
            os.environ[TVM_THREADS_ENV] = previous_env
    reference = backends[1]  # onnxruntime on the float model
    ref_median = statistics.median(reference.samples)
    rows, samples = [], []
    for b in backends:
        ms = [1e3 * s for s in b.samples]
        rows.append({
            "model": source.label, "format": b.fmt, "bits/weight": round(b.weight_bits, 4),
            "size (MiB)": b.weight_bytes / MIB, "backend": b.name, "threads": b.threads,
            "latency (ms)": f"{statistics.fmean(ms):.4g} ± {statistics.pstdev(ms):.2g}",
            "min (ms)": min(ms), "median (ms)": statistics.median(ms),
            "x onnxruntime fp32": ref_median / statistics.median(b.samples),
        })
        samples.append({"backend": b.name, "format": b.fmt, "calls_per_sample": b.number, "timing": b.timing,
                        "mean_ms": statistics.fmean(ms), "std_ms": statistics.pstdev(ms),
                        "samples_ms": ms, **checks[b.name]})
    setup = {"model": source.label, "model_source": source.kind, "target": target.name,
             "tvm_target": tvm_info["tvm_target"], "rounds": repeat, "min_sample_s": min_sample_s,
             "threads_requested": threads, "tvm_threads": tvm_threads, "thread_note": thread_note or None,
             "onnxruntime_level": ORT_LEVEL, "inputs": imported.inputs, "skipped": skipped,
             "weights": numel, "tvm_layers": tvm_info["layers"],
             "size_counts": "stored bytes of the planned (Linear/Conv) weights: codes + scales, or float32"}
    return {"results": rows, "samples": samples, "setup": [setup]}


def check_outputs(backends: list[Backend]) -> dict[str, dict]:
    """Max |difference| of each backend's output from its reference, computed once before timing.

    Quantized backends are compared with the onnxruntime quantized graph where there is one
    (the same codes, decoded exactly), float ones with onnxruntime on the float model.
    """
    outputs = {b.name: b.call() for b in backends}
    by_name = {b.name: b for b in backends}
    out = {}
    for b in backends:
        if b.fmt == wf.REFERENCE:
            ref = None if b.name == FLOAT_ORT else FLOAT_ORT
        else:  # a float reference would only show the quantization error
            ref = QUANT_ORT if b.name != QUANT_ORT and QUANT_ORT in outputs else None
        if ref is None:
            out[b.name] = {"checked_against": None, "max_abs_diff": None}
            continue
        diff = float(np.max(np.abs(outputs[b.name].astype(np.float64) - outputs[ref])))
        out[b.name] = {"checked_against": f"{ref} ({by_name[ref].fmt})", "max_abs_diff": diff}
    return out


def render_bench(sections: dict) -> str:
    """The llama-bench style table, then how it was timed."""
    from edgekit.utils.output import markdown_table

    setup = sections["setup"][0]
    columns = ["model", "format", "bits/weight", "size (MiB)", "backend", "threads", "latency (ms)", "min (ms)",
               "median (ms)", "x onnxruntime fp32"]
    lines = [markdown_table(sections["results"], columns), ""]
    lines.append(f"target {setup['target']} ({setup['tvm_target']}); {setup['rounds']} rounds, backends interleaved; "
                 f"latency is the mean ± std over rounds of per-round means; onnxruntime at {setup['onnxruntime_level']}; "
                 "tvm timed by time_evaluator (no Python call overhead), the others by a Python loop; "
                 "x onnxruntime fp32 compares medians.")
    if setup["thread_note"]:
        lines.append(f"note: {setup['thread_note']}")
    for note in setup["skipped"]:
        lines.append(f"skipped {note}")
    return "\n".join(lines)
