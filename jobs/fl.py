"""``edgekit fl``: every method trained across simulated edge devices, on any engine, and its report.

DiLoCo and gossip train :mod:`edgekit.models.lm` in its tiny config (overridable), by
``clients`` workers, each on its own share of the stdlib train files (file ``k`` of the
seeded split goes to worker ``k mod clients``), evaluated on the LM's validation windows.
Compute in the simulated clock is modelled, not measured: FLOPs of one inner step
(counted once by PyTorch's FLOP counter) times steps, over the device's FLOP/s. FedRGL
trains a GCN on the Louvain clients of a graph with noisy labels (:func:`graph_clients`),
RieSelect the same LM on stdlib packages one after another (:func:`continual_lm_workload`);
both come to the apps as runners (:data:`RUNNERS`).

``server_app`` and ``client_app`` are the Flower components that ``flwr run`` loads for the
Ray and deployment engines (``edgekit.jobs.fl:server_app``, ``edgekit.jobs.fl:client_app``);
the in-process engine runs the same ones. A run writes a JSON report (every number, per
round, with provenance) and a PNG.
"""

from __future__ import annotations

import dataclasses
import io
import json
import sysconfig
import tempfile
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F
from torch.utils.flop_counter import FlopCounterMode

from edgekit.federated.apps import (
    METHODS,
    RunSettings,
    checkpoint_config,
    context_settings,
    deadline,
    make_client_app,
    make_server_app,
    parse_progress,
    run_in_process,
    use_threads,
)
from edgekit.federated.choices import ENGINES, METHOD_NAMES
from edgekit.federated.engine import GlobalModelStrategy, RunResult
from edgekit.federated.fedrgl import GraphSettings, graph_summary, run_graph
from edgekit.federated.fedrgl import register_client as register_graph_client
from edgekit.federated.flower_run import Federation, LocalFederation, write_app
from edgekit.federated.graphs import ClientGraph, client_data, load_graph
from edgekit.federated.network_grid import NetworkGrid, in_process_network
from edgekit.federated.records import RoundRecord
from edgekit.federated.rieselect import ContinualSettings, ContinualWorkload, run_continual
from edgekit.federated.rieselect import register_client as register_continual_client
from edgekit.federated.tls import TLSFiles
from edgekit.federated.workload import Workload
from edgekit.models import lm
from edgekit.models.registry import make_config, parse_config_items
from edgekit.utils.files import atomic_write
from edgekit.utils.output import write_result
from edgekit.utils.provenance import provenance

FL_DATA = {"max_train_bytes": 2_400_000}  # on top of LMConfig.tiny: ~300 KB of source per worker of 8
RUN_TIMEOUT_S = 3600.0
PLANETOID_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "planetoid"  # Cora, CiteSeer


# -- the workload -------------------------------------------------------------------------------

def lm_config(settings: RunSettings) -> lm.LMConfig:
    """LMConfig.tiny with the FL data size, the run's seed, a cosine over every inner step, and ``model_config``."""
    overrides = {**FL_DATA, "seed": settings.seed, "steps": settings.rounds * settings.inner_steps,
                 **parse_config_items(settings.model_config.split())}
    return make_config("lm", overrides, tiny=True)


def partition_bytes(config: lm.LMConfig, partitions: int) -> list[np.ndarray]:
    """Each worker's bytes: train files ``p, p + n, p + 2n, ...`` of the seeded split, capped at
    ``max_train_bytes / n`` each."""
    files = lm.split_files(config)[0]
    cap = config.max_train_bytes // partitions
    shares = []
    for p in range(partitions):
        chunks, total = [], 0
        for path in files[p::partitions]:
            if total >= cap:
                break
            chunks.append(path.read_bytes())
            total += len(chunks[-1])
        data = lm.encode(b"".join(chunks)[:cap])
        if len(data) < config.seq_len + 2:
            raise ValueError(f"worker {p} of {partitions} gets {len(data)} bytes of source, fewer than seq_len + 2; "
                             "use fewer clients or a larger max_train_bytes")
        shares.append(torch.from_numpy(data.astype(np.int64)))
    return shares


