"""Gossip DiLoCo: DiLoCo's exact average relaxed to mixing with neighbours on a graph.

Every worker keeps its own parameters ``x_i``, inner AdamW state and outer Nesterov
momentum. A round of ``k`` blocking mixing steps is ``k + 1`` exchanges:

0. non-blocking: each worker trains ``inner_steps`` steps from ``x_i`` while its round-start
   parameters travel to its neighbours; then ``y_i = sum_j W_ij x_j`` over those same
   round-start parameters (no staleness) and the outer step
   ``x_i = y_i - lr (Delta_i + momentum b_i)`` with its own pseudo-gradient ``Delta_i``;
1..k. blocking: ``x_i = sum_j W_ij x_j`` with the neighbours' newest parameters.

With ``mix_momentum`` each worker publishes and mixes its outer momentum together with its
parameters (twice the bytes): local momentum otherwise keeps each worker's own history of
pseudo-gradients for ``1 / (1 - momentum)`` rounds and keeps pushing the workers apart.

``W`` is the lazy Metropolis matrix over the graph's edges that are live for that exchange
(recomputed every exchange; with ``mixing="exact"`` it is ``1/n`` everywhere, and gossip
is then DiLoCo). Flower has no peer-to-peer messages, so the server relays: a worker
publishes its parameters in its reply and the server forwards them as ``peer.<j>``
records, only when they are the ones that exchange needs; the network model charges them
to the peer links (see :mod:`.wire`). A neighbour's parameters that are not there (lost,
late, or never published) leave their weight on the receiver's own parameters, and the
round's record says so. ``k`` trades compute utilization (blocking steps wait on the
links) for agreement between workers.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid
from flwr.supercore.inflatable.inflatable_utils import inflate_object_from_contents

from .choices import MIXINGS
from .compression import from_record, to_record
from .diloco import DEFAULT_OUTER, OuterNesterov, average, inner_config, train_inner
from .engine import EdgeStrategy, client_index, simulated_clock
from .records import RoundRecord
from .topology import TOPOLOGIES, exact_average, graph, lazy_metropolis
from .wire import PUBLISH, TIMING, peer_record_name, peer_sources, timing_record, typed_record, wire_objects
from .workload import Workload, initial_parameters

ROUND_ACTION, MIX_ACTION = "gossip", "mix"
SELF_WEIGHT = "self"
PARAMS, MOMENTUM = "gossip_params", "gossip_momentum"
MOMENTUM_PREFIX = "momentum."


class GossipDiLoCo(EdgeStrategy):
    name = "gossip"
    update_record = PUBLISH
    p2p = True

    def __init__(self, initial: dict[str, np.ndarray], *, inner_steps: int, flops_per_step: float,
                 mixing_steps: int = 0, topology: str = "ring", mixing: str = "metropolis",
                 outer: OuterNesterov = DEFAULT_OUTER, compression: str = "none", mix_momentum: bool = False,
                 seed: int = 0):
        if mixing_steps < 0:
            raise ValueError(f"mixing_steps (k) must be 0 or more, got {mixing_steps}")
        if topology not in TOPOLOGIES:
            raise ValueError(f"unknown topology {topology!r}; allowed: {', '.join(TOPOLOGIES)}")
        if mixing not in MIXINGS:
            raise ValueError(f"unknown mixing {mixing!r}; allowed: {', '.join(MIXINGS)}")
        self.k, self.topology, self.mixing, self.seed = int(mixing_steps), topology, mixing, seed
        self.outer = outer
        self.flops_per_step = float(flops_per_step)
        config = inner_config(inner_steps, compression, flops_per_step)
        super().__init__(initial, {**config, "outer_lr": outer.lr, "outer_momentum": outer.momentum,
                                   "mix_momentum": bool(mix_momentum)})

    def load_initial(self, arrays: dict[str, np.ndarray]) -> None:
        super().load_initial(arrays)
        # node -> (round, exchange) and the state it published then; every worker starts from the
        # initial parameters (and zero momentum), as if published at the end of round 0.
        self.published: dict[int, tuple[tuple[int, int], ArrayRecord]] = {}
        self.update_reference = shared_state(self.reference, {k: np.zeros_like(v) for k, v in self.reference.items()},
                                             self.train_config["mix_momentum"])
        self._initial_record = to_record(self.update_reference, self.train_config["compression"])

    def fanout(self, n: int) -> int:
        """The most neighbours any of ``n`` workers sends to (and hears from) in one exchange: its
        payloads share its uplink (and downlink), so a healthy exchange lasts this many transfers."""
        if self.mixing == "exact":
            return n - 1
        degree = [0] * n
        for a, b in graph(self.topology, n, seed=self.seed):
            degree[a] += 1
            degree[b] += 1
        return max(degree, default=0)

    # -- a round --------------------------------------------------------------------------------

    def _mixing_matrix(self, grid: Grid, nodes: list[int]) -> tuple[np.ndarray, list[tuple[int, int]]]:
        n = len(nodes)
        if self.mixing == "exact":
            return exact_average(n), [(a, b) for i, a in enumerate(nodes) for b in nodes[i + 1:]]
        edges = [(nodes[a], nodes[b]) for a, b in sorted(graph(self.topology, n, seed=self.seed))]
        live = grid.live_peer_edges(edges) if hasattr(grid, "live_peer_edges") else set(edges)
        position = {node: i for i, node in enumerate(nodes)}
        return lazy_metropolis(n, {(position[a], position[b]) for a, b in live}), sorted(live)

    def configure_train(self, server_round, arrays, config, grid) -> list[Message]:
        """The round-start exchange (``arrays`` is unused: gossip has no global model)."""
        return self._messages(server_round, 0, grid)

    def aggregate_train(self, server_round, replies):
        """Keep each worker's published parameters for forwarding; there is no global model to return."""
        replies = list(replies)
        for reply in replies:
            self.published[reply.metadata.src_node_id] = ((server_round, self._exchange), reply.content[PUBLISH])
        return None, MetricRecord({"published": len(replies)})

    def _messages(self, server_round: int, exchange: int, grid: Grid) -> list[Message]:
        nodes = sorted(grid.get_node_ids())
        for node in nodes:
            self.published.setdefault(node, ((0, self.k), self._initial_record))
        self._exchange = exchange
        self._wanted = (server_round - 1, self.k) if exchange == 0 else (server_round, exchange - 1)
        w, self._live = self._mixing_matrix(grid, nodes)
        return [self._message(server_round, exchange, i, node, nodes, w) for i, node in enumerate(nodes)]

    def train_round(self, server_round: int, grid: Grid, timeout: float | None, record: RoundRecord) -> None:
        for exchange in range(self.k + 1):
            messages = (self.configure_train(server_round, None, None, grid) if exchange == 0
                        else self._messages(server_round, exchange, grid))
            for message in messages:
                node = message.metadata.dst_node_id
                if self.published[node][0] != self._wanted:
                    record.miss(client_index(grid, node),
                                f"exchange {exchange}: its parameters of exchange {self._wanted} never reached "
                                "the server", "not forwarded; each neighbour kept that weight on its own parameters")
            seen = len(getattr(grid, "events", []))
            replies = list(grid.send_and_receive(messages, timeout=timeout))
            for event in getattr(grid, "events", [])[seen:]:
                if event["kind"] == "peer":
                    record.miss(event["client"], f"exchange {exchange}: parameters from client {event['src']} "
                                f"{event['reason']}", "its weight stayed on the receiver's own parameters")
            step = RoundRecord(server_round)
            handled = "not forwarded to its neighbours; they kept that weight on their own parameters"
            self.aggregate_train(server_round, self.screen(server_round, grid, messages, replies, step, handled))
            for entry in step.missing + step.rejected:
                entry["reason"] = f"exchange {exchange}: {entry['reason']}"
            record.missing += step.missing
            record.rejected += step.rejected
            if exchange == 0:
                record.asked, record.used, record.train_loss = step.asked, step.used, step.train_loss
            record.metrics.setdefault("live_edges", []).append(len(self._live))
        record.sim_time = self._round_end(grid, timeout)
        if hasattr(grid, "node_time"):
            record.metrics["lag_s"] = self._lag(grid)

    @staticmethod
    def _lag(grid: Grid) -> float:
        """How long after the median worker the slowest one finishes the round: the staleness that
        letting fast workers go on allows (its payloads reach its neighbours that much later)."""
        finished = [grid.node_time.get(n, 0.0) for n in grid.get_node_ids()]
        return float(max(finished) - np.median(finished)) if finished else 0.0

    @staticmethod
    def _round_end(grid: Grid, timeout: float | None) -> float:
        """When the workers that keep pace finished the round: a worker more than one deadline behind
        the median worker lags (its parameters reach its neighbours late) and does not hold the round up."""
        nodes = sorted(grid.get_node_ids())
        if timeout is None or not hasattr(grid, "node_time"):
            return simulated_clock(grid, nodes)
        median = float(np.median([grid.node_time.get(n, 0.0) for n in nodes]))
        return simulated_clock(grid, [n for n in nodes if grid.node_time.get(n, 0.0) <= median + timeout])

    def _message(self, server_round, exchange, i, node, nodes, w) -> Message:
        content = RecordDict({"config": ConfigRecord({**self.train_config, "round": server_round,
                                                      "exchange": exchange})})
        weights = {SELF_WEIGHT: float(w[i, i])}
        for j in np.flatnonzero(w[i] > 0):  # the neighbours, in node order
            if j != i:
                other = nodes[j]
                weights[str(other)] = float(w[i, j])
                tag, published = self.published[other]
                if tag == self._wanted:
                    content[peer_record_name(other)] = published
        content["weights"] = ConfigRecord(weights)
        if exchange == 0:
            content[TIMING] = timing_record(int(self.train_config["inner_steps"]) * self.flops_per_step,
                                            p2p=True, overlap=True)
            action = ROUND_ACTION
        else:
            content[TIMING] = timing_record(p2p=True)
            action = MIX_ACTION
        return Message(content, node, f"train.{action}", group_id=str(server_round))

    # -- what the engine reads ------------------------------------------------------------------

    def _worker_params(self) -> list[dict[str, np.ndarray]]:
        return [split_state(from_record(record))[0] for _, record in self.published.values()] or [self.reference]

    def model_arrays(self) -> dict[str, np.ndarray]:
        """The consensus: the mean of every worker's newest published parameters (no worker holds it)."""
        return average(self._worker_params())

    def worker_arrays(self) -> list[dict[str, np.ndarray]]:
        return self._worker_params()

    def round_metrics(self) -> dict:
        """``disagreement``: RMS over workers of ||x_i - mean|| relative to ||mean||."""
        workers = self._worker_params()
        mean = average(workers)
        norm = np.sqrt(sum(float(np.sum(m.astype(np.float64) ** 2)) for m in mean.values()))
        spread = np.mean([sum(float(np.sum((x[k] - mean[k]).astype(np.float64) ** 2)) for k in mean) for x in workers])
        return {"disagreement": float(np.sqrt(spread) / norm) if norm > 0 else 0.0}

    def state(self) -> dict:
        return {"published": {node: {"tag": list(tag), "root": record.object_id, "objects": wire_objects(record)}
                              for node, (tag, record) in self.published.items()}}

    def load_state(self, state: dict) -> None:
        self.published = {node: (tuple(saved["tag"]), inflate_object_from_contents(saved["root"], dict(saved["objects"])))
                          for node, saved in state["published"].items()}


