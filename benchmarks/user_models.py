"""Users' own models through export, compile and run, measured in one process (run by hand).

    python benchmarks/user_models.py [--formats fp16,mxint8,...] [--models bert,gpt2,...] [--rounds 30]
                                     [--threads 2] [-o benchmarks/results/user_models.json] [--allow-dirty]

The corpus is the tests' (``tests/compilers/user_models.py``): transformers' BERT, GPT-2, ViT,
ResNet-18 and MobileNetV2 built from config classes with random weights, and a bare
``nn.Linear(256, 128)`` exported by ``torch.onnx.export`` (opset 17, TorchScript exporter).

1. Accuracy against float without a metric (``edgekit eval MODEL.onnx``): each format's
   quantized ONNX in onnxruntime on the same inputs (batch 4; token ids drawn in the
   vocabulary): cosine similarity, max and mean error, top-1 agreement of the last axis.
2. Compile for this CPU in MXFP4 and run with TVM's runtime alone (``edgekit.runtime``):
   the largest difference from onnxruntime running the MXFP4 ONNX export, relative to the
   output's largest magnitude; whether the batch stayed symbolic; and the median latency
   of the build against onnxruntime fp32 on the float graph at batch 1 and 4, in interleaved
   rounds, each sample taken after the other runtime's spinning worker threads went idle.
3. One build for any batch against one for batch 1: ResNet-18's symbolic-batch build and
   its batch-1 build, timed at batch 1 (the cost of the symbolic batch); only when ``--models``
   includes resnet18.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FORMATS = "fp16,mxint8,mxfp8_e4m3,mxfp6_e2m3,mxfp4,mxint4,nvfp4,liftquant_24to10"
# transformer exports carry shape arithmetic TVM cannot import with a symbolic batch: built per batch
FIXED = {"bert": ["input_ids", "attention_mask"], "gpt2": ["input_ids"], "vit": ["pixel_values"]}


def interleaved_ms(calls: dict, rounds: int, threads: int) -> dict[str, float]:
    """Median milliseconds per call of each named callable, timed in rotating interleaved rounds
    (``jobs.bench.time_interleaved``: each sample after the previous runtime's spinning workers went idle)."""
    from edgekit.jobs.bench import Backend, python_timer, time_interleaved

    backends = [Backend(name=name, fmt="", weight_bits=0.0, weight_bytes=0, threads=threads, call=call,
                        mean_time=python_timer(call), timing="python loop") for name, call in calls.items()]
    time_interleaved(backends, rounds)
    return {b.name: 1e3 * statistics.median(b.samples) for b in backends}


def compile_dir(model: Path, fmt: str, out: Path, shapes: list[str] = (), max_batch: int | None = None) -> dict:
    from edgekit.compilers.onnx_graph import parse_input_shapes
    from edgekit.jobs.compile import compile_model

    return compile_model(str(model), fmt, "host", out, input_shapes=parse_input_shapes(shapes), max_batch=max_batch,
                         log=lambda _: None)


def shapes_for(name: str, feeds: dict) -> list[str]:
    return [f"{k}={'x'.join(map(str, feeds[k].shape))}" for k in FIXED.get(name, [])]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--formats", default=FORMATS)
    parser.add_argument("--models", help="comma-separated models of the corpus (default: all of them)")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("-o", "--output", type=Path, default=ROOT / "benchmarks/results/user_models.json")
    parser.add_argument("--allow-dirty", action="store_true", help="run on a tree with uncommitted changes")
    args = parser.parse_args()

    import torch

    from edgekit.compilers.onnx_export import onnx_session
    from edgekit.compilers.runtime import load
    from edgekit.jobs.bench import configure_tvm_threads
    from edgekit.jobs.compile import export_model
    from edgekit.jobs.graph_eval import evaluate_model_file
    from edgekit.utils.output import atomic_write, json_safe, markdown_table
    from edgekit.utils.provenance import load_average, provenance, require_clean_tree
    from tests.compilers.user_models import CORPUS, export_onnx, inputs_npz

    models = list(CORPUS) if args.models is None else [m.strip() for m in args.models.split(",") if m.strip()]
    if not models or not set(models) <= set(CORPUS):
        parser.error(f"--models takes a comma-separated list of {', '.join(CORPUS)}, got {args.models!r}")
    require_clean_tree(args.allow_dirty)
    torch.set_num_threads(args.threads)
    configure_tvm_threads(args.threads)
    meta = {**provenance(0, args.threads), "rounds": args.rounds}  # the SHA of the tree the run started on
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    accuracy, builds, dynamic = [], [], []
    with tempfile.TemporaryDirectory(prefix="edgekit-user-models-") as tmp:
        tmp = Path(tmp)
        for name in models:
            print(f"{name} ...", file=sys.stderr)
            path = export_onnx(name, tmp)
            for row in evaluate_model_file(str(path), formats, inputs_npz(name, tmp, 4), log=lambda _: None):
                accuracy.append({"model": name, **{k: v for k, v in row.items() if k != "seconds"}})
            quantized = tmp / f"{name}_mxfp4.onnx"
            export_model(str(path), "mxfp4", quantized, log=lambda _: None)
            float_session, q_session = onnx_session(path, threads=args.threads), onnx_session(quantized)
            for batch in (1, 4):
                feeds = dict(np.load(inputs_npz(name, tmp, batch)))
                symbolic = name not in FIXED
                if symbolic and batch != 1 and (tmp / f"{name}_build").exists():
                    build_dir = tmp / f"{name}_build"
                else:
                    build_dir = tmp / f"{name}_build{'' if symbolic else batch}"
                    manifest = compile_dir(path, "mxfp4", build_dir, shapes_for(name, feeds))
                built = load(build_dir)
                arrays = [feeds[i["name"]] for i in built.inputs]
                got = built(*arrays)[0]
                expected = q_session.run(None, feeds)[0]
                ms = interleaved_ms({"tvm": lambda b=built, a=arrays: b(*a),
                                     "onnxruntime": lambda s=float_session, f=feeds: s.run(None, f)},
                                    args.rounds, args.threads)
                tvm_ms, ort_ms = ms["tvm"], ms["onnxruntime"]
                builds.append({"model": name, "batch": batch, "symbolic_batch": manifest.get("max_batch") is not None,
                               "layers": len(manifest["layers"]),
                               "max_rel_diff_vs_onnxruntime": float(np.abs(got - expected).max()
                                                                    / np.abs(expected).max()),
                               "tvm_mxfp4_ms": tvm_ms, "onnxruntime_fp32_ms": ort_ms,
                               "speedup_vs_onnxruntime_fp32": ort_ms / tvm_ms})
        if "resnet18" in models:  # compares against the symbolic-batch build section 2 made
            print("resnet18: symbolic against fixed batch ...", file=sys.stderr)
            path = tmp / "resnet18.onnx"
            fixed = tmp / "resnet18_fixed"
            compile_dir(path, "mxfp4", fixed, max_batch=1)
            x = [np.load(inputs_npz("resnet18", tmp, 1))["pixel_values"]]
            symbolic, fixed_batch = load(tmp / "resnet18_build"), load(fixed)
            ms = interleaved_ms({"symbolic (any batch up to 64)": lambda: symbolic(*x),
                                 "batch 1": lambda: fixed_batch(*x)}, args.rounds, args.threads)
            dynamic = [{"build": label, "batch": 1, "median_ms": median} for label, median in ms.items()]
    meta["load_average_after"] = load_average()
    sections = {"accuracy": accuracy, "builds": builds, "symbolic_batch": dynamic}
    atomic_write(args.output, json.dumps(json_safe({"meta": meta, **sections}), indent=2) + "\n")
    for title, rows in sections.items():
        if rows:  # symbolic_batch is empty without resnet18
            print(f"\n## {title}\n\n{markdown_table(rows)}")
    print(f"\nwrote {args.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
