"""DiLoCo: H inner AdamW steps per worker, exact averaging of pseudo-gradients, outer Nesterov.

Each round the server sends the global parameters; each worker trains ``inner_steps``
steps on its own data partition from them (its AdamW state and step count persist in its
Flower context) and replies with its pseudo-gradient, round-start parameters minus local
parameters, optionally MX-compressed. The server averages the pseudo-gradients that
arrived well-formed and in time, and applies outer SGD with Nesterov momentum (lr 0.7,
momentum 0.9 by default). A round in which no update arrives leaves the parameters and
momentum as they were. The exchange is the server's gather and broadcast: its cost is each
worker's upload and download on its own simulated link.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from flwr.app import ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from .compression import check_compression, from_record, to_record
from .engine import EdgeStrategy
from .wire import TIMING, timing_record
from .workload import Workload, inner_steps, model_holding, optimizer_holding, parameters_of, save_optimizer

TRAIN_ACTION = "diloco"


@dataclass(frozen=True)
class OuterNesterov:
    """SGD with Nesterov momentum on a pseudo-gradient, replacing the entries of ``params`` and ``buf``:
    ``b = momentum * b + g``; ``x = x - lr * (g + momentum * b)`` (PyTorch's SGD with nesterov=True)."""

    lr: float = 0.7
    momentum: float = 0.9

    def step(self, params: dict[str, np.ndarray], grad: dict[str, np.ndarray], buf: dict[str, np.ndarray]) -> None:
        for name, g in grad.items():
            buf[name] = self.momentum * buf[name] + g
            params[name] = params[name] - self.lr * (g + self.momentum * buf[name])


DEFAULT_OUTER = OuterNesterov()


def average(updates: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The element-wise mean of the updates, summed in the order given."""
    return {name: np.mean(np.stack([u[name] for u in updates]), axis=0, dtype=np.float32) for name in updates[0]}


def inner_config(inner_steps: int, compression: str, flops_per_step: float) -> dict:
    if inner_steps < 1:
        raise ValueError(f"inner_steps must be at least 1, got {inner_steps}")
    if not flops_per_step > 0:
        raise ValueError(f"flops_per_step must be positive, got {flops_per_step}")
    return {"inner_steps": int(inner_steps), "compression": check_compression(compression)}


class DiLoCo(EdgeStrategy):
    name = "diloco"
    update_record = "pseudo_gradient"

    def __init__(self, initial: dict[str, np.ndarray], *, inner_steps: int, flops_per_step: float,
                 outer: OuterNesterov = DEFAULT_OUTER, compression: str = "none"):
        self.outer = outer
        self.flops_per_step = float(flops_per_step)
        super().__init__(initial, inner_config(inner_steps, compression, flops_per_step))

    def load_initial(self, arrays: dict[str, np.ndarray]) -> None:
        super().load_initial(arrays)
        self.params = {k: v.copy() for k, v in self.reference.items()}
        self.momentum = {k: np.zeros_like(v) for k, v in self.reference.items()}

    def model_arrays(self) -> dict[str, np.ndarray]:
        return self.params

    def configure_train(self, server_round, arrays, config, grid) -> list[Message]:
        work = timing_record(int(config["inner_steps"]) * self.flops_per_step)
        settings = ConfigRecord({**dict(config), "round": server_round})
        return [Message(RecordDict({"params": arrays, "config": settings, TIMING: work}), node,
                        f"train.{TRAIN_ACTION}", group_id=str(server_round))
                for node in sorted(grid.get_node_ids())]

    def aggregate_train(self, server_round, replies):
        updates = [from_record(r.content[self.update_record]) for r in replies]
        if updates:  # no update: parameters and momentum stay as they were
            self.outer.step(self.params, average(updates), self.momentum)
        return to_record(self.params), MetricRecord({"updates": len(updates)})

    def state(self) -> dict:
        return {"params": self.params, "momentum": self.momentum}

    def load_state(self, state: dict) -> None:
        self.params = {k: np.array(v) for k, v in state["params"].items()}
        self.momentum = {k: np.array(v) for k, v in state["momentum"].items()}


def train_inner(workload: Workload, context: Context, start: dict[str, np.ndarray], steps: int):
    """A worker's inner phase from ``start``: (its local parameters after ``steps`` steps, mean loss)."""
    partition = int(context.node_config["partition-id"])
    model = model_holding(workload, context.node_id, start)
    optimizer, done = optimizer_holding(workload, model, context.state)
    loss = inner_steps(workload, model, optimizer, partition, done, steps)
    save_optimizer(context.state, optimizer, done + steps)
    return parameters_of(model), loss


def register_client(app: ClientApp, workload_for: Callable[[Context], Workload]) -> None:
    """Add DiLoCo's worker (message type ``train.diloco``) to ``app``."""

    @app.train(TRAIN_ACTION)
    def diloco_worker(message: Message, context: Context) -> Message:
        config = message.content["config"]
        start = from_record(message.content["params"])
        local, loss = train_inner(workload_for(context), context, start, int(config["inner_steps"]))
        pseudo_gradient = {name: start[name] - local[name] for name in start}
        return Message(RecordDict({DiLoCo.update_record: to_record(pseudo_gradient, str(config["compression"])),
                                   "metrics": MetricRecord({"train_loss": loss})}), reply_to=message)
