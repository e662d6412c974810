"""The Flower apps of every method, configured by one run config, on any engine.

:class:`RunSettings` is the run config (Flower's ``[tool.flwr.app.config]``, keys with
hyphens). :func:`make_client_app` and :func:`make_server_app` build the ClientApp and
ServerApp from a workload factory; the ServerApp puts the simulated network
(:class:`~.network_grid.NetworkGrid`) on whatever grid Flower hands it, so the same apps
run in process (:func:`run_in_process`), on Flower's simulation engine and on its
deployment engine. A method is an entry of :data:`METHODS`: a function of the settings,
the initial parameters and the FLOPs of one inner step that returns an
:class:`~.engine.EdgeStrategy`; its ClientApp handlers are registered by an entry of
:data:`CLIENT_HANDLERS`. Methods that train something else than a :class:`~.workload.Workload`
(FedRGL, RieSelect) share the run config and :func:`deadline` and come as runners (see
:func:`make_server_app`) from whoever builds their data.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import re
import time
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from flwr.app import Context, Message
from flwr.clientapp import ClientApp
from flwr.clientapp.typing import ClientAppCallable
from flwr.serverapp import Grid, ServerApp
from flwr.supercore import log as flwr_log

from . import diloco, gossip
from .choices import BASINS, GRAPH_METHODS, GRAPHS, METHOD_NAMES, NOISES, SELECTIONS, split_tasks
from .compression import check_compression, packed_nbytes
from .engine import EdgeStrategy, RunResult, resumable, run_rounds
from .flower_grid import FlowerNodes, carry_state, register_partition_query
from .links import LinkSpec, Network
from .network_grid import NetworkGrid, in_process_network
from .records import RoundRecord
from .topology import TOPOLOGIES
from .workload import Workload, evaluate_arrays, parameters_of

DEADLINE_SLACK = 1.5  # an automatic deadline is this many times the healthy exchange time


@dataclass(frozen=True)
class RunSettings:
    """One federated run. ``straggler`` is the client index that computes ``straggler_slowdown``
    times slower (-1: none); ``deadline_s`` 0 picks one automatically (see :func:`deadline`);
    ``model_config`` is the workload's own ``KEY=VALUE`` settings, space separated.

    ``fedrgl`` reads ``graph`` (from ``planetoid``, a directory, unless csbm), ``noise``,
    ``noise_rate``, ``warmup`` and ``graph_method`` (FedRGL or a baseline), with
    ``inner_steps`` local epochs; ``rieselect`` learns the comma-separated stdlib packages
    ``tasks`` in order, ``rounds / len(tasks)`` rounds each, uploading ``budget`` of each
    update's bytes as ``selection`` (RieSelect or a baseline) picks, with ``inner_steps``
    local steps, RieSelect's server step certified inside a ``basin`` (fixed: ``radius`` nats).
    Other methods ignore these."""

    method: str = "diloco"
    clients: int = 8
    rounds: int = 10
    inner_steps: int = 20
    mixing_steps: int = 0
    topology: str = "ring"
    mixing: str = "metropolis"
    mix_momentum: bool = False
    compression: str = "none"
    outer_lr: float = 0.7
    outer_momentum: float = 0.9
    bandwidth_bps: float = 10e6
    latency_s: float = 0.05
    jitter_s: float = 0.0
    drop: float = 0.0
    outage: float = 0.0
    outage_period_s: float = 60.0
    device_flops: float = 11.52e9
    straggler: int = -1
    straggler_slowdown: float = 3.0
    deadline_s: float = 0.0
    seed: int = 0
    model_config: str = ""
    eval_every: int = 1
    graph: str = "csbm"
    planetoid: str = ""
    noise: str = "uniform"
    noise_rate: float = 0.3
    warmup: int = 10
    graph_method: str = "fedrgl"
    tasks: str = "email,asyncio,encodings"
    budget: float = 0.25
    selection: str = "rieselect"
    basin: str = "moving"
    radius: float = 0.1
    # PyTorch threads of every process that trains or evaluates: float sums split over threads
    # round differently, so the same run on another engine must use the same number
    threads: int = 1
    checkpoint: str = ""
    output: str = ""

    def __post_init__(self):
        if self.method not in METHOD_NAMES:
            raise ValueError(f"unknown method {self.method!r}; allowed: {', '.join(METHOD_NAMES)}")
        for name, allowed in (("graph", GRAPHS), ("noise", NOISES), ("graph_method", GRAPH_METHODS),
                              ("selection", SELECTIONS), ("basin", BASINS)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"unknown {name} {getattr(self, name)!r}; allowed: {', '.join(allowed)}")
        if self.method == "rieselect" and not self.task_names:
            raise ValueError(f"tasks must name at least one stdlib package, got {self.tasks!r}")
        if self.method == "rieselect" and self.rounds % len(self.task_names):
            raise ValueError(f"rounds ({self.rounds}) must be a multiple of the number of tasks "
                             f"({len(self.task_names)}: {', '.join(self.task_names)}); each task gets the same rounds")
        if not self.radius > 0:
            raise ValueError(f"radius must be positive nats, got {self.radius}")
        for name in ("clients", "rounds", "inner_steps", "eval_every", "threads"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.mixing_steps < 0:
            raise ValueError(f"mixing_steps must be 0 or more, got {self.mixing_steps}")
        if self.topology not in TOPOLOGIES:
            raise ValueError(f"unknown topology {self.topology!r}; allowed: {', '.join(TOPOLOGIES)}")
        if self.mixing not in gossip.MIXINGS:
            raise ValueError(f"unknown mixing {self.mixing!r}; allowed: {', '.join(gossip.MIXINGS)}")
        check_compression(self.compression)
        if not -1 <= self.straggler < self.clients:
            raise ValueError(f"straggler must be a client index in [0, {self.clients - 1}] or -1, got {self.straggler}")
        if self.deadline_s < 0:
            raise ValueError(f"deadline must be positive seconds, or 0 for automatic; got {self.deadline_s}")
        self.network()  # the link and device values are checked there

    @property
    def task_names(self) -> tuple[str, ...]:
        return split_tasks(self.tasks)

    def network(self) -> Network:
        link = LinkSpec(self.bandwidth_bps, self.latency_s, self.jitter_s, self.drop, self.outage,
                        self.outage_period_s)
        stragglers = {self.straggler: self.straggler_slowdown} if self.straggler >= 0 else {}
        return Network(link, self.device_flops, stragglers=stragglers, seed=self.seed)

    def run_config(self) -> dict:
        """As a Flower run config: hyphenated keys."""
        return {f.name.replace("_", "-"): getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_run_config(cls, config: Mapping) -> RunSettings:
        """From a Flower run config; a key this run does not know is an error that lists the known ones."""
        hints = typing.get_type_hints(cls)
        fields = {f.name.replace("_", "-"): f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(config) - set(fields))
        if unknown:
            raise ValueError(f"unknown run config key(s) {', '.join(unknown)}; known: {', '.join(fields)}")
        return cls(**{fields[k]: hints[fields[k]](v) for k, v in config.items()})


# -- methods ------------------------------------------------------------------------------------

def _diloco(settings: RunSettings, initial: dict, flops_per_step: float) -> EdgeStrategy:
    return diloco.DiLoCo(initial, inner_steps=settings.inner_steps, flops_per_step=flops_per_step,
                         outer=diloco.OuterNesterov(settings.outer_lr, settings.outer_momentum),
                         compression=settings.compression)


def _gossip(settings: RunSettings, initial: dict, flops_per_step: float) -> EdgeStrategy:
    return gossip.GossipDiLoCo(initial, inner_steps=settings.inner_steps, flops_per_step=flops_per_step,
                               mixing_steps=settings.mixing_steps, topology=settings.topology,
                               mixing=settings.mixing, compression=settings.compression,
                               mix_momentum=settings.mix_momentum,
                               outer=diloco.OuterNesterov(settings.outer_lr, settings.outer_momentum),
                               seed=settings.seed)


METHODS: dict[str, Callable[[RunSettings, dict, float], EdgeStrategy]] = {"diloco": _diloco, "gossip": _gossip}
assert set(METHODS) <= set(METHOD_NAMES), "choices.METHOD_NAMES must list every method implemented here"
CLIENT_HANDLERS: list[Callable[[ClientApp, Callable[[Context], Workload]], None]] = [
    diloco.register_client, gossip.register_client]


def deadline(settings: RunSettings, strategy: EdgeStrategy, round_flops: float) -> float:
    """The deadline of one exchange, simulated seconds: ``settings.deadline_s``, or when 0,
    ``DEADLINE_SLACK`` times the healthy time of what the method waits for: a round of a
    global model (download, ``round_flops`` of a client's compute, upload) measured from its
    start; a gossip exchange's payloads, measured from when the receiver needs them (a worker
    sends to and hears from each neighbour at once, over one uplink and one downlink)."""
    if settings.deadline_s > 0:
        return settings.deadline_s
    link = settings.network().client

    def payload(arrays: dict, compression: str) -> int:
        # tensor data alone: Flower stores identical chunks once, so a serialized sample (say, of a
        # zero momentum) can be far smaller than the payloads of the run
        return sum(packed_nbytes(a.shape, compression) for a in arrays.values())

    update = payload(strategy.update_reference, settings.compression)
    if strategy.p2p:
        return DEADLINE_SLACK * link.nominal_seconds(max(1, strategy.fanout(settings.clients)) * update)
    compute = round_flops / settings.device_flops
    params = payload(strategy.reference, "none")
    return DEADLINE_SLACK * (link.nominal_seconds(params) + compute + link.nominal_seconds(update))


def checkpoint_config(settings: RunSettings) -> dict:
    """What a run's checkpoint records and a resume must match: every setting (the data's too)
    but where files go."""
    return {k: v for k, v in settings.run_config().items() if k not in ("checkpoint", "output")}


def execute(settings: RunSettings, workload: Workload, grid: NetworkGrid, *, checkpoint: str | None = None,
            on_round: Callable[[RoundRecord], None] | None = None) -> RunResult:
    """Run ``settings.method`` on ``grid`` with ``workload``, evaluating the model centrally."""
    if settings.method not in METHODS:
        raise ValueError(f"{settings.method} has its own runner (see make_server_app's runners), not a strategy here")
    initial = parameters_of(workload.build_model())
    strategy = METHODS[settings.method](settings, initial, workload.flops_per_step)
    timeout = deadline(settings, strategy, settings.inner_steps * workload.flops_per_step)
    result = run_rounds(strategy, grid, settings.rounds, timeout=timeout,
                        evaluate=lambda _, arrays: evaluate_arrays(workload, arrays), eval_every=settings.eval_every,
                        checkpoint=checkpoint, config=checkpoint_config(settings), on_round=on_round)
    result.summary["deadline_s"] = timeout
    return result


@functools.lru_cache(maxsize=8)
def _settings(run_config: tuple) -> RunSettings:
    """Settings from a run config's items, parsed and checked once (every message's handler asks)."""
    return RunSettings.from_run_config(dict(run_config))


def context_settings(context: Context) -> RunSettings:
    """The run's settings as a node's context holds them (parsed once per run config)."""
    return _settings(tuple(sorted(context.run_config.items())))


def use_threads(settings: RunSettings) -> None:
    """Run this process's PyTorch work on ``settings.threads`` threads."""
    torch.set_num_threads(settings.threads)


