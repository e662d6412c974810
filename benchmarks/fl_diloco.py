"""DiLoCo against gossip DiLoCo over slow, lossy links: the grid of issue 7 section 2 (run by hand, with nice).

    nice python benchmarks/fl_diloco.py [--rounds 20] [--inner-steps 20] [--bandwidths 2Mbit,10Mbit,100Mbit]
                                        [--topology exponential] [--mix-momentum]
                                        [--methods diloco:0,gossip:0,gossip:1,gossip:2]
                                        [--conditions healthy,faults] [--compression none] [--jobs 2]
                                        [-o benchmarks/results/fl_diloco.json]

8 workers train the byte-level LM (``edgekit.jobs.fl``: LMConfig.tiny, data split by file) on
the in-process engine. Every method runs at every bandwidth, once on a healthy network and
once with faults: every link down in 10% of its 2-second outage periods and client 3
computing 3x slower. Methods: DiLoCo, and gossip DiLoCo with k = 0, 1, 2 blocking mixing
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
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

FAULTS = {"outage": 0.1, "outage_period_s": 2.0, "straggler": 3, "straggler_slowdown": 3.0}
CONDITIONS = ("healthy", "faults")


def run_name(job: dict) -> str:
    return (f"{job['method']}_k{job['mixing_steps']}_{job['bandwidth_bps'] / 1e6:g}Mbit_"
            f"{'faults' if job.get('outage') else 'healthy'}"
            + ("" if job["compression"] == "none" else f"_{job['compression']}"))


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
    return "faults" if sections["settings"]["outage"] > 0 else "healthy"


def goal_check(runs: list[dict]) -> list[dict]:
    rows = []
    for bandwidth in sorted({r["settings"]["bandwidth-bps"] for r in runs}):
        pick = {(r["settings"]["method"], r["settings"]["mixing-steps"]): r["summary"] for r in runs
                if r["settings"]["bandwidth-bps"] == bandwidth and condition_of(r) == "healthy"
                and r["settings"]["compression"] == "none"}
        if ("diloco", 0) not in pick or ("gossip", 0) not in pick:
            continue
        diloco, gossip = pick[("diloco", 0)], pick[("gossip", 0)]
        gap = (gossip["final_loss"] - diloco["final_loss"]) / diloco["final_loss"]
        rows.append({"bandwidth Mbit/s": bandwidth / 1e6, "diloco utilization": diloco["utilization"],
                     "applies (diloco < 60%)": diloco["utilization"] < 0.6,
                     "gossip k=0 utilization": gossip["utilization"], "loss gap": gap,
                     "met": diloco["utilization"] < 0.6 and gossip["utilization"] >= 0.95 and gap <= 0.02})
    return rows


def loss_grid_plot(runs: list[dict], path: Path) -> None:
    from edgekit.jobs.fl import run_label
    from edgekit.jobs.plots import plt
    from edgekit.utils.files import atomic_write

    bandwidths = sorted({r["settings"]["bandwidth-bps"] for r in runs})
    conditions = [c for c in CONDITIONS if any(condition_of(r) == c for r in runs)]
    fig, axes = plt.subplots(len(conditions), len(bandwidths), figsize=(4.2 * len(bandwidths), 3.4 * len(conditions)),
                             squeeze=False, sharey=True)
    for i, condition in enumerate(conditions):
        for j, bandwidth in enumerate(bandwidths):
            ax = axes[i][j]
            for r in runs:
                if condition_of(r) == condition and r["settings"]["bandwidth-bps"] == bandwidth:
                    points = [(x["sim_time"], x["metrics"]["eval"]["loss"]) for x in r["rounds"] if "eval" in x["metrics"]]
                    ax.plot(*zip(*points), lw=1.2, marker="o", ms=1.5,
                            label=f"{run_label(r['settings'])} ({r['summary']['utilization']:.0%})")
            ax.set_title(f"{condition}, {bandwidth / 1e6:g} Mbit/s", fontsize=9)
            ax.set_xlabel("simulated wall-clock (s)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=6)
            if j == 0:
                ax.set_ylabel("validation loss (nats/byte)")
    fig.suptitle("8 workers, byte-level LM: loss against simulated time (utilization in brackets)", fontsize=10)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    atomic_write(path, buf.getvalue())


def main():
    from edgekit.federated.apps import RunSettings
    from edgekit.fl_cli import parse_rate

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--inner-steps", type=int, default=20)
    parser.add_argument("--bandwidths", default="2Mbit,10Mbit,100Mbit")
    parser.add_argument("--topology", default="exponential")
    parser.add_argument("--mix-momentum", action="store_true")
    parser.add_argument("--methods", default="diloco:0,gossip:0,gossip:1,gossip:2",
                        help="method:k pairs (k: blocking mixing steps of gossip)")
    parser.add_argument("--conditions", default=",".join(CONDITIONS))
    parser.add_argument("--compression", default="none", help="comma-separated: none, mxint8, mxfp4")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("-o", "--output", type=Path, default=Path("benchmarks/results/fl_diloco.json"))
    args = parser.parse_args()
    os.environ.setdefault("EDGEKIT_CACHE_DIR", "/tmp/fl-cache")
    jobs = [{"method": method, "mixing_steps": int(k), "topology": args.topology, "mix_momentum": args.mix_momentum,
             "clients": 8, "rounds": args.rounds, "inner_steps": args.inner_steps, "bandwidth_bps": parse_rate(bw),
             "latency_s": 0.05, "compression": compression, **(FAULTS if condition == "faults" else {})}
            for condition in args.conditions.split(",") for bw in args.bandwidths.split(",")
            for compression in args.compression.split(",")
            for method, k in (item.split(":") for item in args.methods.split(","))]
    try:
        for job in jobs:
            RunSettings(**job)  # bad settings are refused here, before any run
    except ValueError as error:
        parser.error(str(error))
    done_dir = args.output.with_name(f"{args.output.stem}_runs")
    done_dir.mkdir(parents=True, exist_ok=True)
    with ProcessPoolExecutor(args.jobs) as pool:
        runs = list(pool.map(one_run, jobs, [done_dir] * len(jobs)))

    from edgekit.jobs.fl import fl_plot, render_summary, run_label
    from edgekit.utils.files import atomic_write
    from edgekit.utils.output import markdown_table
    from edgekit.utils.provenance import provenance

    table, goal = render_summary(runs), goal_check(runs)
    print(markdown_table(table))
    print(markdown_table(goal))
    atomic_write(args.output, json.dumps({"meta": provenance(0), "table": table, "goal": goal, "runs": runs},
                                         indent=1) + "\n")
    loss_grid_plot(runs, args.output.with_suffix(".png"))
    for condition in CONDITIONS:
        for bandwidth in sorted({r["settings"]["bandwidth-bps"] for r in runs}):
            group = [(run_label(r["settings"]), r) for r in runs
                     if condition_of(r) == condition and r["settings"]["bandwidth-bps"] == bandwidth]
            if not group:
                continue
            fl_plot(group, args.output.with_name(f"{args.output.stem}_{condition}_{bandwidth / 1e6:g}Mbit.png"),
                    title=f"{condition}, {bandwidth / 1e6:g} Mbit/s")
    print(f"wrote {args.output} and its plots")


if __name__ == "__main__":
    main()