def window_loss(model, data: torch.Tensor, config: lm.LMConfig, rng: np.random.Generator,
                per_window: bool = False) -> torch.Tensor:
    """Next-byte cross-entropy on ``batch`` random windows of ``data`` (the LM's training loss);
    ``per_window``: each window's mean instead, shape ``(batch,)``."""
    starts = torch.from_numpy(rng.integers(0, len(data) - config.seq_len - 1, config.batch))
    window = data[starts[:, None] + torch.arange(config.seq_len + 1)]
    logits = model(window[:, :-1])
    if per_window:
        return F.cross_entropy(logits.transpose(1, 2), window[:, 1:], reduction="none").mean(1)
    return F.cross_entropy(logits.reshape(-1, lm.VOCAB), window[:, 1:].reshape(-1))


def step_flops(config: lm.LMConfig) -> float:
    """FLOPs of one training step (forward and backward) counted by PyTorch's FLOP counter."""
    model = lm.build(config)
    with FlopCounterMode(display=False) as counter:
        window_loss(model, torch.arange(4 * config.seq_len) % lm.VOCAB, config, np.random.default_rng(0)).backward()
    return float(counter.get_total_flops())


@lru_cache(maxsize=4)
def _workload(config: lm.LMConfig, clients: int) -> Workload:
    shares = partition_bytes(config, clients)
    spec = lm.train_spec(config)

    def build():
        torch.manual_seed(config.seed)
        return lm.build(config)

    def batch_loss(model, partition, step):
        return window_loss(model, shares[partition], config, np.random.default_rng([config.seed, partition, step]))

    def evaluate(model):
        metrics = lm.evaluate(model, config)
        return {"loss": metrics["cross_entropy"], "perplexity": metrics["perplexity"],
                "bits_per_byte": metrics["bits_per_byte"]}

    return Workload(build, spec.optimizer, batch_loss, evaluate, step_flops(config), clients,
                    lr=lambda step: lm.lr_at(step, config), grad_clip=config.grad_clip, seed=config.seed)


def workload_for(settings: RunSettings) -> Workload:
    return _workload(lm_config(settings), settings.clients)


CONTINUAL_TASKS = ("email", "asyncio", "encodings")  # three corners of the stdlib, learned in this order
CONTINUAL_HELD_OUT_EVERY = 7  # every 7th file of a task (sorted by path) is held out: validation, then test


def continual_lm_workload(clients: int, tasks: tuple[str, ...] = CONTINUAL_TASKS, seed: int = 0,
                          model_config: str = "") -> ContinualWorkload:
    """The byte-level LM learning stdlib packages one after another (RieSelect's tasks).

    Task ``t`` is the ``.py`` files of package ``tasks[t]``; every ``CONTINUAL_HELD_OUT_EVERY``-th
    file is held out, the first half of their bytes validation data and the second half test data
    (``eval_windows`` fixed windows each); the others are dealt to the clients file by file (file
    ``k`` to client ``k mod clients``)."""
    config = make_config("lm", {"seed": seed, **parse_config_items(model_config.split())}, tiny=True)
    root = Path(sysconfig.get_paths()["stdlib"])
    shares, held_out = [], {"validation": [], "test": []}
    for task in tasks:
        files = [p for p in lm.stdlib_files(root) if p.relative_to(root).parts[0] == task]
        if not files:
            raise ValueError(f"no stdlib files under {task!r}: tasks are stdlib package names, e.g. {CONTINUAL_TASKS}")
        held = files[::CONTINUAL_HELD_OUT_EVERY]
        train = [p for i, p in enumerate(files) if i % CONTINUAL_HELD_OUT_EVERY]
        per_client = [torch.from_numpy(lm.encode(b"".join(p.read_bytes() for p in train[c::clients])).astype(np.int64))
                      for c in range(clients)]
        held_bytes = torch.from_numpy(lm.encode(b"".join(p.read_bytes() for p in held)).astype(np.int64))
        if min(len(d) for d in per_client) < config.seq_len + 2 or len(held_bytes) < 2 * config.seq_len + 4:
            raise ValueError(f"task {task!r} has too little source for {clients} clients and held-out data")
        shares.append(per_client)
        for k, windows in enumerate(held_out.values()):
            half = len(held_bytes) // 2
            data = held_bytes[k * half:(k + 1) * half]
            rng = np.random.default_rng([seed, len(windows), k])
            starts = torch.from_numpy(rng.integers(0, len(data) - config.seq_len - 1, config.eval_windows))
            windows.append(data[starts[:, None] + torch.arange(config.seq_len + 1)])

    def build():
        torch.manual_seed(config.seed)
        return lm.build(config)

    def sample_losses(model, task, partition, step):
        rng = np.random.default_rng([config.seed, task, partition, step + 2**31])  # steps may be negative
        return window_loss(model, shares[task][partition], config, rng, per_window=True)

    def held_out_loss(split):
        def loss(model, task):
            window = held_out[split][task]
            logits = model(window[:, :-1])
            return float(F.cross_entropy(logits.reshape(-1, lm.VOCAB), window[:, 1:].reshape(-1)))
        return loss

    return ContinualWorkload(build, sample_losses, held_out_loss("validation"), len(tasks), observations=config.seq_len,
                             lr=config.lr, flops_per_step=step_flops(config), test=held_out_loss("test"))


