"""DiLoCo against gossip DiLoCo over slow, lossy links: the grid of issue 7 section 2 (run by hand, with nice).

    nice python benchmarks/fl_diloco.py [--rounds 20] [--inner-steps 20] [--bandwidths 2Mbit,10Mbit,100Mbit]
                                        [--topologies exponential] [--mix-momentum] [--seeds 0]
                                        [--methods diloco:0,gossip:0,gossip:1,gossip:2]
                                        [--conditions healthy,stragglers,faults] [--compression none]
                                        [--eval-every 1] [--jobs 2] [-o benchmarks/results/fl_diloco.json]

8 workers train the byte-level LM (``edgekit.jobs.fl``: LMConfig.tiny, data split by file) on
the in-process engine. Every method runs at every bandwidth, topology (gossip's; DiLoCo has
none) and seed, on a healthy network, with a straggler (client 3 computing 3x slower) and
with faults (the straggler, and every link down in 10% of its 2-second outage periods);
``stragglers-waiting`` is the straggler with no deadline, the server waiting for every update,
so that the time DiLoCo's deadline saves stands beside the work it loses.
Links share each device's uplink and downlink (:mod:`edgekit.federated.sharing`). Loss is
each worker's own model's (mean and worst; for gossip also the loss of the workers' average,
an oracle figure: no run pays for its all-reduce). A straggler's update that misses DiLoCo's
deadline is work lost: its inner steps are counted beside the time the deadline saves. Methods: DiLoCo, and gossip DiLoCo with k = 0, 1, 2 blocking mixing
steps; ``--compression`` runs each also with its exchanged tensors in MX formats (``none``,
``mxint8``, ``mxfp4``). The simulated device is a Raspberry Pi 4 at 10% of its fp32 peak (11.5 GFLOP/s);
latency 50 ms. Runs go to separate processes, one PyTorch thread each; each finished run is kept in
``<output stem>_runs/`` and reused when the grid is run again with the same settings.

Writes the JSON (every run's full report and a summary table), a PNG of validation loss
against simulated wall-clock for every (condition, bandwidth), and one six-panel PNG per
(condition, bandwidth) (loss against wall-clock and against steps, disagreement, utilization,
bytes, round time). The
goal check: at each bandwidth where DiLoCo's utilization is below 60% on the healthy network,
does gossip with k = 0 reach 95% utilization with a final loss within 2% of DiLoCo's (both
uncompressed)?
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

STRAGGLER = {"straggler": 3, "straggler_slowdown": 3.0}
NO_DEADLINE_S = 1e6  # simulated seconds: longer than any exchange, so the server waits for every update
CONDITIONS = {"healthy": {}, "stragglers": STRAGGLER, "faults": {"outage": 0.1, "outage_period_s": 2.0, **STRAGGLER},
              "stragglers-waiting": {**STRAGGLER, "deadline_s": NO_DEADLINE_S}}


def condition_name(settings: dict) -> str:
    """The condition of a job (``outage``, ``straggler``) or a report's settings (``outage``, ``straggler``)."""
    if settings.get("outage", 0) > 0:
        return "faults"
    if settings.get("straggler", -1) < 0:
        return "healthy"
    return "stragglers-waiting" if settings.get("deadline_s", settings.get("deadline-s", 0)) >= NO_DEADLINE_S \
        else "stragglers"


def run_name(job: dict) -> str:
    topology = f"_{job['topology']}" if job["method"] == "gossip" else ""
    return (f"{job['method']}_k{job['mixing_steps']}{topology}_{job['bandwidth_bps'] / 1e6:g}Mbit_"
            f"{condition_name(job)}" + ("" if job["compression"] == "none" else f"_{job['compression']}")
            + f"_seed{job['seed']}")


def one_run(job: dict, done_dir: Path) -> dict:
    """One run's report sections; kept in ``done_dir`` so an interrupted grid resumes where it stopped."""
    from edgekit.federated.apps import RunSettings, run_in_process
    from edgekit.jobs.fl import report_sections, workload_for
    from edgekit.utils.files import atomic_write

    kept = done_dir / f"{run_name(job)}.json"
    settings = RunSettings(**job)
    if kept.exists():
        sections = json.loads(kept.read_text())
        if sections["settings"] == settings.run_config():
            return sections
    result, grid = run_in_process(settings, workload_for)
    sections = report_sections(settings, result, "inproc", grid)
    print(f"done {run_name(job)}: loss {sections['summary']['final_loss']:.4f}, "
          f"utilization {sections['summary']['utilization']:.3f}", flush=True)
    atomic_write(kept, json.dumps(sections) + "\n")
    return sections


