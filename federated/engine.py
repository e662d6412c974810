"""The round loop every method runs through, on any Flower ``Grid``.

A method is an :class:`EdgeStrategy`: a Flower ``Strategy`` whose ``configure_train`` and
``aggregate_train`` make one exchange per round, or which overrides :meth:`train_round`
for rounds of several exchanges (gossip). :func:`run_rounds` drives it: per round it fills
a :class:`~.records.RoundRecord` (which updates were used, missing or rejected, and how
each was handled; the network's lost and late transfers; simulated time, compute and
bytes), evaluates the model, and rewrites the checkpoint, from which a killed run resumes
and ends exactly as an uninterrupted one (given a deterministic grid: the in-process one,
or Flower's engines behind :class:`~.flower_grid.FlowerNodes`).

The grid may be a :class:`~.network_grid.NetworkGrid` (simulated time and bytes) or any
plain Flower grid (then time is wall time and bytes are not counted).
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result, Strategy

from .compression import from_record, to_record
from .records import RoundRecord, check_update, explain_missing, mean_or_none
from .wire import TIMING, timing_record, typed_record

log = logging.getLogger("edgekit.federated")


def client_index(grid: Grid, node: int) -> int:
    """The client index of ``node``: the network's, else its position among the sorted node ids."""
    if hasattr(grid, "index_of"):
        return grid.index_of(node)
    return sorted(grid.get_node_ids()).index(node)


def simulated_clock(grid: Grid, nodes: Iterable[int] | None = None) -> float:
    """Simulated seconds on a NetworkGrid (the server's, or the latest of ``nodes``); else wall time."""
    if hasattr(grid, "clock"):
        return grid.clock(nodes)
    return time.time()


class EdgeStrategy(Strategy, ABC):
    """A Flower strategy the engine runs with records, update checks and checkpoints.

    ``initial`` is the model's parameters (name -> float32 array): the reference every
    update is checked against. Subclasses keep their own state and return it from
    :meth:`state` (NumPy arrays, numbers, strings, bytes, lists and dicts).
    """

    name = "strategy"
    update_record = "update"  # the ArrayRecord a client's reply carries
    p2p = False  # True: clients talk to each other (relayed); their time lines are their own
    partial_updates = False  # True: an update may hold a subset of the tensors (selective uplink)

    def __init__(self, initial: dict[str, np.ndarray], train_config: dict | None = None):
        self.train_config = dict(train_config or {})
        self.load_initial(initial)

    # -- what a method provides ---------------------------------------------------------------

    def load_initial(self, arrays: dict[str, np.ndarray]) -> None:
        """Start from ``arrays``; subclasses extend this to reset their own state."""
        self.reference = {k: np.asarray(v, dtype=np.float32) for k, v in arrays.items()}
        self.update_reference = self.reference  # the tensors a client's update must hold

    @abstractmethod
    def model_arrays(self) -> dict[str, np.ndarray]:
        """The model to evaluate now (the global model, or the consensus of the workers)."""

    def worker_arrays(self) -> list[dict[str, np.ndarray]] | None:
        """Each worker's own model where workers hold different ones (gossip); None where every
        worker holds :meth:`model_arrays` after a round."""
        return None

    def state(self) -> dict:
        return {}

    def load_state(self, state: dict) -> None:
        pass

    def round_metrics(self) -> dict:
        """Method-specific numbers for the round's record (e.g. worker disagreement)."""
        return {}

    # -- one round ----------------------------------------------------------------------------

    def train_round(self, server_round: int, grid: Grid, timeout: float | None, record: RoundRecord) -> None:
        """One exchange: ``configure_train``, send, check every reply, ``aggregate_train`` the good ones."""
        messages = list(self.configure_train(server_round, to_record(self.model_arrays()),
                                             ConfigRecord(self.train_config), grid))
        replies = list(grid.send_and_receive(messages, timeout=timeout))
        accepted = self.screen(server_round, grid, messages, replies, record,
                               handled="left out of the average")
        self.aggregate_train(server_round, accepted)
        record.sim_time = simulated_clock(grid)

    def screen(self, server_round: int, grid: Grid, sent: list[Message], replies: list[Message],
               record: RoundRecord, handled: str) -> list[Message]:
        """The replies whose update passes :func:`~.records.check_update`; every other asked
        client goes into ``record`` as missing or rejected, with ``handled`` saying what was done."""
        by_node = {r.metadata.src_node_id: r for r in replies}
        accepted, losses = [], []
        for message in sent:
            node = message.metadata.dst_node_id
            client = client_index(grid, node)
            record.asked.append(client)
            reply = by_node.get(node)
            if reply is None:
                record.miss(client, explain_missing(grid, node), handled)
                continue
            _, reason = check_update(reply, self.update_record, self.update_reference, server_round,
                                     self.partial_updates)
            if reason is not None:
                record.reject(client, reason, handled)
                continue
            record.used.append(client)
            accepted.append(reply)
            losses.append((typed_record(reply.content, "metrics", MetricRecord) or {}).get("train_loss"))
        record.train_loss = mean_or_none(losses)
        return accepted

    # -- Flower's evaluation hooks: evaluation is central, on the server ------------------

    def configure_evaluate(self, server_round, arrays, config, grid) -> list[Message]:
        return []

    def aggregate_evaluate(self, server_round, replies) -> MetricRecord | None:
        return None

    def summary(self) -> None:
        log.info("%s: %s", self.name, self.train_config)

    def start(self, grid: Grid, initial_arrays: ArrayRecord, num_rounds: int = 3, timeout: float = 3600,
              train_config: ConfigRecord | None = None, evaluate_config: ConfigRecord | None = None,
              evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None = None) -> Result:
        """Flower's entry point: :func:`run_rounds` from ``initial_arrays``, without checkpoints."""
        self.load_initial(from_record(initial_arrays))
        if train_config is not None:
            self.train_config.update(dict(train_config))
        evaluate = None
        if evaluate_fn is not None:
            evaluate = lambda server_round, arrays: dict(evaluate_fn(server_round, to_record(arrays)) or {})
        run = run_rounds(self, grid, num_rounds, timeout=timeout, evaluate=evaluate)
        result = Result()
        result.arrays = to_record(run.final)
        for rec in run.records:
            if rec.train_loss is not None:
                result.train_metrics_clientapp[rec.round] = MetricRecord({"train_loss": rec.train_loss})
            if rec.metrics.get("eval"):
                result.evaluate_metrics_serverapp[rec.round] = MetricRecord(rec.metrics["eval"])
        return result