@lru_cache(maxsize=2)
def _graph_clients(graph: str, planetoid: str, clients: int, noise: str, rate: float,
                   seed: int) -> tuple[tuple[ClientGraph, ...], int]:
    data = load_graph(graph, planetoid, seed)
    return tuple(client_data(data, clients, noise=noise, rate=rate, seed=seed)), data.num_classes


def graph_clients(settings: RunSettings) -> tuple[tuple[ClientGraph, ...], int]:
    """FedRGL's clients (Louvain parts of ``settings.graph`` with noisy train labels) and the
    class count; the same in every process (all seeded), built once per process."""
    return _graph_clients(settings.graph, settings.planetoid or str(PLANETOID_DIR), settings.clients, settings.noise,
                          settings.noise_rate, settings.seed)


_continual_workload = lru_cache(maxsize=2)(continual_lm_workload)  # the data is read once per process


def continual_workload_for(settings: RunSettings) -> ContinualWorkload:
    return _continual_workload(settings.clients, settings.task_names, settings.seed, settings.model_config)


def graph_settings(settings: RunSettings) -> GraphSettings:
    return GraphSettings(method=settings.graph_method, local_epochs=settings.inner_steps, warmup=settings.warmup,
                         seed=settings.seed)


def continual_settings(settings: RunSettings) -> ContinualSettings:
    return ContinualSettings(selection=settings.selection, clients=settings.clients,
                             rounds_per_task=settings.rounds // len(settings.task_names),
                             local_steps=settings.inner_steps, budget_fraction=settings.budget, basin=settings.basin,
                             radius=settings.radius, seed=settings.seed)


def _deadline_for(settings: RunSettings) -> Callable[[GlobalModelStrategy], float]:
    return lambda strategy: deadline(settings, strategy, strategy.flops_per_round)


def run_fedrgl(settings: RunSettings, grid: NetworkGrid,
               on_round: Callable[[RoundRecord], None] | None = None) -> RunResult:
    """FedRGL (or a baseline) on ``grid``; its accuracy and filter numbers join the run's summary."""
    clients, classes = graph_clients(settings)
    result, _ = run_graph(graph_settings(settings), clients, classes, settings.rounds, grid=grid,
                          deadline=_deadline_for(settings), checkpoint=settings.checkpoint or None,
                          config=checkpoint_config(settings), on_round=on_round)
    result.summary.update(graph_summary(result.records))
    return result


def run_rieselect(settings: RunSettings, grid: NetworkGrid,
                  on_round: Callable[[RoundRecord], None] | None = None) -> RunResult:
    """RieSelect (or a baseline) on ``grid``; per-task loss, forgetting and uplink bytes join the summary."""
    result, _, summary = run_continual(continual_settings(settings), continual_workload_for(settings), grid=grid,
                                       deadline=_deadline_for(settings), on_round=on_round,
                                       checkpoint=settings.checkpoint or None, config=checkpoint_config(settings))
    result.summary.update(summary)
    return result


RUNNERS = {"fedrgl": run_fedrgl, "rieselect": run_rieselect}  # the methods that are not apps.METHODS
assert set(METHODS) | set(RUNNERS) == set(METHOD_NAMES), "every method needs a strategy in apps or a runner here"


# -- reports --------------------------------------------------------------------------------------