def condition_of(sections: dict) -> str:
    return condition_name(sections["settings"])


def time_to(sections: dict, target: float) -> float | None:
    """Simulated time at which the workers' mean loss first reaches ``target`` (None: never)."""
    for r in sections["rounds"]:
        if "eval" in r["metrics"] and r["metrics"]["eval"]["loss"] <= target:
            return r["sim_time"]
    return None


def grid_summary(runs: list[dict]) -> list[dict]:
    """Mean and 95% interval over seeds per (condition, bandwidth, method, topology, compression).

    Time to target: to within 2% of the final loss DiLoCo reaches on the healthy network at
    the same bandwidth and seed (uncompressed). Work lost: inner steps of updates that missed
    the deadline, per worker.
    """
    from seed_stats import interval

    from edgekit.jobs.fl import run_label

    targets = {(r["settings"]["bandwidth-bps"], r["settings"]["seed"]): 1.02 * r["summary"]["final_loss"]
               for r in runs if r["settings"]["method"] == "diloco" and condition_of(r) == "healthy"
               and r["settings"]["compression"] == "none"}
    groups: dict[tuple, list[dict]] = {}
    for r in runs:
        s = r["settings"]
        groups.setdefault((condition_of(r), s["bandwidth-bps"], run_label(s), s["compression"]), []).append(r)
    rows = []
    for (condition, bandwidth, label, compression), group in groups.items():
        def stat(values):
            values = [v for v in values if v is not None]
            return interval(values) if values else None

        reach = [time_to(r, targets[r["settings"]["bandwidth-bps"], r["settings"]["seed"]])
                 if (r["settings"]["bandwidth-bps"], r["settings"]["seed"]) in targets else None for r in group]
        rows.append({
            "condition": condition, "bandwidth Mbit/s": bandwidth / 1e6, "run": label, "compression": compression,
            "seeds": sorted(r["settings"]["seed"] for r in group),
            "mean worker loss": stat([r["summary"]["final_loss"] for r in group]),
            "worst worker loss": stat([r["summary"]["final_worst_loss"] for r in group]),
            "oracle loss": stat([r["summary"].get("final_oracle_loss") for r in group]),
            "utilization": stat([r["summary"]["utilization"] for r in group]),
            "sim time (s)": stat([r["summary"]["sim_time"] for r in group]),
            "reached target": sum(t is not None for t in reach),
            "time to target (s)": stat(reach),
            "MB sent": stat([(r["summary"]["bytes"] or {}).get("total", 0) / 1e6 for r in group]),
            # DiLoCo: updates past the deadline, whose inner steps are lost; gossip: neighbour payloads
            # that were not there in time (their weight stays on the receiver's own parameters)
            "updates missed": stat([r["summary"]["missing_updates"] for r in group]),
            "inner steps lost per worker": stat([r["summary"]["missing_updates"] * r["settings"]["inner-steps"]
                                                 / r["settings"]["clients"] for r in group
                                                 if r["settings"]["method"] == "diloco"]),
            # gossip: how far the slowest worker fell behind the median one while the others went on
            "slowest worker behind (s)": stat([r["summary"].get("max_lag_s") for r in group]),
            "slowest worker behind (rounds)": stat([r["summary"].get("max_lag_rounds") for r in group]),
        })
    return rows


