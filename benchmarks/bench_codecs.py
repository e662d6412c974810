"""Codec throughput and memory, side by side in one run (run by hand, not in tests).

    python benchmarks/bench_codecs.py [--log2n 26] [--repeats 5] [-o benchmarks/results/codecs.json]

For every format, on 2^log2n float32 values:
  * edgekit quantize+pack and unpack+dequantize, elements per second, for a 1-D array, a
    2-D array with rows of 4096 quantized along its rows, and the same array quantized
    along its columns (axis 0: how a MatMul weight ``[in, out]`` is quantized). Each
    instruction set in ``--isas`` gets a child process whose Numba kernels are compiled
    for it: ``native`` (this CPU) and ``avx2`` (Haswell: AVX2 and FMA, no AVX-512), so
    one AVX-512 machine also measures the code a machine without AVX-512 runs;
  * a PyTorch tensor-op emulation of the same MX rounding, written the way emulation
    libraries write it (amax, log2/floor shared exponent, per-element exponent,
    round, clamp), on the same data and threads;
  * ml_dtypes' element cast alone (no block scaling at all);
  * peak memory beyond the input and the packed output (or, for decoding, beyond the
    packed input and the float32 output), measured as the process's peak RSS in a
    fresh child process per format.
Timings are the best of ``--repeats`` runs; compare the ratios, which come from one run.
The results file records the command, git SHA, CPU model and vector extensions, threads
and the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

import ml_dtypes
import numpy as np
import torch

from edgekit.simulators import FORMATS, dequantize, quantize
from edgekit.utils.files import atomic_write
from edgekit.utils.parallel import thread_count
from edgekit.utils.provenance import load_average, provenance, require_clean_tree

ROW = 4096
# Numba compiles for NUMBA_CPU_NAME with NUMBA_CPU_FEATURES; both are read when Numba is imported.
ISA_ENV = {
    "native": {},
    "avx2": {"NUMBA_CPU_NAME": "haswell",
             "NUMBA_CPU_FEATURES": "+64bit,+avx,+avx2,+bmi,+bmi2,+cmov,+cx16,+f16c,+fma,+fsgsbase,+lzcnt,+mmx,+movbe,"
                                   "+pclmul,+popcnt,+rdrnd,+sse,+sse2,+sse3,+sse4.1,+sse4.2,+ssse3,+xsave"},
}
LAYOUTS = ("1-D", "2-D", "2-D axis 0")
ML_CASTS = {
    "e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2, "e3m2": ml_dtypes.float6_e3m2fn,
    "e2m3": ml_dtypes.float6_e2m3fn, "e2m1": ml_dtypes.float4_e2m1fn, "int8": np.int8, "int4": ml_dtypes.int4,
}


def best_time(fn, repeats: int) -> float:
    fn()
    best = math.inf
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def torch_mx_emulation(x: torch.Tensor, fmt) -> torch.Tensor:
    """MX quantize-dequantize in PyTorch tensor ops, in the style of MX emulation libraries."""
    elem, B = fmt.element, fmt.block_size
    blocks = x.reshape(-1, B)
    amax = blocks.abs().amax(dim=1, keepdim=True)
    shared = torch.floor(torch.log2(amax + (amax == 0).float() * 2.0**-126)) - elem.emax
    shared = shared.clamp(-127, 127)
    scaled = blocks / torch.exp2(shared)
    if elem.kind == "int":
        step = 2.0**-elem.frac_bits
        q = torch.round(scaled / step).clamp(elem.int_min, elem.int_max) * step
    else:
        private = torch.floor(torch.log2(scaled.abs() + (scaled == 0).float()))
        private = private.clamp(min=elem.emin)
        step = torch.exp2(private - elem.mbits)
        q = (torch.round(scaled / step) * step).clamp(-elem.max_normal, elem.max_normal)
    return (q * torch.exp2(shared)).reshape(x.shape)


def ml_dtypes_cast(x: np.ndarray, elem) -> np.ndarray:
    """The element cast alone (INT casts truncate and wrap: no rounding, no clipping)."""
    return x.astype(ML_CASTS[elem.name])


def rss_bytes(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def memory_child(name: str, n: int, queue) -> None:
    """Peak RSS beyond the arrays a codec must hold, for one format, in a fresh process."""
    warm = np.random.default_rng(1).standard_normal((8, ROW), dtype=np.float32)
    dequantize(quantize(warm, name))  # compile/load kernels and start the threads first
    x = np.random.default_rng(0).standard_normal((n // ROW, ROW), dtype=np.float32)
    x += 0  # touch every page
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the peak-RSS counter
    base = rss_bytes("VmRSS:")
    q = quantize(x, name)
    packed = q.codes.nbytes + q.scales.nbytes
    quant_extra = rss_bytes("VmHWM:") - base - packed
    del x
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    base = rss_bytes("VmRSS:")
    out = dequantize(q)
    dequant_extra = rss_bytes("VmHWM:") - base - out.nbytes
    queue.put((max(quant_extra, 0), max(dequant_extra, 0)))


def in_child(target, *args, env: dict | None = None, timeout: float = 600):
    """``target(*args, queue)`` in a fresh spawned process (with ``env`` added to its environment); what it puts."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    saved = dict(os.environ)
    os.environ.update(env or {})  # a spawned child starts with a copy of this environment
    try:
        proc = ctx.Process(target=target, args=(*args, queue))
        proc.start()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    result = queue.get(timeout=timeout)
    proc.join()
    return result