def summarize(settings: RunSettings, result: RunResult) -> dict:
    evaluated = [r for r in result.records if "eval" in r.metrics]
    final = evaluated[-1].metrics["eval"] if evaluated else {}
    rounds = [r for r in result.records if r.round > 0]
    return {**result.summary, "final_loss": final.get("loss"), "final_perplexity": final.get("perplexity"),
            "final_worst_loss": final.get("worst_loss"), "final_oracle_loss": final.get("oracle_loss"),
            "inner_steps_per_worker": settings.rounds * settings.inner_steps,
            "mean_disagreement": float(np.mean([r.metrics.get("disagreement", 0.0) for r in rounds])) if rounds else 0.0,
            "missing_updates": sum(len(r.missing) for r in rounds),
            "rejected_updates": sum(len(r.rejected) for r in rounds),
            **lag_summary(rounds, result.summary.get("sim_time", 0.0)),
            "resumed_from": result.resumed_from}


def lag_summary(rounds: list[RoundRecord], sim_time: float) -> dict:
    """Gossip's staleness: the most the slowest worker fell behind the median one, in seconds and in
    the median worker's rounds (the run's mean round time); nothing for methods that keep workers in step."""
    lags = [r.metrics["lag_s"] for r in rounds if "lag_s" in r.metrics]
    if not lags:
        return {}
    round_time = sim_time / len(rounds) if sim_time > 0 else 0.0
    return {"max_lag_s": max(lags), "max_lag_rounds": max(lags) / round_time if round_time > 0 else 0.0}


def report_sections(settings: RunSettings, result: RunResult, engine: str, grid: NetworkGrid) -> dict:
    return {"settings": settings.run_config(), "engine": engine, "summary": summarize(settings, result),
            "engine_seconds": grid.engine_seconds + getattr(grid.inner, "engine_seconds", 0.0),
            "rounds": [r.as_dict() for r in result.records]}


def write_report(path: str | Path, sections: dict, seed: int) -> tuple[Path, Path]:
    """The JSON report at ``path`` and its plot beside it (``.png``), both written atomically."""
    path = Path(path)
    text = json.dumps(sections["summary"], indent=2)
    json_path = write_result(path, "json", sections, provenance(seed), text)
    png = path.with_suffix(".png")
    fl_plot([(run_label(sections["settings"]), sections)], png)
    return json_path, png


def run_label(settings: dict) -> str:
    method = settings["method"]
    if method == "gossip":
        method += f" k={settings['mixing-steps']} {settings['topology']}"
    elif method == "fedrgl":  # the graph method may be a baseline
        method = f"{settings['graph-method']} {settings['graph']} {settings['noise']} {settings['noise-rate']:g}"
    elif method == "rieselect":
        method = f"{settings['selection']} uplink" + ("" if settings["selection"] == "full" else f" {settings['budget']:g}")
    if settings.get("compression", "none") != "none":
        method += f" {settings['compression']}"
    return method


def _series(sections: dict):
    evaluated = [r for r in sections["rounds"] if "eval" in r["metrics"]]
    steps = sections["settings"]["inner-steps"]
    return ([r["sim_time"] for r in evaluated], [r["round"] * steps for r in evaluated],
            [r["metrics"]["eval"]["loss"] for r in evaluated])


EXTRA_PANELS = (("round", "test accuracy"), ("round", "train labels the filter kept (fraction)"),
                ("round", "each task's validation loss (nats/byte)"))


def _extra_series(sections: dict) -> list[list[tuple[str, list, list]]]:
    """For each of ``EXTRA_PANELS``, this run's (label suffix, x, y) lines: FedRGL's test accuracy
    and filter, RieSelect's per-task losses; none for methods that have no such numbers."""
    rounds = sections["rounds"]
    evaluated = [r for r in rounds if "eval" in r["metrics"]]
    accuracy = [(r["round"], r["metrics"]["eval"]["accuracy"]) for r in evaluated if "accuracy" in r["metrics"]["eval"]]
    kept = [(r["round"], r["metrics"]["clean_fraction"]) for r in rounds if "clean_fraction" in r["metrics"]]
    tasks = [(r["round"], r["metrics"]["eval"]["task_losses"]) for r in evaluated
             if "task_losses" in r["metrics"]["eval"]]
    names = sections["settings"].get("tasks", "").split(",")
    return [[("", *map(list, zip(*accuracy)))] if accuracy else [],
            [("", *map(list, zip(*kept)))] if kept else [],
            [(f" {names[t]}", [n for n, _ in tasks], [losses[t] for _, losses in tasks])
             for t in range(len(tasks[0][1]))] if tasks else []]


