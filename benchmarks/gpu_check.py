"""CUDA builds checked and timed on a real GPU, with TVM's runtime alone there (run by hand, in two steps).

    # 1. on a machine with edgekit (TVM) and nvcc, no GPU needed: build everything
    python benchmarks/gpu_check.py prepare gpu_builds [--arch sm_90] [--sizes 4096] [--models digits]
    # 2. on the CUDA machine (the driver, torch, tvm_ffi and the libtvm_runtime*.so files; no TVM):
    EDGEKIT_TVM_RUNTIME_DIR=gpu_builds/runtime python benchmarks/gpu_check.py run gpu_builds \
        [-o benchmarks/results/gpu_check.json] [--peak-tbps 4.8]

``prepare`` compiles, for every weight format, each zoo model in ``--models`` and an
``n x n`` bias-free linear layer for each ``--sizes`` twice: for the CUDA target (``--arch``;
the library's kernels compiled to a fatbin by nvcc) and for this CPU. It runs each host
build on a fixed input and keeps input and output as the reference, and copies the
``libtvm_runtime*`` libraries beside the builds (``runtime/``), so the folder is all the GPU
machine needs besides ``tvm_ffi`` and torch. A 16384 x 16384 layer's builds are 140-550 MB
each: bring them to the GPU machine by a route that carries that much.

``run`` loads each CUDA build with ``edgekit.compilers.runtime`` (no compiler), compares its
output with the host build's (the same codes and scales; only the order of float summation
differs), and for the linear layers times the batch-1 GEMV with CUDA events against torch's
``F.linear`` in fp16 and bf16 (cuBLAS), each with the fraction of the HBM bandwidth
(``--peak-tbps``) its weight bytes reach.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FORMATS = ("fp32", "fp16", "mxint8", "mxfp8_e4m3", "mxfp6_e2m3", "mxfp4", "mxint4", "nvfp4", "liftquant_24to10")
TOLERANCE = 1e-4  # relative to the output's largest magnitude: float summation order only
INDEX = "builds.json"


def prepare(folder: Path, arch: str, sizes: list[int], models: list[str]) -> None:
    import torch

    from edgekit.compilers.runtime import load, runtime_dir
    from edgekit.jobs.compile import compile_model
    from edgekit.models.registry import get_model, make_config, save_checkpoint, train

    folder.mkdir(parents=True, exist_ok=True)
    sources = {}
    for name in models:
        config = make_config(name, {})
        trained = train(name, config, progress=True)
        sources[name] = (save_checkpoint(folder / f"{name}.pt", name, config, trained.model),
                         [x.numpy() for x in get_model(name).example_inputs(config)])
    for n in sizes:
        layer = torch.nn.Linear(n, n, bias=False)
        torch.nn.init.normal_(layer.weight, std=n ** -0.5, generator=torch.Generator().manual_seed(n))
        program = folder / f"linear{n}.pt2"
        torch.export.save(torch.export.export(layer.eval(), (torch.randn(1, n),)), str(program))
        sources[f"linear{n}"] = (program, [np.random.default_rng(n).standard_normal((1, n)).astype(np.float32)])
    index = []
    for name, (model, inputs) in sources.items():
        for fmt in FORMATS:
            entry = {"model": name, "format": fmt}
            for label, target in (("host", "host"), ("cuda", json.dumps({"kind": "cuda", "arch": arch}))):
                out = folder / f"{name}.{fmt}.{label}"
                print(f"compiling {out.name} ...", file=sys.stderr)
                try:
                    compile_model(str(model), fmt, target, out, max_batch=1, log=lambda _: None)
                except ValueError as err:  # e.g. LiftQuant on a convolution: recorded, not fatal
                    entry["error"] = str(err).splitlines()[0]
                    break
                entry[label] = out.name
            if "error" not in entry:
                np.savez(folder / f"{name}.{fmt}.io.npz", *inputs, reference=load(folder / entry["host"])(*inputs)[0])
                entry["io"] = f"{name}.{fmt}.io.npz"
            index.append(entry)
    shutil.copytree(runtime_dir(), folder / "runtime", dirs_exist_ok=True,
                    ignore=lambda _, names: [n for n in names if not n.startswith("libtvm_runtime")])
    (folder / INDEX).write_text(json.dumps(index, indent=2) + "\n")
    print(f"wrote {folder}/{INDEX}: {len(index)} builds", file=sys.stderr)


def cuda_ms(fn, iterations: int = 200) -> float:
    """Mean time of one call of ``fn`` on the GPU, by CUDA events around ``iterations`` calls."""
    import torch

    for _ in range(10):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(iterations):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iterations


def run(folder: Path, output: Path, peak_tbps: float) -> None:
    import torch
    import tvm_ffi

    from edgekit.compilers.runtime import load, read_manifest

    rows = []
    for entry in json.loads((folder / INDEX).read_text()):
        if "error" in entry:
            rows.append({**entry, "check": "not built"})
            continue
        io = np.load(folder / entry["io"])
        inputs = [io[f"arr_{i}"] for i in range(len(io.files) - 1)]
        build = load(folder / entry["cuda"])
        got = build(*inputs)[0]
        reference = io["reference"]
        diff = float(np.abs(got - reference).max() / max(np.abs(reference).max(), 1e-30))
        row = {"model": entry["model"], "format": entry["format"], "max_rel_diff_vs_host": diff,
               "check": "pass" if diff <= TOLERANCE else "FAIL"}
        if entry["model"].startswith("linear"):
            n = inputs[0].shape[1]
            x = tvm_ffi.from_dlpack(torch.from_numpy(inputs[0]).cuda())
            totals = read_manifest(folder / entry["cuda"])["totals"]
            stored = totals["codes_bytes"] + totals["scales_bytes"] + totals.get("codebook_bytes", 0)
            row["gemv_us"] = 1e3 * cuda_ms(lambda b=build, x=x: b.main(x))
            row["weight_bytes"] = stored
            row["hbm_fraction"] = stored / (row["gemv_us"] * 1e-6) / (peak_tbps * 1e12)
        rows.append(row)
    for n in sorted({int(r["model"].removeprefix("linear")) for r in rows if r["model"].startswith("linear")}):
        for dtype in (torch.float16, torch.bfloat16):
            weight = torch.randn(n, n, device="cuda", dtype=dtype)
            x = torch.randn(1, n, device="cuda", dtype=dtype)
            us = 1e3 * cuda_ms(lambda w=weight, x=x: torch.nn.functional.linear(x, w))
            rows.append({"model": f"linear{n}", "format": f"cuBLAS {str(dtype).removeprefix('torch.')}",
                         "gemv_us": us, "weight_bytes": 2 * n * n,
                         "hbm_fraction": 2 * n * n / (us * 1e-6) / (peak_tbps * 1e12)})
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "command": " ".join(["python", *sys.argv]),
            "peak_tbps": peak_tbps, "tolerance": TOLERANCE}
    output.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    failed = [r for r in rows if r.get("check") == "FAIL"]
    print(json.dumps(rows, indent=1))
    print(f"wrote {output}; {len(failed)} builds differ from the host build", file=sys.stderr)
    sys.exit(1 if failed else 0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="step", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("folder", type=Path)
    p.add_argument("--arch", default="sm_90")
    p.add_argument("--sizes", default="4096", help="comma-separated n of the n x n linear layers")
    p.add_argument("--models", default="digits", help="comma-separated zoo models")
    r = sub.add_parser("run")
    r.add_argument("folder", type=Path)
    r.add_argument("-o", "--output", type=Path, default=ROOT / "benchmarks/results/gpu_check.json")
    r.add_argument("--peak-tbps", type=float, default=4.8, help="the GPU's HBM bandwidth (H200: 4.8 TB/s)")
    args = parser.parse_args()
    if args.step == "prepare":
        prepare(args.folder, args.arch, [int(s) for s in args.sizes.split(",") if s],
                [m for m in args.models.split(",") if m])
    else:
        run(args.folder, args.output, args.peak_tbps)


if __name__ == "__main__":
    main()
