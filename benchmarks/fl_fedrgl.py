"""FedRGL against FedAvg, FedProx and FedAvg+CADF under label noise, tuned on noisy validation labels only.

    nice python benchmarks/fl_fedrgl.py [--graphs cora,citeseer] [--noises pair:0.3,uniform:0.3]
                                        [--clients 5,10] [--seeds 0,1,2,3,4] [--tune-seed 100]
                                        [--rounds 12] [--jobs 2] [--csbm-nodes N]
                                        [-o benchmarks/results/fl_fedrgl.json]

Each setting (graph x noise x client count): Louvain clients, each client's labelled nodes split
40% train and 20% validation (both with labels flipped at the client's rate, 0.5 to 1.5 times the
nominal one) and 40% test (true labels); a two-layer GCN on the in-process engine over 10 Mbit/s
links. Every method gets the same tuning budget, the two candidates of ``GRIDS``, run on the
tuning seed's data and scored by validation accuracy against the noisy labels (mean of the last 5
rounds); no run reads a test label until the chosen configuration has finished training on each
reported seed, whose final global model is then scored once on the test nodes. The table gives the
mean test accuracy with a 95% t-interval over the seeds, and FedRGL's paired t-test (over seeds)
against each baseline; the ablation adds FedRGL's parts one at a time to CADF filtering, each
tested against the step before. Finished runs are kept in ``<output stem>_runs/`` and reused
while their job is unchanged.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kept_runs import kept_path, kept_run
from seed_stats import interval, paired_difference

BASE = {"warmup": 4}  # FedRGL's warm-up, scaled to the short runs (the default 10 is for 40 rounds)
# The tuning budget: two candidates per method, each the knob its authors tune; FedRGL's is the
# proximal term the paper does not have, so its grid holds the paper's method (0) and the term.
GRIDS = {"fedavg": [{"weight_decay": 0.0}, {"weight_decay": 5e-4}],
         "fedprox": [{"mu": 0.01}, {"mu": 0.001}],
         "fedavg+cadf": [{"threshold_std": 0.0}, {"threshold_std": 0.5}],
         "fedrgl": [{"fedrgl_mu": 0.0}, {"fedrgl_mu": 0.001}]}
METHOD = {"fedavg": "fedavg", "fedprox": "fedprox", "fedavg+cadf": "fedavg+filter", "fedrgl": "fedrgl"}
BASELINES = ("fedavg", "fedprox", "fedavg+cadf")
# FedRGL's parts added one at a time to its chosen configuration with all of them off; the paper's
# FedRGL is "+ entropy weights", and the last step adds the proximal term at its grid's nonzero value.
PROXIMAL = next(candidate for candidate in GRIDS["fedrgl"] if candidate["fedrgl_mu"])
ABLATION = {"cadf": {"pseudo_weight": 0.0, "contrastive_weight": 0.0, "entropy_weighting": False, "fedrgl_mu": 0.0},
            "+ pseudo-labels": {"entropy_weighting": False, "fedrgl_mu": 0.0},
            "+ entropy weights": {"fedrgl_mu": 0.0},
            "+ proximal term": PROXIMAL}
LAST = 5
ALPHA = 0.05


def settings_for(method: str, candidate: dict, seed: int, extra: dict | None = None) -> dict:
    from edgekit.federated.fedrgl import GraphSettings

    return asdict(GraphSettings(**{"method": METHOD[method], **BASE, **candidate, **(extra or {}), "seed": seed}))


def one_run(job: dict) -> dict:
    """Train one configuration; ``job["score"]`` says which split it is scored on ("validation"
    every round for tuning, "test" once at the end for a reported seed)."""
    import torch

    from edgekit.federated.fedrgl import GraphSettings, gcn_like, graph_summary, run_graph, test_accuracy
    from edgekit.federated.graphs import client_data, csbm, load_graph
    from edgekit.utils.files import atomic_write

    kept = kept_path(job["dir"], job)
    if (saved := kept_run(kept, job)) is not None:
        return saved
    torch.set_num_threads(1)
    graph = (csbm(job["csbm_nodes"], seed=job["seed"]) if "csbm_nodes" in job
             else load_graph(job["graph"], job["planetoid"], job["seed"]))
    clients = client_data(graph, job["clients"], noise=job["noise"], rate=job["rate"], val_fraction=0.2,
                          seed=job["seed"])
    settings = GraphSettings(**job["settings"])
    result, _ = run_graph(settings, clients, graph.num_classes, job["rounds"], evaluate_on="validation")
    out = {"job": job, "validation": graph_summary(result.records, LAST)["score"]}
    if job["score"] == "test":  # the only place a test label is read
        out["test"] = test_accuracy(gcn_like(result.final, settings), clients)["accuracy"]
    atomic_write(kept, json.dumps(out) + "\n")
    print(f"{job['graph']} {job['noise']} {job['rate']} seed {job['seed']} {job['label']}: validation "
          f"{out['validation']:.3f}" + (f" test {out['test']:.3f}" if "test" in out else ""), flush=True)
    return out


def same_run(job: dict) -> str:
    """A key equal for jobs that train the same thing: everything but the label."""
    return json.dumps({key: value for key, value in job.items() if key != "label"}, sort_keys=True)


def setting_of(job: dict) -> tuple:
    """(graph, noise kind, rate, clients): the setting a job belongs to."""
    return job["graph"], job["noise"], job["rate"], job["clients"]


def paired(a: list[float], b: list[float]) -> dict:
    """``a - b`` over paired seeds (``seed_stats.paired_difference``), with its mean and whether p < ALPHA."""
    test = paired_difference(a, b)
    return {**test, "difference": test["mean"], "significant": test["p"] < ALPHA}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", default="cora,citeseer")
    parser.add_argument("--noises", default="pair:0.3,uniform:0.3")
    parser.add_argument("--clients", default="5", help="comma-separated client counts, one setting each")
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--tune-seed", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--csbm-nodes", type=int, help="nodes of the csbm graph (default: graphs.csbm's 2000); "
                        "a small graph makes a quick check of the script")
    parser.add_argument("--planetoid", type=Path,
                        default=Path(__file__).resolve().parents[1].parent / "shared" / "data" / "planetoid")
    parser.add_argument("-o", "--output", type=Path, default=Path("benchmarks/results/fl_fedrgl.json"))
    parser.add_argument("--allow-dirty", action="store_true")
    args = parser.parse_args()
    from edgekit.federated.choices import NOISES, PLANETOID
    from edgekit.utils.files import atomic_write
    from edgekit.utils.output import markdown_table
    from edgekit.utils.provenance import load_average, provenance, require_clean_tree

    require_clean_tree(args.allow_dirty)
    graphs = args.graphs.split(",")
    for graph in graphs:
        if graph not in (*PLANETOID, "csbm"):
            parser.error(f"unknown graph {graph!r}; allowed: {', '.join((*PLANETOID, 'csbm'))}")
    noises = []
    for item in args.noises.split(","):
        kind, _, rate = item.partition(":")
        if kind not in NOISES or not rate.replace(".", "", 1).isdigit():
            parser.error(f"--noises takes KIND:RATE items with KIND one of {', '.join(NOISES)}, got {item!r}")
        noises.append((kind, float(rate)))
    if args.csbm_nodes is not None and (graphs != ["csbm"] or args.csbm_nodes < 10):
        parser.error("--csbm-nodes applies to --graphs csbm alone and needs at least 10 nodes (2 per class)")
    if not all(c.isdigit() and int(c) >= 2 for c in args.clients.split(",")):
        parser.error(f"--clients takes comma-separated counts of at least 2, got {args.clients!r}")
    client_counts = [int(c) for c in args.clients.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    if len(seeds) < 2 or args.tune_seed in seeds:
        parser.error("--seeds needs at least 2 seeds for the paired test, and none equal to --tune-seed")
    made_with = provenance(seed=seeds[0], threads=1)  # before any run: the code and load the runs began with
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    done_dir = args.output.with_name(f"{args.output.stem}_runs")
    done_dir.mkdir(parents=True, exist_ok=True)
    settings_of = [(g, k, r, c) for g in graphs for k, r in noises for c in client_counts]

    def job(graph, kind, rate, clients, seed, label, settings, score):
        # csbm_nodes only when given: the jobs of a default run, and so the runs kept for them, stay as they were
        return {"graph": graph, "clients": clients, "noise": kind, "rate": rate, "seed": seed, "label": label,
                "rounds": args.rounds, "settings": settings, "score": score, "planetoid": str(args.planetoid),
                "dir": str(done_dir), **({"csbm_nodes": args.csbm_nodes} if args.csbm_nodes else {})}

    with ProcessPoolExecutor(args.jobs) as pool:
        tuning_jobs = [job(g, k, r, c, args.tune_seed, f"{m} #{i}", settings_for(m, candidate, args.tune_seed),
                           "validation")
                       for g, k, r, c in settings_of for m, grid in GRIDS.items() for i, candidate in enumerate(grid)]
        tuning = list(pool.map(one_run, tuning_jobs))
        chosen = {}
        for setting in settings_of:
            for m, grid in GRIDS.items():
                scores = [t["validation"] for t in tuning if setting_of(t["job"]) == setting
                          and t["job"]["label"].startswith(f"{m} #")]
                chosen[(*setting, m)] = grid[int(np.argmax(scores))]
        runs_jobs = []
        for g, k, r, c in settings_of:
            for seed in seeds:
                for m in GRIDS:
                    runs_jobs.append(job(g, k, r, c, seed, m, settings_for(m, chosen[g, k, r, c, m], seed), "test"))
                for step, off in ABLATION.items():
                    runs_jobs.append(job(g, k, r, c, seed, step,
                                         settings_for("fedrgl", chosen[g, k, r, c, "fedrgl"], seed, off), "test"))
        # a step of the ablation can be the chosen configuration itself (the paper's FedRGL when the
        # grid chose no proximal term): such a job runs once and is reported under both labels
        unique = {}
        for j in runs_jobs:
            unique.setdefault(same_run(j), j)
        done = dict(zip(unique, pool.map(one_run, unique.values())))
        runs = [{**done[same_run(j)], "job": j} for j in runs_jobs]

    table, ablation = [], []
    for setting in settings_of:
        g, k, r, c = setting

        def scores(label, setting=setting):
            return [next(x["test"] for x in runs if (setting_of(x["job"]), x["job"]["seed"], x["job"]["label"])
                         == (setting, s, label)) for s in seeds]
        row = {"graph": g, "noise": f"{k} {r}", "clients": c}
        for m in GRIDS:
            row[m] = interval(scores(m))
            row[f"{m} chosen"] = chosen[(*setting, m)]
        for b in BASELINES:
            row[f"fedrgl vs {b}"] = paired(scores("fedrgl"), scores(b))
        table.append(row)
        arow, previous = {"graph": g, "noise": f"{k} {r}", "clients": c}, None
        for step in ABLATION:
            arow[step] = interval(scores(step))
            if previous is not None:
                arow[f"{step} vs previous"] = paired(scores(step), scores(previous))
            previous = step
        ablation.append(arow)

    def cell(stat, test=None):
        mark = "" if test is None else (" *" if test["significant"] else "")
        return f"{stat['mean']:.3f} ± {stat['ci95']:.3f}{mark}"

    print(markdown_table([{"graph": t["graph"], "noise": t["noise"], "clients": t["clients"], **{m: cell(t[m]) for m in BASELINES},
                           "fedrgl": cell(t["fedrgl"]),
                           **{f"p vs {b}": f"{t[f'fedrgl vs {b}']['p']:.3f}" for b in BASELINES}} for t in table]))
    print(markdown_table([{"graph": a["graph"], "noise": a["noise"], "clients": a["clients"],
                           **{s: cell(a[s], a.get(f"{s} vs previous")) for s in ABLATION}} for a in ablation]))
    made_with["load_average_after"] = load_average()
    result = {"provenance": made_with, "command": " ".join(sys.argv),
              "protocol": {"clients": client_counts, "rounds": args.rounds, "seeds": seeds, "tune_seed": args.tune_seed,
                           "split": {"train": 0.4, "validation": 0.2, "test": 0.4}, "base": BASE, "grids": GRIDS,
                           "ablation": ABLATION, "alpha": ALPHA},
              "table": table, "ablation": ablation, "tuning": tuning, "runs": runs}
    atomic_write(args.output, json.dumps(result, indent=1) + "\n")
    plot(table, ablation, args.output.with_suffix(".png"))
    print(f"wrote {args.output}")


def plot(table: list[dict], ablation: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    for ax, rows, keys, title in ((axes[0], table, list(GRIDS), "methods (tuned on validation)"),
                                  (axes[1], ablation, list(ABLATION), "FedRGL ablation")):
        width = 0.8 / len(keys)
        for i, key in enumerate(keys):
            ax.bar(np.arange(len(rows)) + i * width, [r[key]["mean"] for r in rows], width,
                   yerr=[r[key]["ci95"] for r in rows], label=key, capsize=2)
        ax.set_xticks(np.arange(len(rows)) + 0.4 - width / 2,
                      [f"{r['graph']}\n{r['noise']}\n{r['clients']} clients" for r in rows], fontsize=7)
        ax.set_ylabel("test accuracy (mean, 95% CI)")
        ax.set_ylim(0.3, 0.9)
        ax.set_title(title)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