# -- the worker -------------------------------------------------------------------------------

def mix(own: dict[str, np.ndarray], content: RecordDict) -> tuple[dict[str, np.ndarray], int]:
    """(``sum_j W_ij x_j`` with the weights and peer parameters in ``content``, how many peers
    were missing): a missing peer's weight goes to ``own``."""
    weights = content["weights"]
    received = {node: from_record(content[name]) for node, name in peer_sources(content).items()}
    mixed = {name: np.float32(weights[SELF_WEIGHT]) * x for name, x in own.items()}
    missing = 0
    for key in sorted(k for k in weights if k != SELF_WEIGHT):
        peer = received.get(int(key))
        missing += peer is None
        for name, x in (peer or own).items():
            mixed[name] += np.float32(weights[key]) * x
    return mixed, missing


def shared_state(params: dict[str, np.ndarray], momentum: dict[str, np.ndarray], with_momentum: bool) -> dict:
    """What a worker publishes and mixes: its parameters, and its outer momentum when that is mixed too."""
    if not with_momentum:
        return dict(params)
    return {**params, **{MOMENTUM_PREFIX + k: v for k, v in momentum.items()}}


def split_state(state: dict[str, np.ndarray], momentum: dict[str, np.ndarray] | None = None) -> tuple[dict, dict]:
    """(parameters, momentum) of a shared state; the momentum is ``momentum`` when the state has none."""
    params = {k: v for k, v in state.items() if not k.startswith(MOMENTUM_PREFIX)}
    mixed = {k[len(MOMENTUM_PREFIX):]: v for k, v in state.items() if k.startswith(MOMENTUM_PREFIX)}
    return params, mixed or momentum


