"""Batch-1 GEMV and a small model, TVM decode kernels vs onnxruntime vs PyTorch, in one process (run by hand).

    python benchmarks/bench_gemv.py [--n 4096] [--k 4096] [--rounds 15] [--threads 2] [--sample-ms 30]
                                    [--liftquant 24to10] [--liftquant-codes FILE.npz] [--skip-model]
                                    [--cache-size 2048] [-o benchmarks/results/gemv.json]

Part 1, one ``n x k`` Linear layer at batch 1 (``y = x @ W.T``):
  * onnxruntime fp32 MatMul at ORT_ENABLE_BASIC and at its default level (ORT_ENABLE_ALL), and,
    since on this VM two intra-op threads are at times slower than one, at BASIC with one thread;
  * TVM fp32: edgekit's dense kernel with the float baseline, one PrimFunc;
  * TVM with edgekit's fused decode kernels, one PrimFunc per format, the kernel and layout that
    ``lower`` picks for a batch-1 layer on the target (``row_tile_gemv`` where the codes fill 32-bit
    words, else ``dense_kernel`` then ``schedule_dense_cpu``); each result is checked against NumPy
    ``x @ dequantize(quantize(W)).T`` (relative error < 1e-5) before anything is timed;
  * for the formats it takes (MXFP4, MXINT4, NVFP4, MXFP6 E2M3), the MX-dot GEMV (``compile --activations mxint8``,
    ``mx_dot_gemv``): the input quantized to MXINT8 in the kernel, rows marked ``mx-dot``, checked bit
    for bit against ``mx_matmul`` (their relative error is the input's rounding, against the float product);
  * PyTorch eager ``torch.nn.functional.linear``, fp32;
  * each LiftQuant configuration of ``--liftquant`` on the same weight (the pipeline's rotation,
    row scales and default search; the encode's time is recorded, ``--liftquant-codes`` keeps it
    for the next run): the whole layer (the input rotation, then the fused decode-GEMV over the
    ``bytes_major`` codes, ``cpu_gemv`` for this CPU) through the Relax VM, and the fused GEMV
    alone on a rotated activation, to show what the rotation costs.
Every TVM row is built for this CPU and, where it has AVX-512, again for the same CPU with AVX2 and
FMA alone (rows marked ``[avx2]``), as a machine without AVX-512 would run it; onnxruntime and torch
pick their kernels at run time and use AVX-512 where the CPU has it.
Part 1b, the decode roof: onnxruntime fp32 (basic) and every block format's TVM GEMV again on a
``--cache-size`` square weight whose codes the cores' L2 caches hold, in rounds of their own. A
kernel that reads its bytes no faster there than from the large weight is bound by its decode
work, not by memory, and its in-cache byte rate is the most any layout of the same bytes gets.
Part 2, the ``digits`` MLP (trained here, seed 0) at batch 1: TVM builds of the fp32 and
mxfp4 plans (edgekit's passes for the ``host`` target) vs onnxruntime on the float ONNX
export (and, for reference, the mxfp4 ONNX graph and PyTorch eager).

Every backend gets the same thread count (onnxruntime ``intra_op_num_threads``,
``torch.set_num_threads``, TVM's pool through ``TVM_NUM_THREADS``, set before the pool
starts). Each round takes one sample of every case, in an order that rotates from round to
round; a sample is the mean of as many calls as fill ``--sample-ms``, taken after the previous
case's spinning worker threads went idle (onnxruntime's and TVM's pools spin for 45-150 ms
of CPU after a call, which on 2 cores would slow whichever backend runs next). TVM is timed with its
``time_evaluator`` (C++ loop), the others with ``time.perf_counter`` around a Python loop.
Reported: min and median over rounds, bytes read per call (codes + scales + x, or the float
weight + x), effective GB/s, and speedups over onnxruntime fp32 at ORT_ENABLE_BASIC with the
same threads and over the fastest onnxruntime fp32 row, all from the medians. Compare the ratios: they come from one run on the same noisy machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edgekit.jobs.bench import configure_tvm_threads, python_timer, time_interleaved

FORMATS = ("mxfp4", "mxint4", "nvfp4", "mxint8", "mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3")
MAX_REL_ERR = 1e-5
REFERENCE = "onnxruntime fp32 (basic)"
MIB = 1024 * 1024


@dataclass
class Case:
    """One thing to time: ``mean_time(n)`` is the mean seconds per call over ``n`` calls."""

    name: str
    fmt: str
    bits: float
    bytes_read: int
    mean_time: Callable[[int], float]
    timing: str
    rel_err: float | None = None
    number: int = 1
    samples: list[float] = field(default_factory=list)


def tvm_timer(module, func_name: str, args: list) -> Callable[[int], float]:
    import tvm

    evaluators = {}

    def mean_time(n: int) -> float:
        if n not in evaluators:
            evaluators[n] = module.time_evaluator(func_name, tvm.cpu(), number=n, repeat=1)
        return float(evaluators[n](*args).results[0])

    return mean_time


def relative_error(y: np.ndarray, ref: np.ndarray) -> float:
    """max |y - ref| / max |ref|."""
    return float(np.max(np.abs(y.astype(np.float64) - ref)) / np.max(np.abs(ref)))


def ort_variants(threads: int) -> list[tuple[str, str, int]]:
    """(name, level, threads) of the onnxruntime fp32 runs: the reference, its default level, one thread."""
    out = [(REFERENCE, "ORT_ENABLE_BASIC", threads), ("onnxruntime fp32 (default)", "ORT_ENABLE_ALL", threads)]
    if threads > 1:
        out.append(("onnxruntime fp32 (basic, 1 thread)", "ORT_ENABLE_BASIC", 1))
    return out


def matmul_onnx(path: Path, w: np.ndarray) -> None:
    """A one-node ONNX model ``Y = X @ W.T`` (the weight stored transposed, as an exporter would)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    n, k = w.shape
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "wt"], ["y"])], "gemv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])],
        [numpy_helper.from_array(np.ascontiguousarray(w.T), "wt")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def onnxruntime_cases(w: np.ndarray, x: np.ndarray, variants: list[tuple[str, str, int]], tmp: Path) -> list[Case]:
    """``x @ w.T`` in float32 by onnxruntime's MatMul, one case per (name, level, threads) of ``variants``."""
    from edgekit.compilers.onnx_export import onnx_session

    ref_fp32 = x.astype(np.float64) @ w.astype(np.float64).T
    path = tmp / f"gemv_{w.shape[0]}x{w.shape[1]}.onnx"
    matmul_onnx(path, w)
    cases = []
    for name, level, ort_threads in variants:
        session = onnx_session(path, threads=ort_threads, level=level)
        feeds = {"x": x}
        y = session.run(None, feeds)[0]

        def call(session=session, feeds=feeds):
            return session.run(None, feeds)

        cases.append(Case(name, "fp32", 32.0, w.nbytes + x.nbytes, python_timer(call),
                          f"perf_counter, ORT {level}, {ort_threads} intra-op threads", relative_error(y, ref_fp32)))
    return cases


def float_baseline_cases(w: np.ndarray, x: np.ndarray, threads: int, tmp: Path) -> list[Case]:
    """``x @ w.T`` in float32: onnxruntime's MatMul (each variant of ``ort_variants``) and torch eager."""
    import torch

    xt, wt = torch.from_numpy(x), torch.from_numpy(w)

    def torch_call():
        with torch.inference_mode():
            return torch.nn.functional.linear(xt, wt)

    ref_fp32 = x.astype(np.float64) @ w.astype(np.float64).T
    return onnxruntime_cases(w, x, ort_variants(threads), tmp) + [
        Case("torch eager fp32", "fp32", 32.0, w.nbytes + x.nbytes, python_timer(torch_call),
             "perf_counter, F.linear", relative_error(torch_call().numpy(), ref_fp32))]


def random_layer(n: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A seeded ``n x k`` weight and a batch-1 input."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((n, k), dtype=np.float32) * 0.02).astype(np.float32)
    return w, rng.standard_normal((1, k), dtype=np.float32)


def gemv_cases(n: int, k: int, threads: int, tmp: Path, seed: int, liftquant: list[str],
               codes: Path | None = None) -> tuple[list[Case], list[dict]]:
    """Every backend on one ``n x k`` weight: float baselines, then for each of :func:`cpu_targets` the TVM
    fp32, MX and NVFP4 GEMVs and each LiftQuant configuration in ``liftquant``; with each LiftQuant encode's record."""
    w, x = random_layer(n, k, seed)
    cases = float_baseline_cases(w, x, threads, tmp)

    cases += [tvm_gemv_case("fp32", w, x, target, suffix) for suffix, target in cpu_targets().items()]
    cases += tvm_block_cases(w, x)
    encodes = []
    for fmt in liftquant:
        q, info = liftquant_encode(w, fmt, codes if len(liftquant) == 1 else None)
        for suffix, target in cpu_targets().items():
            cases += liftquant_cases(q, x, w, target, suffix)
        encodes.append(info)
    return cases, encodes


def in_cache_cases(size: int, threads: int, tmp: Path, seed: int) -> list[Case]:
    """The reference onnxruntime fp32 GEMV and every block format's TVM GEMV, for each of :func:`cpu_targets`,
    on a ``size x size`` weight (the decode roof: its codes fit the cores' L2 caches)."""
    w, x = random_layer(size, size, seed)
    reference = onnxruntime_cases(w, x, [v for v in ort_variants(threads) if v[0] == REFERENCE], tmp)
    return reference + tvm_block_cases(w, x)


def cpu_targets() -> dict[str, object]:
    """The TVM targets the TVM rows are built for, by row-name suffix: this CPU, and, where it has
    AVX-512, the same CPU with AVX2 and FMA alone (Haswell's features), as on a machine without AVX-512."""
    import tvm

    from edgekit.compilers.kernel_schedules import vector_isa
    from edgekit.targets import tvm_target

    host = tvm_target("host")
    targets = {"": host}
    if vector_isa(host) == "avx512":
        targets[" [avx2]"] = tvm.target.Target({"kind": "llvm", "mtriple": str(host.attrs["mtriple"]),
                                                "mcpu": "haswell"})
    return targets


def tvm_gemv_case(fmt: str, w: np.ndarray, x: np.ndarray, target, suffix: str, activations: str = "float32") -> Case:
    """The batch-1 GEMV ``lower`` builds for ``fmt`` on ``target`` (the row-tile GEMV where it applies,
    else the dense kernel), checked against NumPy on the dequantized weight; with ``activations="mxint8"``
    the MX-dot GEMV (``lower``'s ``--activations mxint8``), checked bit for bit against ``mx_matmul``, its
    error against the float product recorded."""
    import tvm

    from edgekit.compilers.kernel_schedules import schedule_cpu_kernel, vector_isa
    from edgekit.compilers.lower import (
        choose_layout,
        dense_function,
        row_tile_function,
        row_tiles_apply,
        weight_constants,
    )
    from edgekit.compilers.mx_dot_gemv import activation_format
    from edgekit.simulators import dequantize, quantize
    from edgekit.simulators.mxdot import mx_matmul

    n, k = w.shape
    name = f"tvm {fmt}{' mx-dot' if activations != 'float32' else ''}{suffix}"
    if activations != "float32":
        func, consts, _, fields = row_tile_function(fmt, w, target, activations)
        kernel = f"MX dot, {vector_isa(target)}"
    elif row_tiles_apply(fmt, n, k, "cpu", target):
        func, consts, _, fields = row_tile_function(fmt, w, target)
        kernel = f"row tiles, {vector_isa(target)}"
    else:
        layout = choose_layout(fmt, "cpu", k)
        consts, tensor_scale, fields = weight_constants(fmt, w, layout)
        func = dense_function(fmt, layout, 1, n, k, tensor_scale)
        kernel = f"dense, layout {layout or 'float'}, {int(func.attrs['edgekit.lanes'])} lanes"
        func = schedule_cpu_kernel(func)
    lib = tvm.compile(tvm.IRModule({"main": func}), target=target)
    args = [tvm.runtime.tensor(a) for a in (x, *consts, np.zeros((1, n), np.float32))]
    lib["main"](*args)
    q = None if fmt == "fp32" else quantize(w, fmt, axis=-1)
    dense = w if q is None else dequantize(q)
    err = relative_error(args[-1].numpy(), x.astype(np.float64) @ dense.astype(np.float64).T)
    if activations != "float32":
        if not np.array_equal(args[-1].numpy(), mx_matmul(quantize(x, activation_format(q.format)), q)):
            raise AssertionError(f"{name} GEMV differs from mx_matmul of the MXINT8 input and the weight")
    elif not err < MAX_REL_ERR:
        raise AssertionError(f"{name} GEMV differs from x @ dequantize(W).T: relative error {err:.2e}")
    print(f"built and checked {name} ({kernel}): relative error {err:.2e}", flush=True)
    read = x.nbytes + sum(c.nbytes for c in consts)
    return Case(name, fmt, fields["weight_bits"], read, tvm_timer(lib.mod, "main", args),
                f"time_evaluator, {kernel}", err)


def tvm_block_cases(w: np.ndarray, x: np.ndarray) -> list[Case]:
    """Every block format's batch-1 GEMV on each of :func:`cpu_targets`, and the MX-dot GEMV where it applies."""
    from edgekit.compilers.lower import mx_dot_applies

    n, k = w.shape
    return [case for suffix, target in cpu_targets().items() for fmt in FORMATS
            for case in [tvm_gemv_case(fmt, w, x, target, suffix)]
            + ([tvm_gemv_case(fmt, w, x, target, suffix, "mxint8")] if mx_dot_applies(fmt, n, k, "cpu", target) else [])]


def liftquant_encode(w: np.ndarray, fmt: str, codes: Path | None = None):
    """The LiftQuant encode of ``w`` (the pipeline's rotation, row scales and default search) and its record:
    time, bits and error. ``codes`` keeps the encode for the next run."""
    from edgekit.simulators.formats import get_liftquant_format
    from edgekit.simulators.liftquant import load_tensors, quantize, save_tensors

    n, k = w.shape
    if codes is not None and codes.is_file():  # the encode of an earlier run with the same seed and size
        q, encode_s, encode_cpu_s = load_tensors(codes)["weight"], None, None
        if q.shape != (n, k) or q.format.name != get_liftquant_format(fmt).name:
            raise ValueError(f"{codes} holds a {q.shape} {q.format.name} weight, not {n}x{k} {fmt}")
    else:
        start, cpu = time.perf_counter(), time.process_time()
        q = quantize(w, fmt)
        encode_s, encode_cpu_s = time.perf_counter() - start, time.process_time() - cpu
        if codes is not None:
            save_tensors(codes, {"weight": q})
    w_hat = q.dequantize().astype(np.float64)
    # CPU seconds too: on a shared machine the wall time counts other processes' work
    info = {"format": q.format.name, "encode_seconds": None if encode_s is None else round(encode_s, 2),
            "encode_cpu_seconds": None if encode_cpu_s is None else round(encode_cpu_s, 2),
            "bits_per_weight": q.bits_per_weight, "stored_bytes": q.nbytes, "byte_counts": q.byte_counts,
            "relative_weight_mse": float(((w_hat - w) ** 2).mean() / (w.astype(np.float64) ** 2).mean())}
    print(f"{n}x{k} at {q.format.name}: {q.bits_per_weight:.4f} bits/weight, encoded in "
          f"{'an earlier run' if encode_s is None else f'{encode_s:.1f} s'}", flush=True)
    return q, info


def liftquant_cases(q, x: np.ndarray, w: np.ndarray, target, suffix: str) -> list[Case]:
    """The LiftQuant layer (rotation + fused decode-GEMV) built for ``target`` and its GEMV alone, each
    checked against ``x @ W_hat.T``."""
    import tvm
    from tvm import relax

    from edgekit.compilers.liftquant_kernels import cpu_gemv, layer_kernels, layer_module

    n, k = w.shape
    name = f"tvm {q.format.name}"
    ref = x.astype(np.float64) @ q.dequantize().astype(np.float64).T
    vm = relax.VirtualMachine(tvm.compile(layer_module(q, "cpu", target), target=target), tvm.cpu())
    args = [tvm.runtime.tensor(x)]
    err = relative_error(vm["main"](*args).numpy(), ref)
    if not err < MAX_REL_ERR:
        raise AssertionError(f"TVM LiftQuant layer{suffix} differs from x @ W_hat.T: relative error {err:.2e}")
    out = [Case(f"{name} layer{suffix}", q.format.name, q.bits_per_weight, q.nbytes + x.nbytes,
                tvm_timer(vm, "main", args), "time_evaluator, VM main: rotation + fused GEMV", err)]

    kernels = layer_kernels(q, "bytes_major")
    lib = tvm.compile(tvm.IRModule({"main": cpu_gemv(q.format, n, q.chunks, q.group_size, 1, target)}), target=target)
    xr = q.rotation.apply(x[0] * (q.input_scales if q.input_scales is not None else 1.0)).astype(np.float32)
    xr = np.pad(xr, (0, kernels.padded - k))[None]
    gemv_args = [tvm.runtime.tensor(a) for a in (xr, *kernels.gemv_args, np.zeros((1, n), np.float32))]
    lib["main"](*gemv_args)
    err = relative_error(gemv_args[-1].numpy(), ref)
    if not err < MAX_REL_ERR:
        raise AssertionError(f"TVM LiftQuant GEMV{suffix} differs from x @ W_hat.T: relative error {err:.2e}")
    out.append(Case(f"{name} gemv only{suffix}", q.format.name, q.bits_per_weight,
                    sum(a.nbytes for a in kernels.gemv_args) + xr.nbytes, tvm_timer(lib.mod, "main", gemv_args),
                    "time_evaluator, fused GEMV on a rotated x", err))
    return out


def model_cases(threads: int, tmp: Path, seed: int) -> list[Case]:
    import torch
    import tvm
    from tvm import relax

    from edgekit.compilers.build import build
    from edgekit.compilers.importer import import_torch
    from edgekit.compilers.lower import lower
    from edgekit.compilers.onnx_export import export_onnx, onnx_session
    from edgekit.compilers.pipeline import layer_totals
    from edgekit.compilers.plan import make_plan
    from edgekit.compilers.schedule import schedule
    from edgekit.models.registry import get_model, train
    from edgekit.targets import tvm_target

    entry = get_model("digits")
    config = entry.config(seed=seed)
    print("training digits ...", flush=True)
    module = train(entry, config, cache_dir=False).model.eval()
    example = entry.example_inputs(config)
    x = np.random.default_rng(seed).random((1, 64), dtype=np.float32)
    with torch.inference_mode():
        ref = module(torch.from_numpy(x)).numpy().astype(np.float64)
    imported = import_torch(module, example)
    numel = sum(int(np.prod(imported.params[v].shape)) for v in imported.layers.values())
    target = tvm_target("host")
    cases = []

    float_path, quant_path = tmp / "digits.onnx", tmp / "digits_mxfp4.onnx"
    export_onnx(module, example, make_plan(module, "fp32"), float_path)
    quant = export_onnx(module, example, make_plan(module, "mxfp4"), quant_path)["totals"]
    quant_ref = onnx_session(quant_path, threads=threads).run(None, {"input0": x})[0].astype(np.float64)
    runs = [(name, float_path, level, ort_threads, "fp32", 32.0, 4 * numel, ref)
            for name, level, ort_threads in ort_variants(threads)]
    runs.append(("onnxruntime mxfp4 graph (basic)", quant_path, "ORT_ENABLE_BASIC", threads, "mxfp4",
                 quant["weight_bits"], quant["weight_bytes"], quant_ref))
    for name, path, level, ort_threads, fmt, bits, stored, expect in runs:
        session = onnx_session(path, threads=ort_threads, level=level)
        feeds = {"input0": x}

        def call(session=session, feeds=feeds):
            return session.run(None, feeds)

        cases.append(Case(name, fmt, bits, stored + x.nbytes, python_timer(call),
                          f"perf_counter, ORT {level}, {ort_threads} intra-op threads",
                          relative_error(call()[0], expect)))

    xt = torch.from_numpy(x)

    def torch_call():
        with torch.inference_mode():
            return module(xt)

    cases.append(Case("torch eager fp32", "fp32", 32.0, 4 * numel + x.nbytes, python_timer(torch_call),
                      "perf_counter, module(x)", relative_error(torch_call().numpy(), ref)))

    for fmt, expect in (("fp32", ref), ("mxfp4", quant_ref)):
        lowered = lower(imported, make_plan(imported.layers, fmt), "cpu")
        executable = build(schedule(lowered.mod, "cpu", target), target)
        vm = relax.VirtualMachine(executable, tvm.cpu())
        args = [tvm.runtime.tensor(x)]
        out = vm["main"](*args)
        y = (out if hasattr(out, "numpy") else out[0]).numpy()
        totals = layer_totals(lowered.layers)
        cases.append(Case(f"tvm {fmt}", fmt, totals["weight_bits"], totals["codes_bytes"] + totals["scales_bytes"]
                          + x.nbytes, tvm_timer(vm, "main", args), "time_evaluator, VM main",
                          relative_error(y, expect)))
    return cases


def run_rounds(cases: list[Case], rounds: int, sample_s: float, label: str) -> None:
    """``jobs.bench.time_interleaved`` over ``cases``, a line printed after each round."""

    def printed(order, total):
        for r in order:
            yield r
            print(f"{label}: round {r + 1}/{total}", flush=True)

    time_interleaved(cases, rounds, printed, sample_s)


def rows_of(cases: list[Case], with_bandwidth: bool) -> list[dict]:
    ref = statistics.median(next(c for c in cases if c.name == REFERENCE).samples)
    fastest = min(statistics.median(c.samples) for c in cases if c.name.startswith("onnxruntime fp32"))
    rows = []
    for c in cases:
        median = statistics.median(c.samples)
        row = {"backend": c.name, "format": c.fmt, "bits/weight": round(c.bits, 4),
               "bytes/call (MiB)" if with_bandwidth else "weights+x (MiB)": c.bytes_read / MIB,
               "min (ms)": 1e3 * min(c.samples), "median (ms)": 1e3 * median,
               "x onnxruntime fp32": ref / median, "x fastest onnxruntime fp32": fastest / median}
        if with_bandwidth:
            row["GB/s"] = c.bytes_read / median / 1e9
        row["rel. error"] = c.rel_err
        rows.append(row)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4096, help="output features (rows of W)")
    parser.add_argument("--k", type=int, default=4096, help="input features (the reduction)")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sample-ms", type=float, default=30.0, help="minimum length of one sample")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-model", action="store_true", help="only the GEMV part")
    parser.add_argument("--cache-size", type=int, default=2048,
                        help="side of the square weight of the decode roof, whose codes the L2 caches hold (0: none)")
    parser.add_argument("--liftquant", default="24to10",
                        help="comma-separated LiftQuant configurations timed beside the MX formats ('' for none)")
    parser.add_argument("--liftquant-codes", type=Path, default=None,
                        help="keep the LiftQuant encode here and reuse it in the next run (one configuration)")
    parser.add_argument("--allow-dirty", action="store_true", help="run on a tree with uncommitted changes")
    parser.add_argument("-o", "--output", type=Path, default=Path("benchmarks/results/gemv.json"))
    args = parser.parse_args()
    if args.rounds < 7:
        parser.error("--rounds must be at least 7")
    if args.cache_size < 0 or args.cache_size % 64:
        parser.error(f"--cache-size must be 0 or a positive multiple of 64 (the row-tile GEMV's tile), got {args.cache_size}")

    from edgekit.utils.provenance import load_average, provenance, require_clean_tree

    require_clean_tree(args.allow_dirty)
    before = provenance(args.seed, threads=args.threads)  # the load average before the run
    tvm_threads, note = configure_tvm_threads(args.threads)  # before TVM's pool starts
    if note:
        print(f"warning: {note}", flush=True)
    import json

    import torch

    from edgekit.utils.output import atomic_write, json_safe, markdown_table

    torch.set_num_threads(args.threads)
    sample_s = args.sample_ms / 1e3
    with tempfile.TemporaryDirectory(prefix="bench-gemv-") as tmp:
        liftquant = [c.strip() for c in args.liftquant.split(",") if c.strip()]
        gemv, encodes = gemv_cases(args.n, args.k, args.threads, Path(tmp), args.seed, liftquant, args.liftquant_codes)
        run_rounds(gemv, args.rounds, sample_s, "gemv")
        in_cache = in_cache_cases(args.cache_size, args.threads, Path(tmp), args.seed) if args.cache_size else []
        if in_cache:
            run_rounds(in_cache, args.rounds, sample_s, "in cache")
        model = [] if args.skip_model else model_cases(args.threads, Path(tmp), args.seed)
        if model:
            run_rounds(model, args.rounds, sample_s, "digits")
    gemv_rows = rows_of(gemv, True)
    model_rows = rows_of(model, False) if model else []
    in_cache_rows = rows_of(in_cache, True) if in_cache else []
    text = (f"### GEMV {args.n}x{args.k}, batch 1, {args.threads} threads, {args.rounds} rounds\n\n"
            + markdown_table(gemv_rows))
    if in_cache_rows:
        text += (f"\n\n### In cache: GEMV {args.cache_size}x{args.cache_size}\n\n" + markdown_table(in_cache_rows))
    if model_rows:
        text += ("\n\n### digits MLP (64-256-256-10), batch 1\n\n" + markdown_table(model_rows))
    print(text)
    meta = {**before, "command": " ".join(["python", *sys.argv]),
            "n": args.n, "k": args.k, "cache_size": args.cache_size, "rounds": args.rounds, "sample_ms": args.sample_ms,
            "threads": args.threads, "tvm_threads": tvm_threads, "logical_cpus": os.cpu_count(),
            "load_average_after": load_average(),
            "tvm_targets": {suffix.strip() or "host": str(t) for suffix, t in cpu_targets().items()},
            "speedup_and_bandwidth_from": "medians", "reference": REFERENCE,
            "fastest_onnxruntime": "the onnxruntime fp32 row with the smallest median"}

    def samples(cases):
        return [{"backend": c.name, "format": c.fmt, "timing": c.timing, "calls_per_sample": c.number,
                 "samples_ms": [1e3 * s for s in c.samples]} for c in cases]

    result = {"meta": meta, "gemv": gemv_rows, "liftquant_encodes": encodes, "gemv_in_cache": in_cache_rows,
              "model": model_rows,
              "samples": {"gemv": samples(gemv), "gemv_in_cache": samples(in_cache), "model": samples(model)}}
    atomic_write(args.output, json.dumps(json_safe(result), indent=2) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