class GlobalModelStrategy(EdgeStrategy):
    """A strategy with one global model that every node gets each round, with the train config,
    as a ``train.<action>`` message of ``flops_per_round`` FLOPs of client work. Subclasses
    implement ``aggregate_train`` (updating ``self.params``) and may leave numbers for the
    round's record in ``self.last_metrics``."""

    action = "train"

    def __init__(self, initial: dict[str, np.ndarray], train_config: dict, flops_per_round: float):
        self.flops_per_round = float(flops_per_round)
        self.last_metrics: dict = {}
        super().__init__(initial, train_config)

    def load_initial(self, arrays: dict[str, np.ndarray]) -> None:
        super().load_initial(arrays)
        self.params = {k: v.copy() for k, v in self.reference.items()}

    def model_arrays(self) -> dict[str, np.ndarray]:
        return self.params

    def configure_train(self, server_round, arrays, config, grid) -> list[Message]:
        settings = ConfigRecord({**dict(config), "round": server_round})
        return [Message(RecordDict({"params": arrays, "config": settings, TIMING: timing_record(self.flops_per_round)}),
                        node, f"train.{self.action}", group_id=str(server_round))
                for node in sorted(grid.get_node_ids())]

    def round_metrics(self) -> dict:
        metrics, self.last_metrics = self.last_metrics, {}
        return metrics

    def state(self) -> dict:
        return {"params": self.params}

    def load_state(self, state: dict) -> None:
        self.params = {k: np.array(v) for k, v in state["params"].items()}


@dataclass
class RunResult:
    records: list[RoundRecord]
    final: dict[str, np.ndarray]
    resumed_from: int = 0  # the round the run resumed after (0: from the start)
    summary: dict = field(default_factory=dict)


def _bytes_total(grid: Grid) -> int:
    return grid.bytes.total if hasattr(grid, "bytes") else 0


def _compute_total(grid: Grid) -> float:
    return sum(grid.compute_seconds.values()) if hasattr(grid, "compute_seconds") else 0.0


def utilization(grid: Grid, p2p: bool) -> float | None:
    """Compute time over elapsed time, summed over clients: each client's own time line for
    peer-to-peer methods, the server's for synchronous ones. None without a simulated network."""
    if not hasattr(grid, "compute_seconds") or not grid.compute_seconds:
        return None
    elapsed = sum(grid.node_time[n] if p2p else max(grid.node_time[n], grid.now) for n in grid.compute_seconds)
    return sum(grid.compute_seconds.values()) / elapsed if elapsed > 0 else None


def resumable(checkpoint: str | Path | None, config: dict | None) -> dict | None:
    """The checkpoint saved at ``checkpoint`` (None when there is none yet); ValueError naming the
    settings that differ when it belongs to a run of another ``config``."""
    from .checkpoint import load_checkpoint  # see run_rounds

    if checkpoint is None or not Path(checkpoint).exists():
        return None
    saved = load_checkpoint(checkpoint)
    if saved["config"] != (config or {}):
        changed = sorted(k for k in set(saved["config"]) | set(config or {})
                         if saved["config"].get(k) != (config or {}).get(k))
        raise ValueError(f"checkpoint {checkpoint} belongs to a run with a different configuration "
                         f"(differs in {', '.join(changed)}); delete it or use another checkpoint path")
    return saved


