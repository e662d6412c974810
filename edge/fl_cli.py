"""``edgekit fl run`` and ``edgekit fl report``: federated training over simulated links, and its report."""

from __future__ import annotations

import json
from pathlib import Path

import click
from click.core import ParameterSource

from edgekit.federated.choices import (
    BASINS,
    ENGINES,
    GRAPH_METHODS,
    GRAPHS,
    METHOD_NAMES,
    MIXINGS,
    NO_COMPRESSION,
    NOISES,
    SELECTIONS,
    compressions,
    split_tasks,
)
from edgekit.federated.links import parse_duration, parse_rate
from edgekit.federated.topology import TOPOLOGIES
from edgekit.utils.output import markdown_table


class Quantity(click.ParamType):
    """A number with a unit, read by ``parse`` (a rate or a duration); a bad one names the option and the units."""

    def __init__(self, name: str, parse):
        self.name, self.parse = name, parse

    def convert(self, value, param, ctx):
        try:
            return value if isinstance(value, float) else self.parse(value)
        except ValueError as err:
            self.fail(str(err), param, ctx)


RATE, DURATION = Quantity("rate", parse_rate), Quantity("duration", parse_duration)


class Compression(click.ParamType):
    """``none`` or an OCP MX format; the table is asked only when a format is given (it loads the codecs)."""

    name = "compression"

    def convert(self, value, param, ctx):
        text = str(value).strip().lower()
        if text != NO_COMPRESSION and text not in compressions():
            self.fail(f"{value!r} is not a compression; allowed: {', '.join(compressions())}", param, ctx)
        return text
PROBABILITY = click.FloatRange(0.0, 1.0)

# The options (by parameter name) that only some methods read; giving one to another method is an error.
ONLY_FOR = {"mixing_steps": ("gossip",), "topology": ("gossip",), "mixing": ("gossip",),
            "compression": ("diloco", "gossip"), "eval_every": ("diloco", "gossip"),
            "config_items": ("diloco", "gossip", "rieselect"),
            **dict.fromkeys(("graph", "planetoid", "noise", "noise_rate", "warmup", "graph_method"), ("fedrgl",)),
            **dict.fromkeys(("tasks", "budget", "selection", "basin", "radius"), ("rieselect",))}
# Per-method defaults of --inner-steps and --rounds (FedRGL: past its 10 warm-up rounds;
# RieSelect: rounds per task)
DEFAULT_INNER_STEPS = {"diloco": 20, "gossip": 20, "fedrgl": 5, "rieselect": 10}
DEFAULT_ROUNDS = {"diloco": 10, "gossip": 10, "fedrgl": 20}
DEFAULT_ROUNDS_PER_TASK = 4


def reject_foreign_options(ctx: click.Context, method: str) -> None:
    """Options that ``method`` does not read, as errors naming the option."""
    for param in ctx.command.params:
        allowed = ONLY_FOR.get(param.name)
        if allowed and method not in allowed and ctx.get_parameter_source(param.name) is not ParameterSource.DEFAULT:
            raise click.BadParameter(f"applies to {', '.join(allowed)} only, not to {method}",
                                     param_hint=param.get_error_hint(ctx))


def tls_files(engine: str, superlink: str | None, ca: Path | None, cert: Path | None, key: Path | None):
    """The local SuperLink's TLS files when all three are given, checked; None when none are."""
    from edgekit.federated.tls import TLSFiles

    given = {"--ssl-ca-certfile": ca, "--ssl-certfile": cert, "--ssl-keyfile": key}
    if not any(given.values()):
        return None
    if engine != "deployment" or superlink is not None:
        raise click.BadParameter("serve the local SuperLink of --engine deployment (without --superlink) over TLS",
                                 param_hint="--ssl-ca-certfile/--ssl-certfile/--ssl-keyfile")
    missing = [name for name, path in given.items() if path is None]
    if missing:
        raise click.BadParameter(f"TLS needs all three files; missing {', '.join(missing)}",
                                 param_hint="--ssl-ca-certfile/--ssl-certfile/--ssl-keyfile")
    try:
        return TLSFiles(ca, cert, key).check()
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="--ssl-ca-certfile/--ssl-certfile/--ssl-keyfile") from None


