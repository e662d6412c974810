"""Codec throughput and memory, side by side in one process (run by hand, not in tests).

    python benchmarks/bench_codecs.py [--log2n 26] [--repeats 5] [-o benchmarks/results/codecs.json]

For every format, on 2^log2n float32 values (rows of 4096, blocks along rows):
  * edgekit quantize+pack and unpack+dequantize, elements per second;
  * a PyTorch tensor-op emulation of the same MX rounding, written the way emulation
    libraries write it (amax, log2/floor shared exponent, per-element exponent,
    round, clamp), on the same data and threads;
  * ml_dtypes' element cast alone (no block scaling at all);
  * peak memory beyond the input and the packed output (or, for decoding, beyond the
    packed input and the float32 output), measured as the process's peak RSS in a
    fresh child process per format.
Timings are the best of ``--repeats`` runs; compare the ratios, which come from one run.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import time
from pathlib import Path

import ml_dtypes
import numpy as np
import torch

from edgekit.simulators import FORMATS, dequantize, quantize
from edgekit.simulators.parallel import thread_count

ROW = 4096
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


def measure_memory(name: str, n: int) -> tuple[int, int]:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=memory_child, args=(name, n, queue))
    proc.start()
    result = queue.get(timeout=600)
    proc.join()
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log2n", type=int, default=26)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("-o", "--output", type=Path, default=Path("benchmarks/results/codecs.json"))
    args = parser.parse_args()
    n = 1 << args.log2n
    torch.set_num_threads(thread_count())
    x = np.random.default_rng(0).standard_normal((n // ROW, ROW), dtype=np.float32)
    xt = torch.from_numpy(x)
    rows = []
    for name, fmt in FORMATS.items():
        q = quantize(x, name)
        t_q = best_time(lambda name=name: quantize(x, name), args.repeats)
        t_d = best_time(lambda q=q: dequantize(q), args.repeats)
        t_cast = best_time(lambda fmt=fmt: ml_dtypes_cast(x, fmt.element), max(1, args.repeats // 2))
        t_torch = None
        if not fmt.tensor_scale:
            t_torch = best_time(lambda fmt=fmt: torch_mx_emulation(xt, fmt), max(1, args.repeats // 2))
        quant_extra, dequant_extra = measure_memory(name, n)
        row = {
            "format": name,
            "quantize+pack Gelem/s": n / t_q / 1e9,
            "unpack+dequantize Gelem/s": n / t_d / 1e9,
            "torch emulation Gelem/s": n / t_torch / 1e9 if t_torch else None,
            "ml_dtypes cast Gelem/s": n / t_cast / 1e9,
            "x torch": t_torch / t_q if t_torch else None,
            "x ml_dtypes": t_cast / t_q,
            "quantize extra memory % of input": 100 * quant_extra / x.nbytes,
            "dequantize extra memory % of input": 100 * dequant_extra / x.nbytes,
        }
        rows.append(row)
        print(" | ".join(f"{k}: {v:.3g}" if isinstance(v, float) else f"{k}: {v}" for k, v in row.items()), flush=True)
    meta = {"elements": n, "threads": thread_count(), "cpu": os.uname().machine, "repeats": args.repeats,
            "torch": torch.__version__, "ml_dtypes": ml_dtypes.__version__}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
