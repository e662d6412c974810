"""``edgekit eval MODEL_FILE --format F ...``: a user's ONNX or ``.pt2`` model, without a metric of its own.

Each format's quantized ONNX (what ``edgekit export`` writes) runs in stock onnxruntime
on the same inputs as the float graph; per output, how far it strays from float
(``simulators.metrics.output_agreement``). Inputs come from an ``.npz`` file keyed by
input name, or are drawn (standard normal) for float inputs where none is given.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from edgekit.compilers.onnx_export import export_onnx_graph, onnx_session
from edgekit.compilers.plan import is_liftquant, make_plan
from edgekit.compilers.preflight import check_quantizes
from edgekit.simulators import weight_formats as wf
from edgekit.simulators.metrics import output_agreement

from .compile import resolve_model

RANDOM_BATCH = 8  # rows drawn for a symbolic batch dim, so that top-1 agreement is over more than one row
GRAPH_LIFTQUANT_BITS = 2.4  # one LiftQuant width: its encoding of a large graph's weights takes the longest


def default_formats() -> list[str]:
    """Every float format but the reference, every block format, LiftQuant at 2.4 code bits."""
    return [*wf.names("float", lambda r: r.name != wf.REFERENCE), *wf.names("block"),
            *wf.liftquant_for_bits(GRAPH_LIFTQUANT_BITS)]
ORT_DTYPES = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16,
              "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(bool)": np.bool_}


def load_inputs(path: Path | None, session, seed: int = 0) -> dict[str, np.ndarray]:
    """The model's inputs: arrays from ``path`` (an ``.npz`` keyed by input name), else drawn for float inputs."""
    expected = {i.name: i for i in session.get_inputs()}
    if path is not None:
        try:
            with np.load(path) as data:
                arrays = {k: data[k] for k in data.files}
        except (OSError, ValueError) as err:
            raise ValueError(f"--inputs {str(path)!r} is not an .npz file of arrays: {err}") from None
        missing, strange = sorted(set(expected) - set(arrays)), sorted(set(arrays) - set(expected))
        if missing or strange:
            raise ValueError(f"--inputs {str(path)!r} holds {sorted(arrays)}; the model takes {sorted(expected)}")
        out = {}
        for name, array in arrays.items():
            want = expected[name]
            dims = want.shape
            if array.ndim != len(dims) or any(isinstance(d, int) and d != s for d, s in zip(dims, array.shape)):
                raise ValueError(f"input {name!r} must have shape {dims} (strings are free dims), "
                                 f"--inputs gives {list(array.shape)}")
            out[name] = array.astype(ORT_DTYPES.get(want.type, array.dtype), copy=False)
        return out
    rng = np.random.default_rng(seed)
    out = {}
    for name, want in expected.items():
        dtype = ORT_DTYPES.get(want.type)
        if dtype not in (np.float32, np.float64, np.float16):
            raise ValueError(f"input {name!r} is {want.type}: give its values with --inputs data.npz "
                             f"(a key {name!r} holding an array of shape {want.shape})")
        if any(not (isinstance(d, int) and d > 0) for d in want.shape[1:]):
            raise ValueError(f"input {name!r} has symbolic dims {want.shape}: give its values with --inputs data.npz")
        shape = [d if isinstance(d, int) and d > 0 else RANDOM_BATCH for d in want.shape]
        out[name] = rng.standard_normal(shape).astype(dtype)
    return out


def evaluate_model_file(model: str, formats: list[str], inputs: Path | None = None, input_shapes: dict | None = None,
                        embeddings: bool = False, seed: int = 0, log: Callable[[str], None] = print,
                        progress: Callable | None = None) -> list[dict]:
    """One row per (format, output): quantized layers of all, their bits per weight, cosine, max/mean error and
    top-1 agreement against float."""
    source = resolve_model(model, seed, log, input_shapes, embeddings, fix_shapes=False)
    with tempfile.TemporaryDirectory(prefix="edgekit-eval-") as tmp:
        float_path = Path(tmp) / "fp32.onnx"
        float_path.write_bytes(source.graph.SerializeToString())
        session = onnx_session(float_path)
        feeds = load_inputs(inputs, session, seed)
        names = [o.name for o in session.get_outputs()]
        reference = session.run(None, feeds)
        rows = []
        for fmt in progress(formats) if progress else formats:
            start = time.perf_counter()
            plan = make_plan(source.sites, fmt)
            if is_liftquant(plan_format := next(iter(plan.values()), fmt)):  # LiftQuant codes 2-D weights only
                plan = {layer: f for layer, f in plan.items() if len(source.sites[layer].shape) == 2}
                if not plan:
                    log(f"{plan_format}: not applicable, the model has no 2-D (MatMul/Gemm) weight")
                    continue
            check_quantizes(plan, fmt, source.label, source.skipped)
            summary = export_onnx_graph(source.graph, plan, source.sites, Path(tmp) / f"{fmt}.onnx")
            outputs = onnx_session(summary["path"]).run(None, feeds)
            seconds = round(time.perf_counter() - start, 2)
            for name, ref, out in zip(names, reference, outputs, strict=True):
                rows.append({"format": fmt, "output": name, "layers": f"{len(plan)}/{len(source.sites)}",
                             "bits/weight": summary["totals"]["weight_bits"],
                             **output_agreement(ref, out), "seconds": seconds})
    return rows