def run_threads(message: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """ClientApp mod: the handler runs on the run's threads, whatever the process (in process,
    a SuperNode's ClientApp process, a Ray actor) was started with."""
    use_threads(context_settings(context))
    return call_next(message, context)


def make_client_app(workload_for: Callable[[RunSettings], Workload]) -> ClientApp:
    """The ClientApp of every method; a client's workload comes from the run config."""
    app = ClientApp(mods=[run_threads, carry_state])  # carry_state: a no-op unless a checkpointed run on Flower's engines asks
    register_partition_query(app)

    for register in CLIENT_HANDLERS:
        register(app, lambda context: workload_for(context_settings(context)))
    return app


def run_in_process(settings: RunSettings, workload_for: Callable[[RunSettings], Workload], *,
                   checkpoint: str | None = None,
                   on_round: Callable[[RoundRecord], None] | None = None) -> tuple[RunResult, NetworkGrid]:
    """The run on the in-process engine: every client in this process, over the simulated network."""
    use_threads(settings)
    grid = in_process_network(make_client_app(workload_for), settings.clients, settings.network(),
                              settings.run_config())
    return execute(settings, workload_for(settings), grid, checkpoint=checkpoint, on_round=on_round), grid


def wait_for_nodes(grid: Grid, count: int, timeout_s: float) -> list[int]:
    """Poll a real engine's grid until ``count`` nodes have joined (real seconds: nodes connecting)."""
    deadline_at = time.monotonic() + timeout_s
    while True:
        nodes = list(grid.get_node_ids())
        if len(nodes) >= count:
            return nodes
        if time.monotonic() > deadline_at:
            raise RuntimeError(f"only {len(nodes)} of {count} clients joined within {timeout_s:.0f} s")
        time.sleep(0.5)


PROGRESS = re.compile(r"edgekit round (\d+)/(\d+) sim_time=(\S+) loss=(\S+) used=(\d+) missing=(\d+) rejected=(\d+)"
                      r"(?: accuracy=(\S+))?")


def progress_line(record: RoundRecord, rounds: int) -> str:
    """One log line per round, the same on every engine (``PROGRESS`` reads it back); the
    accuracy only for methods that measure one (FedRGL)."""
    evaluated = record.metrics.get("eval", {})
    accuracy = f" accuracy={evaluated['accuracy']}" if "accuracy" in evaluated else ""
    return (f"edgekit round {record.round}/{rounds} sim_time={record.sim_time:.6g} loss={evaluated.get('loss')} "
            f"used={len(record.used)} missing={len(record.missing)} rejected={len(record.rejected)}{accuracy}")


def parse_progress(line: str) -> RoundRecord | None:
    """The round a ServerApp's progress line reports (round, simulated time, loss and any accuracy), or None."""
    match = PROGRESS.search(line)
    if match is None:
        return None
    evaluated = {key: float(value) for key, value in (("loss", match.group(4)), ("accuracy", match.group(8)))
                 if value not in (None, "None")}
    return RoundRecord(int(match.group(1)), sim_time=float(match.group(3)),
                       metrics={"eval": evaluated} if evaluated else {})


Runner = Callable[[RunSettings, NetworkGrid, Callable[[RoundRecord], None] | None], RunResult]


def make_server_app(workload_for: Callable[[RunSettings], Workload],
                    on_result: Callable[[RunSettings, RunResult, NetworkGrid], None],
                    node_wait_s: float = 300.0, reply_timeout_s: float = 3600.0,
                    runners: Mapping[str, Runner] | None = None) -> ServerApp:
    """The ServerApp of every method: waits for ``clients`` nodes, puts the simulated network
    on Flower's grid (through :class:`~.flower_grid.FlowerNodes`: stable node ids, and the
    clients' states in the checkpoint), runs the method and hands the result to ``on_result``. A method of
    :data:`METHODS` runs through :func:`execute`; the others through their entry in
    ``runners`` (their ClientApp handlers registered by the caller)."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        settings = RunSettings.from_run_config(context.run_config)
        use_threads(settings)
        if settings.method not in (runners or {}):  # runners check their own (it records more)
            # another run's checkpoint is refused now, not after waiting for the nodes
            resumable(settings.checkpoint or None, checkpoint_config(settings))
        wait_for_nodes(grid, settings.clients, node_wait_s)
        nodes = FlowerNodes(grid, keep_state=bool(settings.checkpoint), timeout=reply_timeout_s)
        network_grid = NetworkGrid(nodes, settings.network(), inner_timeout=reply_timeout_s)

        def progress(record: RoundRecord) -> None:
            flwr_log(logging.INFO, progress_line(record, settings.rounds))

        if settings.method in (runners or {}):
            result = runners[settings.method](settings, network_grid, progress)
        else:
            result = execute(settings, workload_for(settings), network_grid, checkpoint=settings.checkpoint or None,
                             on_round=progress)
        if nodes.keep_state:  # real traffic outside the simulated links (see FlowerNodes)
            result.summary["checkpoint_state_bytes"] = dict(nodes.state_bytes)
        on_result(settings, result, network_grid)

    return app