@click.group()
def fl():
    """Train across weakly connected devices on Flower, over simulated links: DiLoCo, gossip DiLoCo,
    FedRGL (graphs with noisy labels) and RieSelect (continual learning, selective uplink)."""


@fl.command()
@click.argument("method", type=click.Choice(METHOD_NAMES))
@click.option("--clients", type=click.IntRange(2), default=8, show_default=True, help="Workers, one data share each.")
@click.option("--rounds", type=click.IntRange(1), default=None,
              help="Rounds (default: diloco, gossip 10; fedrgl 20; rieselect 4 per task, and a multiple of the "
                   "number of tasks).")
@click.option("-H", "--inner-steps", type=click.IntRange(1), default=None,
              help="Local steps per worker per round: AdamW steps (default: diloco, gossip 20; rieselect 10) "
                   "or full-batch epochs (fedrgl, default 5).")
@click.option("-k", "--mixing-steps", type=click.IntRange(0), default=0, show_default=True,
              help="gossip: blocking mixing steps after each outer update.")
@click.option("--topology", type=click.Choice(TOPOLOGIES), default="ring", show_default=True, help="gossip: graph.")
@click.option("--mixing", type=click.Choice(MIXINGS), default="metropolis", show_default=True,
              help="gossip: lazy Metropolis weights over live links, or exact averaging (= DiLoCo).")
@click.option("--compression", type=Compression(), default=NO_COMPRESSION, show_default=True,
              help="none, or the OCP MX format of what each worker sends (DiLoCo: pseudo-gradients; gossip: "
                   "parameters); `edgekit formats` lists them.")
@click.option("--bandwidth", type=RATE, default="10Mbit", show_default=True, help="Every link's bandwidth.")
@click.option("--latency", type=DURATION, default="50ms", show_default=True)
@click.option("--jitter", type=DURATION, default="0ms", show_default=True,
              help="Scale of a half-normal extra delay per transfer.")
@click.option("--drop", type=PROBABILITY, default=0.0, show_default=True, help="Probability a transfer is lost.")
@click.option("--outage", type=PROBABILITY, default=0.0, show_default=True,
              help="Probability a link is down for each outage period.")
@click.option("--outage-period", type=DURATION, default="60s", show_default=True)
@click.option("--device", default="rpi4", show_default=True,
              help="Hardware target (edgekit targets) whose fp32 peak sets the simulated compute speed.")
@click.option("--efficiency", type=click.FloatRange(0.0, 1.0, min_open=True), default=0.1, show_default=True,
              help="Fraction of the device's fp32 peak that training sustains.")
@click.option("--straggler", type=click.IntRange(-1), default=-1, show_default=True,
              help="Client index that computes slower (-1: none).")
@click.option("--straggler-slowdown", type=click.FloatRange(1.0), default=3.0, show_default=True)
@click.option("--deadline", type=DURATION, default=None,
              help="Per-exchange deadline in simulated time (default: 1.5x the healthy exchange).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--config", "config_items", multiple=True, metavar="KEY=VALUE",
              help="LM config override on top of its tiny config (repeatable), e.g. --config width=128.")
@click.option("--eval-every", type=click.IntRange(1), default=1, show_default=True)
@click.option("--graph", type=click.Choice(GRAPHS), default="csbm", show_default=True,
              help="fedrgl: a generated CSBM graph (2000 nodes, 5 classes) or a Planetoid graph from --planetoid.")
@click.option("--planetoid", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="fedrgl: directory of the Planetoid raw files (ind.cora.x, ...) [default: ../shared/data/planetoid "
                   "beside the edgekit checkout].")
@click.option("--noise", type=click.Choice(NOISES), default="uniform", show_default=True,
              help="fedrgl: train labels flipped to any other class, or to the next class.")
@click.option("--noise-rate", type=click.FloatRange(0.0, 1.0, max_open=True), default=0.3, show_default=True,
              help="fedrgl: mean fraction of flipped train labels (clients spread from 0.5 to 1.5 times it).")
@click.option("--warmup", type=click.IntRange(0), default=10, show_default=True,
              help="fedrgl: rounds of plain FedAvg before filtering starts.")
@click.option("--graph-method", type=click.Choice(GRAPH_METHODS), default="fedrgl", show_default=True,
              help="fedrgl: FedRGL, or a baseline to compare it with.")