def fl_plot(runs: list[tuple[str, dict]], path: str | Path, title: str = "Federated training") -> None:
    """Six panels over the runs: validation loss against simulated wall-clock and against inner
    steps; per round, worker disagreement, cumulative compute utilization, cumulative bytes sent
    and the simulated duration of the round. A third row when a run has them: FedRGL's test
    accuracy and the fraction of train labels its filter kept, RieSelect's loss of each task."""
    from .plots import plt  # pyplot on the file-only backend

    extras = [(label, _extra_series(sections)) for label, sections in runs]
    rows = 3 if any(any(panels) for _, panels in extras) else 2
    fig, axes = plt.subplots(rows, 3, figsize=(15, 3.75 * rows), squeeze=False)
    for label, panels in extras if rows == 3 else []:
        for ax, lines in zip(axes[2], panels):
            for suffix, x, y in lines:
                ax.plot(x, y, marker="o", ms=2, lw=1.2, label=label + suffix)
    for label, sections in runs:
        times, steps, losses = _series(sections)
        rounds = [r for r in sections["rounds"] if r["round"] > 0]
        numbers = [r["round"] for r in rounds]
        axes[0][0].plot(times, losses, marker="o", ms=2, lw=1.2, label=label)
        axes[0][1].plot(steps, losses, marker="o", ms=2, lw=1.2, label=label)
        axes[0][2].plot(numbers, [r["metrics"].get("disagreement", 0.0) for r in rounds], lw=1.2)
        axes[1][0].plot(numbers, [r["metrics"].get("utilization") for r in rounds], lw=1.2)
        axes[1][1].plot(numbers, np.cumsum([r["bytes_sent"] for r in rounds]) / 1e6, lw=1.2)
        axes[1][2].plot(numbers, np.diff([0.0, *[r["sim_time"] for r in rounds]]), lw=1.2)
    loss = "validation loss (nats; LM: per byte, GCN: test nodes)"
    labels = [("simulated wall-clock (s)", loss), ("inner steps per worker", loss),
              ("round", "worker disagreement (relative)"), ("round", "compute utilization (cumulative)"),
              ("round", "bytes sent (MB, cumulative)"), ("round", "simulated round time (s)"), *EXTRA_PANELS]
    for ax, (xlabel, ylabel) in zip(axes.flat, labels):
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    if rows == 3 and axes[2][2].lines:
        axes[2][2].legend(fontsize=7)  # one line per task and run
    for ax in axes[2] if rows == 3 else []:
        if not ax.lines:  # a panel of a method none of these runs used
            ax.set_axis_off()
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    atomic_write(path, buf.getvalue())


# columns only some methods fill (FedRGL, RieSelect), shown when a compared run has them
METHOD_COLUMNS = {"accuracy": "final_accuracy", "accuracy (last 5)": "score", "filter precision": "filter_precision",
                  "forgetting": "forgetting", "layers sent": "layer_fraction",
                  "slowest worker behind (s)": "max_lag_s"}


def render_summary(rows: list[dict]) -> list[dict]:
    """One table row per run: the numbers a reader compares across runs."""
    out = []
    for sections in rows:
        s, summary = sections["settings"], sections["summary"]
        bytes_ = summary.get("bytes") or {}
        out.append({"run": run_label(s), "bandwidth Mbit/s": s["bandwidth-bps"] / 1e6, "drop": s["drop"],
                    "outage": s["outage"], "straggler": s["straggler"], "final loss": summary["final_loss"],
                    "worst worker loss": summary.get("final_worst_loss"), "oracle loss": summary.get("final_oracle_loss"),
                    "sim time (s)": summary["sim_time"], "utilization": summary["utilization"],
                    "MB sent": bytes_.get("total", 0) / 1e6, "MB up": bytes_.get("up", 0) / 1e6,
                    "disagreement": summary["mean_disagreement"],
                    "missing": summary["missing_updates"], "rejected": summary["rejected_updates"],
                    **{column: summary.get(key) for column, key in METHOD_COLUMNS.items()}})
    present = {column for column in METHOD_COLUMNS if any(row[column] is not None for row in out)}
    return [{k: v for k, v in row.items() if k not in METHOD_COLUMNS or k in present} for row in out]


# -- running ------------------------------------------------------------------------------------------