def _worker_state(context: Context, workload: Workload) -> tuple[dict, dict]:
    kept_params, kept_momentum = (typed_record(context.state, name, ArrayRecord) for name in (PARAMS, MOMENTUM))
    params = from_record(kept_params) if kept_params is not None else initial_parameters(workload)
    momentum = (from_record(kept_momentum) if kept_momentum is not None
                else {k: np.zeros_like(v) for k, v in params.items()})
    return params, momentum


def register_client(app: ClientApp, workload_for: Callable[[Context], Workload]) -> None:
    """Add gossip DiLoCo's worker (``train.gossip`` for a round's start, ``train.mix`` for a
    blocking mixing step) to ``app``."""

    def mixed_state(message: Message, params, momentum) -> tuple[dict, dict, int]:
        with_momentum = bool(message.content["config"]["mix_momentum"])
        mixed, missing = mix(shared_state(params, momentum, with_momentum), message.content)
        return *split_state(mixed, momentum), missing

    def reply(message: Message, context: Context, params, momentum, metrics: dict) -> Message:
        config = message.content["config"]
        context.state[PARAMS] = to_record(params)
        context.state[MOMENTUM] = to_record(momentum)
        publish = to_record(shared_state(params, momentum, bool(config["mix_momentum"])), str(config["compression"]))
        return Message(RecordDict({PUBLISH: publish, "metrics": MetricRecord(metrics)}), reply_to=message)

    @app.train(ROUND_ACTION)
    def gossip_round(message: Message, context: Context) -> Message:
        config = message.content["config"]
        workload = workload_for(context)
        params, momentum = _worker_state(context, workload)
        local, loss = train_inner(workload, context, params, int(config["inner_steps"]))
        mixed, momentum, missing = mixed_state(message, params, momentum)
        pseudo_gradient = {name: params[name] - local[name] for name in params}
        OuterNesterov(float(config["outer_lr"]), float(config["outer_momentum"])).step(mixed, pseudo_gradient, momentum)
        return reply(message, context, mixed, momentum, {"train_loss": loss, "missing_peers": missing})

    @app.train(MIX_ACTION)
    def gossip_mix(message: Message, context: Context) -> Message:
        params, momentum = _worker_state(context, workload_for(context))
        mixed, momentum, missing = mixed_state(message, params, momentum)
        return reply(message, context, mixed, momentum, {"missing_peers": missing})