def goal_check(runs: list[dict]) -> list[dict]:
    """Per bandwidth and gossip topology, over the seeds' means: where DiLoCo's utilization is below
    60% on the healthy network, does gossip with k = 0 reach 95% with a mean worker loss within
    2% of DiLoCo's (both uncompressed)?"""

    healthy = [r for r in runs if condition_of(r) == "healthy" and r["settings"]["compression"] == "none"
               and r["settings"]["mixing-steps"] == 0]
    rows = []
    for bandwidth in sorted({r["settings"]["bandwidth-bps"] for r in healthy}):
        at = [r for r in healthy if r["settings"]["bandwidth-bps"] == bandwidth]
        diloco = [r["summary"] for r in at if r["settings"]["method"] == "diloco"]
        for topology in sorted({r["settings"]["topology"] for r in at if r["settings"]["method"] == "gossip"}):
            gossip = [r["summary"] for r in at if r["settings"]["method"] == "gossip"
                      and r["settings"]["topology"] == topology]
            if not diloco or not gossip:
                continue
            d_util, g_util = (statistics.mean(s["utilization"] for s in x) for x in (diloco, gossip))
            d_loss, g_loss = (statistics.mean(s["final_loss"] for s in x) for x in (diloco, gossip))
            gap = (g_loss - d_loss) / d_loss
            rows.append({"bandwidth Mbit/s": bandwidth / 1e6, "topology": topology, "diloco utilization": d_util,
                         "applies (diloco < 60%)": d_util < 0.6, "gossip k=0 utilization": g_util,
                         "loss gap": gap, "met": d_util < 0.6 and g_util >= 0.95 and gap <= 0.02})
    return rows


