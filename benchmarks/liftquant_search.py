"""LiftQuant search quality and speed per configuration, in one process (run by hand, not in tests).

    python benchmarks/liftquant_search.py [--samples 8192] [--layer 4096] [--layer-rows 512]
        [-o benchmarks/results/liftquant_search.json]

For every shipped codebook, on the same seeded N(0, 1) chunks:
  * mean squared error per dimension of the fast, fast+local, slices and exact searches
    (slices and exact where D <= 24; exact on fewer samples above D = 20, where it
    enumerates up to 2^24 codes);
  * encoding speed of each search in weights per second (one timed run after a warm-up).
Then one ``--layer x --layer`` Gaussian weight at 24to10, for each of the slices (its
default) and fast+local searches: the time of the search over all its chunks, and of the whole
per-layer pipeline (rotation, scales, the search, least-squares scales, packing). With
``--layer-rows R`` below ``--layer``, fast+local is timed on the first R rows only and its
whole-layer seconds are that time scaled by layer / R (said in the output). Threads:
EDGEKIT_THREADS, else every CPU; the load average at the start and end is recorded, since
other work on the machine counts.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from edgekit.simulators.formats import LIFTQUANT_FORMATS
from edgekit.simulators.liftquant import quantize
from edgekit.simulators.liftquant.codebooks import load_codebook
from edgekit.simulators.liftquant.search import EXACT_MAX_LIFTED
from edgekit.utils.files import atomic_write
from edgekit.utils.parallel import thread_count
from edgekit.utils.provenance import load_average, provenance, require_clean_tree


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def cpu_timed(fn):
    """(result, wall seconds, CPU seconds of every thread of this process): on a shared machine the
    CPU seconds divided by the threads say what dedicated cores would take."""
    cpu = time.process_time()
    out, wall = timed(fn)
    return out, wall, time.process_time() - cpu


def measure(name: str, samples: int, seed: int) -> dict:
    codebook = load_codebook(name)
    fmt = codebook.format
    x = np.random.default_rng(seed).standard_normal((samples, fmt.chunk)).astype(np.float32)
    row = {"format": name, "D": fmt.lifted, "d": fmt.chunk, "bits": fmt.code_bits_per_weight,
           "default_search": codebook.default_search}
    searches = ["fast", "fast+local"] + (["slices", "exact"] if fmt.lifted <= EXACT_MAX_LIFTED else [])
    for search in searches:
        n = samples if search != "exact" or fmt.lifted <= 20 else max(256, samples // 32)
        codebook.encode(x[:64], search)  # compile / load the kernels
        (_, err), seconds = timed(lambda n=n, search=search: codebook.encode(x[:n], search))
        row[f"mse_{search}"] = float(err.mean() / fmt.chunk)
        row[f"samples_{search}"] = n
        row[f"weights_per_s_{search}"] = n * fmt.chunk / seconds
    if "mse_exact" in row:  # on the chunks exact saw: above D = 20 fewer than the others
        n = row["samples_exact"]
        for search in ("fast+local", "slices"):
            same = float(codebook.encode(x[:n], search)[1].mean() / fmt.chunk)
            row[f"{search.replace('+', '_')}_over_exact"] = same / row["mse_exact"] - 1
    return row


def time_layer(w: np.ndarray, search: str, rows: int) -> dict:
    """Seconds of the search alone and of the whole pipeline on the first ``rows`` rows of ``w``,
    and both scaled to all of ``w``'s rows."""
    codebook = load_codebook("liftquant_24to10")
    part = w[:rows]
    flat = part.reshape(-1)
    chunks = np.pad(flat, (0, -flat.size % 10)).reshape(-1, 10)
    _, search_seconds, search_cpu = cpu_timed(lambda: codebook.encode(chunks, search))
    q, pipeline_seconds, pipeline_cpu = cpu_timed(lambda: quantize(part, "liftquant_24to10", search=search))
    scale = w.shape[0] / rows
    return {"search": search, "default": search == codebook.default_search, "rows_timed": rows,
            "search_seconds": search_seconds * scale,
            "search_cpu_seconds": search_cpu * scale, "search_weights_per_s": part.size / search_seconds,
            "pipeline_seconds": pipeline_seconds * scale, "pipeline_cpu_seconds": pipeline_cpu * scale,
            "pipeline_weights_per_s": part.size / pipeline_seconds, "extrapolated": rows < w.shape[0],
            "bits_per_weight": q.bits_per_weight,
            "relative_mse": float(((q.dequantize().astype(np.float64) - part) ** 2).mean())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=8192)
    parser.add_argument("--layer", type=int, default=4096)
    parser.add_argument("--layer-rows", type=int, default=None,
                        help="time fast+local on this many rows of the layer and scale (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--configs", nargs="*", default=list(LIFTQUANT_FORMATS))
    parser.add_argument("--allow-dirty", action="store_true", help="run on a tree with uncommitted changes")
    parser.add_argument("-o", "--output", type=Path, default=Path("benchmarks/results/liftquant_search.json"))
    args = parser.parse_args()
    require_clean_tree(args.allow_dirty)
    meta = {"command": "python " + " ".join(sys.argv), **provenance(args.seed, threads=thread_count())}
    rows = []
    for name in args.configs:
        rows.append(measure(name, args.samples, args.seed))
        print(json.dumps(rows[-1]), flush=True)
    w = np.random.default_rng(args.seed).standard_normal((args.layer, args.layer)).astype(np.float32)
    for search in ("slices", "fast+local"):  # compile / load the kernels; rows the timed runs do not start with,
        time_layer(w[-64:], search, 64)      # since quantize keeps recent encodings
    layer = {"shape": [args.layer, args.layer], "format": "liftquant_24to10", "threads": thread_count(),
             "runs": [time_layer(w, "slices", args.layer),
                      time_layer(w, "fast+local", min(args.layer_rows or args.layer, args.layer))]}
    print(json.dumps(layer), flush=True)
    meta["load_average_after"] = load_average()
    atomic_write(args.output, json.dumps({"meta": meta, "configs": rows, "layer": layer, "samples": args.samples},
                                         indent=2) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