@click.option("--tasks", default="email,asyncio,encodings", show_default=True,
              help="rieselect: stdlib packages the LM learns one after another, comma separated.")
@click.option("--budget", type=click.FloatRange(0.0, 1.0, min_open=True), default=0.25, show_default=True,
              help="rieselect: fraction of an update's bytes a client may upload per round.")
@click.option("--selection", type=click.Choice(SELECTIONS), default="rieselect", show_default=True,
              help="rieselect: which layers to upload: RieSelect, or a baseline (every layer, random, top-k by norm).")
@click.option("--basin", type=click.Choice(BASINS), default="moving", show_default=True,
              help="rieselect: the server's safe basin: P <= P(model) + 0.01 nats each round (moving), or the "
                   "paper's P <= --radius for the whole run (fixed), P the Fisher penalty of earlier tasks.")
@click.option("--radius", type=click.FloatRange(0.0, min_open=True), default=0.1, show_default=True,
              help="rieselect, --basin fixed: the loss increase on earlier tasks (nats, quadratic model) it allows.")
@click.option("--engine", type=click.Choice(ENGINES), default="inproc", show_default=True,
              help="In process over the simulated network, Flower's simulation engine (Ray), or its deployment "
                   "engine (a SuperLink and SuperNodes on loopback).")
@click.option("--superlink", default=None, metavar="HOST:PORT",
              help="deployment: submit to this running SuperLink (its SuperNodes on real machines) instead of "
                   "starting one with SuperNodes on 127.0.0.1.")
@click.option("--root-certificates", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="deployment with --superlink: the CA certificate (PEM) to verify the SuperLink's TLS certificate "
                   "against; without it the SuperLink must run --insecure.")
@click.option("--ssl-ca-certfile", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="deployment on 127.0.0.1: serve the local SuperLink over TLS with this CA certificate and the two "
                   "options below (the SuperNodes and flwr run trust the CA).")
@click.option("--ssl-certfile", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="deployment on 127.0.0.1: the SuperLink's TLS certificate, signed by --ssl-ca-certfile.")
@click.option("--ssl-keyfile", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="deployment on 127.0.0.1: the SuperLink's private key.")
@click.option("--checkpoint", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Checkpoint file, rewritten every round; the same command resumes from it and ends as an "
                   "uninterrupted run would (ray, deployment: a path on the SuperLink's machine).")
@click.option("--threads", type=click.IntRange(1), default=1, show_default=True,
              help="PyTorch threads of every process that trains or evaluates, on every engine (clients run one "
                   "after another in process; more threads than free cores slow it down). Results depend on it "
                   "in the last bits, so a resume must use the same.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default="fl.json",
              show_default=True, help="JSON report; the plot goes beside it (.png).")
