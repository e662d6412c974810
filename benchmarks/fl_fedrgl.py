"""FedRGL against FedAvg, FedProx and FedAvg with the filter plug-in, under label noise (run by hand, with nice).

    nice python benchmarks/fl_fedrgl.py [--graphs cora,citeseer,csbm] [--clients 5]
                                        [--noises uniform:0.3,pair:0.3] [--seeds 0,1]
                                        [--rounds 40] [-o benchmarks/results/fl_fedrgl.json]

Each run: Louvain clients of the graph, each with 40% of its labelled nodes for training
(labels corrupted at per-client rates spread from 0.5 to 1.5 times the nominal rate) and
40% for testing (true labels); a two-layer GCN on the in-process engine over 10 Mbit/s
links. Test accuracy is the global model's on every client's test nodes, pooled; a run's
score is the mean over its last 5 rounds (round-to-round swings under noise are a few
points). The table gives mean and standard deviation of that score over seeds (the seed
draws the split, the noise and the initial model). ``fedrgl`` aggregates by train nodes
times its entropy relative to that of its mean prediction, to the power -0.5
(``entropy_reference``, ``entropy_power``: chosen on Cora, pair 0.3, 10 clients, seed 9, a
seed no table uses); every method trains with Adam without weight decay (see
``GraphSettings.weight_decay``), and the baselines run with 5e-4 too (``(wd 5e-4)``), the
better setting for them in some rows. ``fedrgl`` trains with its weak proximal term
(``fedrgl_mu`` 0.001, chosen on seed 9 of Cora and CiteSeer); ``fedrgl (no proximal term)``
is FedRGL without it, an ablation. ``--methods`` adds ``fedrgl (count weights)``, FedRGL
aggregating by train-node counts alone: another ablation. Cora and CiteSeer come from
``../shared/data/planetoid`` (or ``--planetoid``); CSBM graphs (2000 nodes, 5 classes, 128 features, homophily 0.8) are
generated. Every finished run is kept in ``<output stem>_runs/`` and reused while its job
(settings included) is unchanged. The results
files: the defaults (``fl_fedrgl.json``), ``--graphs csbm --noises pair:0.4,uniform:0.5 -o
benchmarks/results/fl_fedrgl_csbm_hard.json`` and ``--graphs cora,citeseer --clients 10
--noises pair:0.3 --seeds 0,1,2 -o benchmarks/results/fl_fedrgl_10clients.json`` (its
results file also has ``fedrgl (count weights)``: every method named in ``--methods``).
``--seeds 9`` with ``--graphs cora,citeseer`` and ``--clients 10 --noises pair:0.3`` or
``--clients 5 --noises uniform:0.3`` are the tuning runs, which no table uses.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import asdict
from pathlib import Path

import numpy as np

# The baselines also with the weight decay they had before it went to 0 for every method: it
# costs them 10-15 points on Cora with 10 clients but is the better setting elsewhere (FedAvg on
# CiteSeer, 10 clients; Cora, 5 clients, uniform), so the claim is checked against both.
METHODS = {"fedavg": {"method": "fedavg"}, "fedprox": {"method": "fedprox"},
           "fedavg+filter": {"method": "fedavg+filter"},
           "fedavg (wd 5e-4)": {"method": "fedavg", "weight_decay": 5e-4},
           "fedprox (wd 5e-4)": {"method": "fedprox", "weight_decay": 5e-4},
           "fedavg+filter (wd 5e-4)": {"method": "fedavg+filter", "weight_decay": 5e-4},
           "fedprox (mu 0.001)": {"method": "fedprox", "mu": 0.001},  # FedRGL's proximal weight
           "fedrgl": {"method": "fedrgl"},
           "fedrgl (no proximal term)": {"method": "fedrgl", "fedrgl_mu": 0.0},
           "fedrgl (count weights)": {"method": "fedrgl", "entropy_weighting": False}}
LAST = 5


def one_run(job: dict, planetoid: Path, done_dir: Path) -> dict:
    import torch

    from edgekit.federated.fedrgl import GraphSettings, graph_summary, run_graph
    from edgekit.federated.graphs import client_data, load_graph
    from edgekit.simulators.files import atomic_write

    kept = done_dir / (f"{job['graph']}_{job['clients']}_{job['noise']}{job['rate']}_s{job['seed']}_"
                       f"{job['label'].replace(' ', '_').replace('(', '').replace(')', '')}.json")
    if kept.exists():
        saved = json.loads(kept.read_text())
        if saved["job"] == job:
            return saved
    torch.set_num_threads(1)
    graph = load_graph(job["graph"], planetoid, job["seed"])
    clients = client_data(graph, job["clients"], noise=job["noise"], rate=job["rate"], seed=job["seed"])
    settings = GraphSettings(**job["settings"])
    result, grid = run_graph(settings, clients, graph.num_classes, job["rounds"])
    out = {"job": job, **graph_summary(result.records, LAST), "bytes": grid.bytes.total,
           "sim_time": result.records[-1].sim_time}
    atomic_write(kept, json.dumps(out) + "\n")
    print(f"{job['graph']} {job['clients']} clients {job['noise']} {job['rate']} seed {job['seed']} {job['label']}: "
          f"{out['score']:.3f}", flush=True)
    return out


def table(runs: list[dict]) -> list[dict]:
    rows = {}
    for run in runs:
        job = run["job"]
        key = (job["graph"], job["clients"], f"{job['noise']} {job['rate']}")
        rows.setdefault(key, {}).setdefault(job["label"], []).append(run["score"])
    out = []
    for (graph, clients, noise), by_method in rows.items():
        row = {"graph": graph, "clients": clients, "noise": noise}
        for label in METHODS:
            scores = by_method.get(label)
            row[label] = f"{np.mean(scores):.3f} ± {np.std(scores):.3f}" if scores else "-"
        best = max((lb for lb in METHODS if lb in by_method), key=lambda lb: np.mean(by_method[lb]))
        row["best"] = best
        out.append(row)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", default="cora,citeseer,csbm")
    parser.add_argument("--clients", default="5")
    parser.add_argument("--noises", default="uniform:0.3,pair:0.3")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--methods", default=",".join(m for m in METHODS if m != "fedrgl (count weights)"))
    parser.add_argument("--planetoid", type=Path,
                        default=Path(__file__).resolve().parents[1].parent / "shared" / "data" / "planetoid")
    parser.add_argument("-o", "--output", type=Path, default=Path("benchmarks/results/fl_fedrgl.json"))
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    for label in args.methods.split(","):
        if label not in METHODS:
            parser.error(f"unknown method {label!r}; allowed: {', '.join(METHODS)}")
    done_dir = args.output.with_name(f"{args.output.stem}_runs")
    done_dir.mkdir(parents=True, exist_ok=True)
    from edgekit.federated.fedrgl import GraphSettings

    jobs = [{"graph": graph, "clients": int(clients), "noise": noise.split(":")[0], "rate": float(noise.split(":")[1]),
             "seed": int(seed), "label": label, "rounds": args.rounds,
             "settings": asdict(GraphSettings(**METHODS[label], seed=int(seed)))}  # a kept run is reused only if equal
            for graph in args.graphs.split(",") for clients in args.clients.split(",")
            for noise in args.noises.split(",") for seed in args.seeds.split(",") for label in args.methods.split(",")]
    runs = [one_run(job, args.planetoid, done_dir) for job in jobs]

    from edgekit.output import markdown_table
    from edgekit.provenance import provenance
    from edgekit.simulators.files import atomic_write

    rows = table(runs)
    print(markdown_table(rows))
    atomic_write(args.output, json.dumps({"meta": provenance(0), "table": rows, "runs": runs}, indent=1) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
