"""Batch-1 GEMV of one LiftQuant layer (TVM, fused decode) against onnxruntime fp32, in one process (run by hand).

    python benchmarks/liftquant_gemv.py [--n 4096] [--k 4096] [--format 24to10] [--rounds 15] [--threads 2]
                                        [-o benchmarks/results/liftquant_gemv.json]

A Gaussian ``n x k`` weight is quantized by the LiftQuant pipeline (rotation, row scales,
fast+local search; its time is recorded; ``--codes`` keeps the result for the next run), then
timed at batch 1 (``y = x @ W.T``):
  * onnxruntime fp32 MatMul of the float weight (``bench_gemv``'s variants; the reference is
    ORT_ENABLE_BASIC with the same threads), and PyTorch eager ``F.linear``;
  * TVM, the whole LiftQuant layer (``layer_module``: the input rotation then the fused
    decode-GEMV over the ``bytes_major`` codes, ``cpu_gemv`` for this CPU: nibble tables on
    AVX-512, bit selects elsewhere), timed through the Relax VM;
  * TVM, the fused decode-GEMV alone (activation already rotated), to show what the rotation costs.
Each TVM result is checked against ``x @ W_hat.T`` in float64 before anything is timed. Rounds,
samples and the spinning-thread waits are ``bench_gemv``'s; compare the ratios, from one run.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_gemv import (
    MAX_REL_ERR,
    Case,
    float_baseline_cases,
    relative_error,
    rows_of,
    run_rounds,
    tvm_timer,
)

from edgekit.bench_job import configure_tvm_threads


def cases(n: int, k: int, fmt: str, threads: int, tmp: Path, seed: int,
          codes: Path | None = None) -> tuple[list[Case], dict]:
    import tvm
    from tvm import relax

    from edgekit.compilers.liftquant_kernels import cpu_gemv, layer_kernels, layer_module
    from edgekit.simulators.formats import get_liftquant_format
    from edgekit.simulators.liftquant import load_tensors, quantize, save_tensors
    from edgekit.targets import tvm_target

    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((n, k), dtype=np.float32) * 0.02).astype(np.float32)
    x = rng.standard_normal((1, k), dtype=np.float32)
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
    out = float_baseline_cases(w, x, threads, tmp)

    target = tvm_target("host")
    ref = x.astype(np.float64) @ w_hat.T
    vm = relax.VirtualMachine(tvm.compile(layer_module(q, "cpu", target), target=target), tvm.cpu())
    args = [tvm.runtime.tensor(x)]
    err = relative_error(vm["main"](*args).numpy(), ref)
    if not err < MAX_REL_ERR:
        raise AssertionError(f"TVM LiftQuant layer differs from x @ W_hat.T: relative error {err:.2e}")
    out.append(Case(f"tvm {q.format.name} layer", q.format.name, q.bits_per_weight, q.nbytes + x.nbytes,
                    tvm_timer(vm, "main", args), "time_evaluator, VM main: rotation + fused GEMV", err))

    kernels = layer_kernels(q, "bytes_major")
    gemv = cpu_gemv(q.format, n, q.chunks, q.group_size, 1, target)
    lib = tvm.compile(tvm.IRModule({"main": gemv}), target=target)
    xr = q.rotation.apply(x[0] * (q.input_scales if q.input_scales is not None else 1.0)).astype(np.float32)
    xr = np.pad(xr, (0, kernels.padded - k))[None]
    gemv_args = [tvm.runtime.tensor(a) for a in (xr, *kernels.gemv_args, np.zeros((1, n), np.float32))]
    lib["main"](*gemv_args)
    err = relative_error(gemv_args[-1].numpy(), ref)
    if not err < MAX_REL_ERR:
        raise AssertionError(f"TVM LiftQuant GEMV differs from x @ W_hat.T: relative error {err:.2e}")
    out.append(Case(f"tvm {q.format.name} gemv only", q.format.name, q.bits_per_weight,
                    sum(a.nbytes for a in kernels.gemv_args) + xr.nbytes, tvm_timer(lib.mod, "main", gemv_args),
                    "time_evaluator, fused GEMV on a rotated x", err))
    return out, info


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--k", type=int, default=4096)
    parser.add_argument("--format", default="24to10")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sample-ms", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--codes", type=Path, default=None,
                        help="reuse the encoded weight in this .npz if it exists, else write it there")
    parser.add_argument("--allow-dirty", action="store_true", help="run on a tree with uncommitted changes")
    parser.add_argument("-o", "--output", type=Path, default=Path("benchmarks/results/liftquant_gemv.json"))
    args = parser.parse_args()
    from edgekit.provenance import provenance, require_clean_tree

    require_clean_tree(args.allow_dirty)
    before = provenance(args.seed, threads=args.threads)  # the load average before the run
    tvm_threads, note = configure_tvm_threads(args.threads)
    if note:
        print(f"warning: {note}", flush=True)
    import torch

    from edgekit.output import atomic_write, json_safe, markdown_table

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="bench-liftquant-") as tmp:
        timed, info = cases(args.n, args.k, args.format, args.threads, Path(tmp), args.seed, args.codes)
        run_rounds(timed, args.rounds, args.sample_ms / 1e3, "liftquant gemv")
    rows = rows_of(timed, True)
    text = (f"### LiftQuant GEMV {args.n}x{args.k} ({info['format']}, {info['bits_per_weight']:.3f} bits/weight), "
            f"batch 1, {args.threads} threads, {args.rounds} rounds\n\n" + markdown_table(rows))
    print(text)
    meta = {**before, "command": " ".join(["python", *sys.argv]), "n": args.n, "k": args.k,
            "tvm_threads": tvm_threads, "rounds": args.rounds, "load_average_after": provenance()["cpu"]["load_average"]}
    samples = [{"backend": c.name, "calls_per_sample": c.number, "samples_ms": [1e3 * s for s in c.samples]}
               for c in timed]
    atomic_write(args.output, json.dumps(json_safe({"meta": meta, "layer": info, "gemv": rows, "samples": samples}),
                                         indent=2) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