@click.pass_context
def run(ctx, method, clients, rounds, inner_steps, mixing_steps, topology, mixing, compression, bandwidth, latency,
        jitter, drop, outage, outage_period, device, efficiency, straggler, straggler_slowdown, deadline, seed,
        config_items, eval_every, graph, planetoid, noise, noise_rate, warmup, graph_method, tasks, budget, selection,
        basin, radius, engine, superlink, root_certificates, ssl_ca_certfile, ssl_certfile, ssl_keyfile, checkpoint, threads, output):
    """Train with METHOD across simulated edge devices; write a JSON + PNG report.

    diloco and gossip train the byte-level LM; fedrgl trains a GCN on a graph's Louvain
    clients with noisy labels (test accuracy each round); rieselect trains the LM on stdlib
    packages one after another, uploading part of each update (loss and forgetting per task).
    Time is simulated: compute is FLOPs over the device's speed, a transfer is latency plus
    its real serialized bytes over the bandwidth. Each round's record says which updates
    were missing or rejected and how each was handled.
    """
    from tqdm import tqdm

    from edgekit.federated.apps import RunSettings
    from edgekit.jobs.fl import run_fl
    from edgekit.targets import load_target

    try:
        peak = load_target(device).peak("fp32")
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="--device") from None
    if not peak:
        raise click.BadParameter(f"target {device!r} lists no fp32 peak FLOP/s", param_hint="--device")
    if straggler >= clients:
        raise click.BadParameter(f"must be a client index below --clients {clients}, or -1", param_hint="--straggler")
    if superlink is not None and engine != "deployment":
        raise click.BadParameter("applies to --engine deployment only", param_hint="--superlink")
    if root_certificates is not None and superlink is None:
        raise click.BadParameter("verifies a running SuperLink: give --superlink too", param_hint="--root-certificates")
    tls = tls_files(engine, superlink, ssl_ca_certfile, ssl_certfile, ssl_keyfile)
    reject_foreign_options(ctx, method)
    if basin != "fixed" and ctx.get_parameter_source("radius") is not ParameterSource.DEFAULT:
        raise click.BadParameter("applies to --basin fixed only", param_hint="--radius")
    if rounds is None:
        rounds = (DEFAULT_ROUNDS_PER_TASK * max(len(split_tasks(tasks)), 1) if method == "rieselect"
                  else DEFAULT_ROUNDS[method])
    if method == "fedrgl" and graph_method == "fedrgl" and warmup >= rounds:
        raise click.BadParameter(f"{warmup} warm-up rounds leave none of --rounds {rounds} for FedRGL's filter; "
                                 "use fewer", param_hint="--warmup")
    for item in config_items:
        if "=" not in item or " " in item.strip():
            raise click.BadParameter(f"{item!r} must look like KEY=VALUE (e.g. width=128)", param_hint="--config")
    try:
        settings = RunSettings(method=method, clients=clients, rounds=rounds,
                               inner_steps=inner_steps or DEFAULT_INNER_STEPS[method],
                               mixing_steps=mixing_steps, topology=topology, mixing=mixing, compression=compression,
                               bandwidth_bps=bandwidth, latency_s=latency, jitter_s=jitter, drop=drop, outage=outage,
                               outage_period_s=outage_period, device_flops=peak * efficiency, straggler=straggler,
                               straggler_slowdown=straggler_slowdown, deadline_s=deadline or 0.0, seed=seed,
                               model_config=" ".join(config_items), eval_every=eval_every, graph=graph,
                               planetoid=str(planetoid.resolve()) if planetoid else "", noise=noise,
                               noise_rate=noise_rate, warmup=warmup, graph_method=graph_method, tasks=tasks,
                               budget=budget, selection=selection, basin=basin,
                               radius=radius, threads=threads)
    except ValueError as err:
        raise click.UsageError(str(err)) from None
    bar = tqdm(total=rounds, desc=f"fl {method}", unit="round", dynamic_ncols=True)

    def on_round(record):
        bar.update(record.round - bar.n)
        shown = {key: f"{value:.3f}" for key, value in record.metrics.get("eval", {}).items()
                 if key in ("loss", "accuracy") and value is not None}
        bar.set_postfix(sim_s=f"{record.sim_time:.1f}", **shown)

    try:
        sections = run_fl(settings, engine, output, checkpoint=checkpoint, superlink=superlink, on_round=on_round,
                          log=lambda msg: click.echo(msg, err=True), tls=tls, root_certificates=root_certificates)
    except (ValueError, RuntimeError, FileNotFoundError) as err:
        raise click.ClickException(str(err)) from None
    finally:
        bar.close()
    if sections is None:
        return
    summary = sections["summary"]
    click.echo(markdown_table([{k: v for k, v in summary.items() if not isinstance(v, (dict, list))}]))
    click.echo(f"wrote {output} and {output.with_suffix('.png')}", err=True)


@fl.command()
@click.argument("results", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default="fl_report.png",
              show_default=True, help="The comparison plot.")
def report(results, output):
    """Compare federated runs: a table of their final numbers and one PNG of their curves.

    Each RESULT is a report of `edgekit fl run`, or a file of several runs (a "runs" list,
    as benchmarks/fl_diloco.py writes).
    """
    from edgekit.jobs.fl import fl_plot, render_summary, run_label

    runs = []
    for path in results:
        try:
            data = json.loads(path.read_text())
            runs += data.get("runs", [data])
            rows = render_summary(runs)
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise click.BadParameter(f"{path} is not an `edgekit fl run` report ({err!r})", param_hint="RESULTS")
    click.echo(markdown_table(rows))
    fl_plot([(run_label(r["settings"]), r) for r in runs], output)
    click.echo(f"wrote {output}", err=True)