def _write_run_report(settings: RunSettings, result: RunResult, grid: NetworkGrid) -> None:
    """The ServerApp's last act on Flower's engines: the report where ``output`` says."""
    write_report(settings.output, report_sections(settings, result, "flower", grid), settings.seed)


client_app = make_client_app(workload_for)
register_graph_client(client_app, lambda context: graph_clients(context_settings(context))[0])
register_continual_client(client_app, lambda context: continual_workload_for(context_settings(context)))
server_app = make_server_app(workload_for, _write_run_report, runners=RUNNERS)


def run_inproc(settings: RunSettings, *, checkpoint: str | None = None,
               on_round: Callable[[RoundRecord], None] | None = None) -> tuple[RunResult, NetworkGrid]:
    """Any method on the in-process engine over ``settings``' simulated network: the same
    ClientApp and runners as on Flower's engines."""
    if settings.method not in RUNNERS:
        return run_in_process(settings, workload_for, checkpoint=checkpoint, on_round=on_round)
    use_threads(settings)
    grid = in_process_network(client_app, settings.clients, settings.network(), settings.run_config())
    return RUNNERS[settings.method](dataclasses.replace(settings, checkpoint=checkpoint or ""), grid, on_round), grid


def run_fl(settings: RunSettings, engine: str, output: str | Path, *, checkpoint: str | Path | None = None,
           superlink: str | None = None, on_round: Callable[[RoundRecord], None] | None = None,
           log: Callable[[str], None] = print, timeout_s: float = RUN_TIMEOUT_S, tls: TLSFiles | None = None,
           root_certificates: str | Path | None = None) -> dict | None:
    """Run ``settings`` on ``engine`` and write the report to ``output``; the report's sections.

    ``tls``: the local deployment federation's SuperLink serves over TLS with these files;
    ``root_certificates``: the CA that verifies a remote ``superlink``.

    ``superlink`` (``host:port``, deployment engine only) submits to a SuperLink that is
    already running, with its SuperNodes, on other machines; the ServerApp runs beside that
    SuperLink and writes the report there, so None is returned unless ``output`` is visible here.
    Without it the Ray and deployment engines run on a federation started on 127.0.0.1.
    """
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; allowed: {', '.join(ENGINES)}")
    if superlink is not None and engine != "deployment":
        raise ValueError(f"a SuperLink address applies to the deployment engine, not to {engine!r}")
    output = Path(output).resolve()
    if engine == "inproc":
        result, grid = run_inproc(settings, checkpoint=str(checkpoint) if checkpoint else None, on_round=on_round)
        sections = report_sections(settings, result, engine, grid)
        write_report(output, sections, settings.seed)
        return sections
    if engine == "ray":
        _require_ray()
    remote = RunSettings.from_run_config({**settings.run_config(), "output": str(output),
                                          "checkpoint": str(Path(checkpoint).resolve()) if checkpoint else ""})
    output.unlink(missing_ok=True)
    federation = (Federation(superlink, root_certificates=root_certificates) if superlink is not None
                  else LocalFederation(settings.clients, simulation=engine == "ray", tls=tls))
    with tempfile.TemporaryDirectory(prefix="edgekit-fl-app-") as app_dir, federation:
        write_app(app_dir, "edgekit.jobs.fl:server_app", "edgekit.jobs.fl:client_app", remote.run_config())
        log(f"{engine}: submitting to the SuperLink at {federation.address}")
        def on_line(line: str) -> None:
            record = parse_progress(line)
            if record is not None and on_round is not None:
                on_round(record)

        stream = federation.flwr_run(app_dir, timeout_s=timeout_s, on_line=on_line,
                                     federation_config={"num-supernodes": settings.clients} if engine == "ray" else None)
    if not output.exists():
        if superlink is not None:
            log(f"the run finished; its ServerApp wrote the report to {output} on the SuperLink's machine")
            return None
        raise RuntimeError(f"the {engine} run ended without writing its report {output}; its log:\n{stream[-4000:]}")
    sections = json.loads(output.read_text())
    sections["engine"] = engine
    write_report(output, {k: v for k, v in sections.items() if k != "meta"}, settings.seed)
    return sections


def _require_ray() -> None:
    try:
        import ray  # noqa: F401
    except ImportError:
        raise ValueError("the ray engine needs Ray: pip install 'edgekit[ray]' (Flower's simulation extra)") from None
