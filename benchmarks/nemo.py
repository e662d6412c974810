"""NEMO on generated optimisation word problems: validation, MBR, self-consistency, memory (run by hand).

    python benchmarks/nemo.py --seeds 0 1 2 [--per-family 5] [--candidates 4] [--max-rounds 3]
        [-o benchmarks/results/nemo.json]

Per seed, a fresh suite (``--per-family`` problems of each of six families, optima by enumeration).
The offline agent writes ``--candidates`` models per problem with realistic slips; every program
runs sandboxed with HiGHS or CP-SAT. From the same candidates, each condition gives one answer,
judged right when it breaks no constraint of the text and reaches the known optimum:
single (first candidate as written), single_memory (the same, its model checked against the memory
of solved problems), single_validated (first candidate after simulator
validation and repair), self_consistency and mbr (over the candidates as written),
validated_mbr (MBR among validated candidates), validated_mbr_memory (the same candidates' draws,
with the memory of solved problems filled as the suite goes). Nothing is tuned.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
from seed_stats import mean_ci

from edgekit.models.nemo import CONDITIONS, run_suite
from edgekit.models.nemo_agent import OfflineAgent
from edgekit.models.nemo_problems import FAMILIES, suite
from edgekit.models.sandbox import isolation_layers
from edgekit.utils.files import atomic_write
from edgekit.utils.provenance import load_average, provenance, require_clean_tree


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4))
    acc = result["summary"]["accuracy"]
    left.bar(range(len(CONDITIONS)), [acc[c]["mean"] for c in CONDITIONS], yerr=[acc[c]["ci95"] for c in CONDITIONS],
             capsize=4, color="tab:blue")
    left.set_xticks(range(len(CONDITIONS)), CONDITIONS, rotation=25, ha="right", fontsize=8)
    left.set_ylabel("accuracy (right optimum), mean over seeds, 95% CI")
    left.set_ylim(0, 1)
    rounds = result["summary"]["validated_at_round"]
    keys = sorted(rounds, key=lambda k: (k == "never", k))
    right.bar(keys, [rounds[k] for k in keys], color="tab:green")
    right.set_xlabel("repairs before the simulator agreed")
    right.set_ylabel("candidates (all seeds)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--per-family", type=int, default=5)
    parser.add_argument("--candidates", type=int, default=4)
    parser.add_argument("--max-rounds", type=int, default=3)
    parser.add_argument("--allow-dirty", action="store_true")
    parser.add_argument("-o", "--output", type=Path, default=Path("benchmarks/results/nemo.json"))
    args = parser.parse_args(argv)
    require_clean_tree(args.allow_dirty)
    prov = provenance(seed=args.seeds[0], threads=1)
    agent = OfflineAgent()
    per_seed, started = [], time.perf_counter()
    for seed in args.seeds:
        t0 = time.perf_counter()
        rows = run_suite(suite(args.per_family, seed), agent, args.candidates, args.max_rounds, seed)
        per_seed.append({"seed": seed, "rows": rows, "seconds": time.perf_counter() - t0,
                         "accuracy": {c: float(np.mean([r[c] for r in rows])) for c in CONDITIONS},
                         "accuracy_by_family": {f: {c: float(np.mean([r[c] for r in rows if r["family"] == f]))
                                                    for c in CONDITIONS} for f in FAMILIES}})
        print(f"seed {seed}: " + "  ".join(f"{c} {per_seed[-1]['accuracy'][c]:.3f}" for c in CONDITIONS)
              + f"  ({per_seed[-1]['seconds']:.0f} s)", file=sys.stderr)
    candidates = [(v, k) for s in per_seed for r in s["rows"] for v, k in zip(r["validated"], r["rounds"])]
    rounds = Counter(str(k) if v else "never" for v, k in candidates)
    slips = Counter(slip for s in per_seed for r in s["rows"] for cand in r["slips"] for slip in cand)
    summary = {"accuracy": {c: mean_ci([s["accuracy"][c] for s in per_seed]) for c in CONDITIONS},
               "accuracy_by_family": {f: {c: mean_ci([s["accuracy_by_family"][f][c] for s in per_seed])
                                          for c in CONDITIONS} for f in FAMILIES},
               "validated_at_round": dict(rounds), "candidates": len(candidates),
               "clean_first_drafts": sum(not cand for s in per_seed for r in s["rows"] for cand in r["slips"]),
               "slips": dict(slips),
               "mean_repairs": {key: float(np.mean([k for s in per_seed for r in s["rows"] for k in r[key]]))
                                for key in ("rounds", "rounds_memory")},
               "memory_reused": [s["rows"][-1]["memory_reused"] for s in per_seed]}
    prov["load_average_after"] = load_average()
    result = {"command": "python " + " ".join([sys.argv[0]] + (argv if argv is not None else sys.argv[1:])),
              "provenance": prov, "sandbox_layers": isolation_layers(), "per_family": args.per_family,
              "candidates": args.candidates, "max_rounds": args.max_rounds,
              "agent": {"p_clean": agent.p_clean, "p_second": agent.p_second, "p_sim_gap": agent.p_sim_gap},
              "summary": summary, "per_seed": per_seed, "seconds": time.perf_counter() - started}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(args.output, json.dumps(result, indent=1) + "\n")
    plot(result, args.output.with_suffix(".png"))
    for c in CONDITIONS:
        a = summary["accuracy"][c]
        print(f"{c:22s} {a['mean']:.3f} +- {a['ci95']:.3f}")
    print("validated at round:", dict(rounds))


if __name__ == "__main__":
    main()