def loss_grid_plot(runs: list[dict], path: Path) -> None:
    """Validation loss against simulated time per condition and bandwidth: one line per run (method,
    topology, compression), the mean over its seeds at each evaluation, one legend for all panels."""
    from edgekit.jobs.fl import run_label
    from edgekit.jobs.plots import plt
    from edgekit.utils.files import atomic_write

    bandwidths = sorted({r["settings"]["bandwidth-bps"] for r in runs})
    conditions = [c for c in CONDITIONS if any(condition_of(r) == c for r in runs)]
    labels = list(dict.fromkeys(run_label(r["settings"]) for r in runs))
    colors = plt.get_cmap("tab10" if len(labels) <= 10 else "tab20")
    fig, axes = plt.subplots(len(conditions), len(bandwidths), figsize=(4.6 * len(bandwidths), 3.4 * len(conditions)),
                             squeeze=False, sharey=True)
    for i, condition in enumerate(conditions):
        for j, bandwidth in enumerate(bandwidths):
            ax = axes[i][j]
            for k, label in enumerate(labels):
                group = [r for r in runs if condition_of(r) == condition and r["settings"]["bandwidth-bps"] == bandwidth
                         and run_label(r["settings"]) == label]
                if not group:
                    continue
                curves = [[(x["sim_time"], x["metrics"]["eval"]["loss"]) for x in r["rounds"] if "eval" in x["metrics"]]
                          for r in group]
                points = [(statistics.mean(t for t, _ in at), statistics.mean(loss for _, loss in at))
                          for at in zip(*curves)]  # the seeds' evaluations, round by round
                utilization = statistics.mean(r["summary"]["utilization"] for r in group)
                ax.plot(*zip(*points), lw=1.2, marker="o", ms=2, color=colors(k),
                        label=label if i == j == 0 else None)
                ax.annotate(f"{utilization:.0%}", points[-1], fontsize=6, color=colors(k),
                            xytext=(3, 0), textcoords="offset points", va="center")
            ax.set_title(f"{condition}, {bandwidth / 1e6:g} Mbit/s", fontsize=9)
            ax.set_xlabel("simulated wall-clock (s)")
            ax.grid(alpha=0.3)
            if j == 0:
                ax.set_ylabel("validation loss (nats/byte)")
    seeds = sorted({r["settings"]["seed"] for r in runs})
    fig.suptitle(f"{runs[0]['settings']['clients']} workers, byte-level LM: loss against simulated "
                 f"time, mean of {len(seeds)} seed(s); utilization at each line's end", fontsize=10)
    ncol = min(len(labels), 4)
    fig.legend(*axes[0][0].get_legend_handles_labels(), loc="lower center", ncol=ncol, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.03 * -(-len(labels) // ncol) / len(conditions) * 2, 1, 1))
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    atomic_write(path, buf.getvalue())


def write_plots(runs: list[dict], output: Path) -> None:
    """The grid plot beside ``output``, and per condition and bandwidth the first seed's report plot."""
    from edgekit.jobs.fl import fl_plot, run_label

    loss_grid_plot(runs, output.with_suffix(".png"))
    first_seed = min(r["settings"]["seed"] for r in runs)
    for condition in CONDITIONS:
        for bandwidth in sorted({r["settings"]["bandwidth-bps"] for r in runs}):
            group = [(run_label(r["settings"]), r) for r in runs
                     if condition_of(r) == condition and r["settings"]["bandwidth-bps"] == bandwidth
                     and r["settings"]["seed"] == first_seed]
            if group:
                fl_plot(group, output.with_name(f"{output.stem}_{condition}_{bandwidth / 1e6:g}Mbit.png"),
                        title=f"{condition}, {bandwidth / 1e6:g} Mbit/s")


def main():
    from edgekit.federated.apps import RunSettings
    from edgekit.federated.links import parse_rate

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--inner-steps", type=int, default=20)
    parser.add_argument("--bandwidths", default="2Mbit,10Mbit,100Mbit")
    parser.add_argument("--topologies", default="exponential", help="gossip's, comma-separated")
    parser.add_argument("--seeds", default="0", help="comma-separated")
    parser.add_argument("--eval-every", type=int, default=1, help="rounds between evaluations (and after the last)")
    parser.add_argument("--allow-dirty", action="store_true", help="run on a tree with uncommitted changes")
    parser.add_argument("--mix-momentum", action="store_true")
    parser.add_argument("--methods", default="diloco:0,gossip:0,gossip:1,gossip:2",
                        help="method:k pairs (k: blocking mixing steps of gossip)")
    parser.add_argument("--conditions", default=",".join(CONDITIONS), help=f"comma-separated: {', '.join(CONDITIONS)}")
    parser.add_argument("--compression", default="none", help="comma-separated: none, mxint8, mxfp4")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--replot", type=Path, metavar="RESULTS.json",
                        help="only redraw the plots beside an earlier run's results file, from its runs")
    parser.add_argument("-o", "--output", type=Path, default=Path("benchmarks/results/fl_diloco.json"))
    args = parser.parse_args()
    if args.replot:
        if not args.replot.is_file():
            parser.error(f"--replot: no results file at {args.replot}")
        write_plots(json.loads(args.replot.read_text())["runs"], args.replot)
        print(f"wrote the plots of {args.replot}")
        return
    from edgekit.utils.provenance import load_average, provenance, require_clean_tree

    require_clean_tree(args.allow_dirty)
    meta = provenance(0, threads=1)  # at the start: the code and load the runs began with
    os.environ.setdefault("EDGEKIT_CACHE_DIR", "/tmp/fl-cache")
    unknown = set(args.conditions.split(",")) - set(CONDITIONS)
    if unknown:
        parser.error(f"--conditions: unknown {', '.join(sorted(unknown))}; allowed: {', '.join(CONDITIONS)}")
    topologies = args.topologies.split(",")
    jobs = [{"method": method, "mixing_steps": int(k), "topology": topology, "mix_momentum": args.mix_momentum,
             "clients": 8, "rounds": args.rounds, "inner_steps": args.inner_steps, "bandwidth_bps": parse_rate(bw),
             "latency_s": 0.05, "compression": compression, "seed": int(seed), "eval_every": args.eval_every,
             **CONDITIONS[condition]}
            for seed in args.seeds.split(",") for condition in args.conditions.split(",")
            for bw in args.bandwidths.split(",") for compression in args.compression.split(",")
            for method, k in (item.split(":") for item in args.methods.split(","))
            for topology in (topologies if method == "gossip" else topologies[:1])]
    try:
        for job in jobs:
            RunSettings(**job)  # bad settings are refused here, before any run
    except ValueError as error:
        parser.error(str(error))
    done_dir = args.output.with_name(f"{args.output.stem}_runs")
    done_dir.mkdir(parents=True, exist_ok=True)
    with ProcessPoolExecutor(args.jobs) as pool:
        runs = list(pool.map(one_run, jobs, [done_dir] * len(jobs)))

    from edgekit.jobs.fl import render_summary
    from edgekit.utils.files import atomic_write
    from edgekit.utils.output import markdown_table

    table, goal, summary = render_summary(runs), goal_check(runs), grid_summary(runs)
    print(markdown_table(table))
    print(markdown_table(goal))
    meta["load_average_after"] = load_average()
    atomic_write(args.output, json.dumps({"meta": meta, "table": table, "goal": goal, "summary": summary,
                                          "runs": runs}, indent=1) + "\n")
    write_plots(runs, args.output)
    print(f"wrote {args.output} and its plots")


if __name__ == "__main__":
    main()