def layouts(x2d: np.ndarray) -> dict:
    """(array, axis) for each layout of LAYOUTS, all views of one 2-D array."""
    return {"1-D": (x2d.reshape(-1), -1), "2-D": (x2d, -1), "2-D axis 0": (x2d, 0)}


def codec_child(n: int, repeats: int, queue) -> None:
    """Quantize and dequantize throughput of every format and layout, with this process's Numba target."""
    x = np.random.default_rng(0).standard_normal((n // ROW, ROW), dtype=np.float32)
    for arr, axis in layouts(x).values():  # the process's first large arrays run slower: warm up untimed
        dequantize(quantize(arr, next(iter(FORMATS)), axis))
    out = {}
    for name in FORMATS:
        for layout, (arr, axis) in layouts(x).items():
            q = quantize(arr, name, axis)
            out[name, layout] = (n / best_time(lambda a=arr, ax=axis, f=name: quantize(a, f, ax), repeats) / 1e9,
                                 n / best_time(lambda q=q: dequantize(q), repeats) / 1e9)
    queue.put(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log2n", type=int, default=26)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--isas", nargs="+", choices=sorted(ISA_ENV), default=["native", "avx2"])
    parser.add_argument("--skip-memory", action="store_true", help="leave out the peak-RSS children")
    parser.add_argument("--allow-dirty", action="store_true")
    parser.add_argument("-o", "--output", type=Path, default=Path("benchmarks/results/codecs.json"))
    args = parser.parse_args()
    if args.log2n < 12:
        parser.error(f"--log2n must be at least 12 (one row of {ROW}), got {args.log2n}")
    require_clean_tree(args.allow_dirty)
    n = 1 << args.log2n
    meta = {"command": "python " + " ".join(sys.argv), **provenance(threads=thread_count()), "elements": n,
            "repeats": args.repeats, "isas": {isa: ISA_ENV[isa] for isa in args.isas}}
    torch.set_num_threads(thread_count())
    codecs = {}
    for isa in args.isas:
        print(f"codecs compiled for {isa} ...", flush=True)
        codecs[isa] = in_child(codec_child, n, args.repeats, env=ISA_ENV[isa], timeout=3600)
    x = np.random.default_rng(0).standard_normal((n // ROW, ROW), dtype=np.float32)
    xt = torch.from_numpy(x)
    rows = []
    for name, fmt in FORMATS.items():
        t_q = n / (codecs[args.isas[0]][name, "2-D"][0] * 1e9)
        t_cast = best_time(lambda fmt=fmt: ml_dtypes_cast(x, fmt.element), max(1, args.repeats // 2))
        t_torch = None
        if not fmt.tensor_scale:
            t_torch = best_time(lambda fmt=fmt: torch_mx_emulation(xt, fmt), max(1, args.repeats // 2))
        row = {"format": name}
        for isa in args.isas:
            for layout in LAYOUTS:
                q_rate, d_rate = codecs[isa][name, layout]
                row[f"quantize+pack Gelem/s {isa} {layout}"] = q_rate
                row[f"unpack+dequantize Gelem/s {isa} {layout}"] = d_rate
        row.update({
            "torch emulation Gelem/s": n / t_torch / 1e9 if t_torch else None,
            "ml_dtypes cast Gelem/s": n / t_cast / 1e9,
            "x torch": t_torch / t_q if t_torch else None,
            "x ml_dtypes": t_cast / t_q,
        })
        if not args.skip_memory:
            quant_extra, dequant_extra = in_child(memory_child, name, n)
            row["quantize extra memory % of input"] = 100 * quant_extra / x.nbytes
            row["dequantize extra memory % of input"] = 100 * dequant_extra / x.nbytes
        rows.append(row)
        print(" | ".join(f"{k}: {v:.3g}" if isinstance(v, float) else f"{k}: {v}" for k, v in row.items()), flush=True)
    meta["load_average_after"] = load_average()
    atomic_write(args.output, json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
