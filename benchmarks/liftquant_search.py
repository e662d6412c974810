"""LiftQuant search quality and speed per configuration, in one process (run by hand, not in tests).

    python benchmarks/liftquant_search.py [--samples 8192] [--layer 4096] [-o benchmarks/results/liftquant_search.json]

For every shipped codebook, on the same seeded N(0, 1) chunks:
  * mean squared error per dimension of the fast, fast+local and exact searches (exact
    where D <= 24; on fewer samples above D = 20, where it enumerates up to 2^24 codes);
  * encoding speed of each search in weights per second (one timed run after a warm-up).
Then one ``--layer x --layer`` Gaussian weight at 24to10: the time of one fast+local
search over all its chunks, and of the whole per-layer pipeline (rotation, scales, the
search, least-squares scales, packing). Threads: EDGEKIT_THREADS, else every CPU; the
load average at the start and end is recorded, since other work on the machine counts.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from edgekit.simulators.formats import LIFTQUANT_FORMATS
from edgekit.simulators.liftquant import quantize
from edgekit.simulators.liftquant_codebooks import load_codebook
from edgekit.simulators.liftquant_search import EXACT_MAX_LIFTED
from edgekit.simulators.parallel import thread_count


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def measure(name: str, samples: int, seed: int) -> dict:
    codebook = load_codebook(name)
    fmt = codebook.format
    x = np.random.default_rng(seed).standard_normal((samples, fmt.chunk)).astype(np.float32)
    row = {"format": name, "D": fmt.lifted, "d": fmt.chunk, "bits": fmt.code_bits_per_weight}
    searches = ["fast", "fast+local"] + (["exact"] if fmt.lifted <= EXACT_MAX_LIFTED else [])
    for search in searches:
        n = samples if search != "exact" or fmt.lifted <= 20 else max(256, samples // 32)
        codebook.encode(x[:64], search)  # compile / load the kernels
        (_, err), seconds = timed(lambda n=n, search=search: codebook.encode(x[:n], search))
        row[f"mse_{search}"] = float(err.mean() / fmt.chunk)
        row[f"samples_{search}"] = n
        row[f"weights_per_s_{search}"] = n * fmt.chunk / seconds
    if "mse_exact" in row:  # on the chunks exact saw: above D = 20 fewer than the others
        n = row["samples_exact"]
        same = float(codebook.encode(x[:n], "fast+local")[1].mean() / fmt.chunk)
        row["fast_local_over_exact"] = same / row["mse_exact"] - 1
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=8192)
    parser.add_argument("--layer", type=int, default=4096)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--configs", nargs="*", default=list(LIFTQUANT_FORMATS))
    parser.add_argument("-o", "--output", type=Path, default=Path("benchmarks/results/liftquant_search.json"))
    args = parser.parse_args()
    load_before = os.getloadavg()
    rows = []
    for name in args.configs:
        rows.append(measure(name, args.samples, args.seed))
        print(json.dumps(rows[-1]), flush=True)
    w = np.random.default_rng(args.seed).standard_normal((args.layer, args.layer)).astype(np.float32)
    codebook = load_codebook("liftquant_24to10")
    chunks = w.reshape(-1, 10) if w.size % 10 == 0 else np.pad(w.reshape(-1), (0, -w.size % 10)).reshape(-1, 10)
    _, search_seconds = timed(lambda: codebook.encode(chunks, "fast+local"))
    q, pipeline_seconds = timed(lambda: quantize(w, "liftquant_24to10"))
    layer = {"shape": [args.layer, args.layer], "format": "liftquant_24to10", "threads": thread_count(),
             "search_seconds": search_seconds, "search_weights_per_s": w.size / search_seconds,
             "pipeline_seconds": pipeline_seconds, "bits_per_weight": q.bits_per_weight,
             "relative_mse": float(((q.dequantize().astype(np.float64) - w) ** 2).mean())}
    print(json.dumps(layer), flush=True)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({"configs": rows, "layer": layer, "threads": thread_count(),
                                       "samples": args.samples, "seed": args.seed,
                                       "load_average_before_after": [load_before, os.getloadavg()]}, indent=2) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