def evaluation(strategy: EdgeStrategy, evaluate: Callable[[int, dict], dict], server_round: int) -> dict:
    """The round's metrics of the models the workers hold.

    Where every worker holds the global model, its metrics, with ``worst_loss`` = ``loss``.
    Where workers hold their own (gossip), each numeric metric is the mean over the workers'
    own models, ``worst_loss`` the highest worker loss, and ``oracle_loss`` the loss of the
    workers' average: an oracle figure, since nothing in the run pays for the all-reduce it needs.
    """
    workers = strategy.worker_arrays()
    if workers is None:
        metrics = evaluate(server_round, strategy.model_arrays())
        return {**metrics, "worst_loss": metrics["loss"]} if "loss" in metrics else metrics
    each = [evaluate(server_round, arrays) for arrays in workers]
    numeric = [k for k, v in each[0].items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    metrics = {k: float(np.mean([e[k] for e in each])) for k in numeric}
    if "loss" in metrics:
        metrics["worst_loss"] = max(float(e["loss"]) for e in each)
        metrics["oracle_loss"] = evaluate(server_round, strategy.model_arrays())["loss"]
    return metrics


def run_rounds(strategy: EdgeStrategy, grid: Grid, num_rounds: int, *, timeout: float | None = None,
               evaluate: Callable[[int, dict], dict] | None = None, eval_every: int = 1,
               checkpoint: str | Path | None = None, config: dict | None = None,
               on_round: Callable[[RoundRecord], None] | None = None) -> RunResult:
    """Run rounds 1..``num_rounds`` of ``strategy`` on ``grid``, resuming from ``checkpoint`` if it exists.

    evaluate: ``(round, model arrays) -> metrics``, run before round 1 (round 0), every
        ``eval_every`` rounds and after the last, on the models the workers hold
        (:func:`evaluation`); its metrics go to ``record.metrics["eval"]``.
    checkpoint: rewritten after every round; a run resumes from it only with the same ``config``.
    on_round: called with each finished round's record (progress bars, logs).
    """
    if num_rounds < 1:
        raise ValueError(f"num_rounds must be at least 1, got {num_rounds}")
    # Imported here, not at the top: it brings edgekit.simulators (Numba, ml_dtypes), seconds of
    # imports that every ClientApp process of Flower's engines would otherwise pay for nothing.
    from .checkpoint import save_checkpoint

    records: list[RoundRecord] = []
    first = 1
    saved = resumable(checkpoint, config)
    if saved is not None:
        strategy.load_state(saved["strategy"])
        if saved["grid"] is not None:
            grid.load_state(saved["grid"])
        records = [RoundRecord(**r) for r in saved["records"]]
        first = saved["round"] + 1
        log.info("resuming after round %d from %s", saved["round"], checkpoint)
    elif evaluate is not None:
        records.append(RoundRecord(0, sim_time=simulated_clock(grid) if hasattr(grid, "clock") else 0.0,
                                   metrics={"eval": evaluation(strategy, evaluate, 0)}))
    resumed_from = first - 1
    for server_round in range(first, num_rounds + 1):
        bytes_before, compute_before = _bytes_total(grid), _compute_total(grid)
        record = RoundRecord(server_round)
        strategy.train_round(server_round, grid, timeout, record)
        if hasattr(grid, "drain_events"):
            record.network = grid.drain_events()
        record.bytes_sent = _bytes_total(grid) - bytes_before
        record.compute_seconds = _compute_total(grid) - compute_before
        record.metrics.update(strategy.round_metrics())
        record.metrics["utilization"] = utilization(grid, strategy.p2p)
        if evaluate is not None and (server_round % eval_every == 0 or server_round == num_rounds):
            record.metrics["eval"] = evaluation(strategy, evaluate, server_round)
        records.append(record)
        if checkpoint is not None:
            save_checkpoint(checkpoint, {"config": config or {}, "round": server_round, "strategy": strategy.state(),
                                         "grid": grid.state() if hasattr(grid, "state") else None,
                                         "records": [r.as_dict() for r in records]})
        if on_round is not None:
            on_round(record)
    summary = {"rounds": num_rounds, "sim_time": records[-1].sim_time if records else 0.0,
               "utilization": utilization(grid, strategy.p2p),
               "bytes": grid.bytes.as_dict() if hasattr(grid, "bytes") else None,
               "compute_seconds": _compute_total(grid)}
    return RunResult(records, strategy.model_arrays(), resumed_from, summary)
