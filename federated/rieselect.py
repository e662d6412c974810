"""RieSelect: federated continual learning with a selective uplink, and its baselines, on Flower.

Clients learn a sequence of tasks (``rounds_per_task`` rounds each). Every round a client
trains from the global model on its share of the current task and uploads, for a subset
of its layers (here: parameter tensors), its update ``local - global``. Selections:

* ``full``: every layer (no budget);
* ``random``: layers in a seeded random order while they fit the byte budget;
* ``topk``: layers by decreasing update norm while they fit;
* ``rieselect``: the 0/1 knapsack over layers that maximises ``utility - risk_weight * risk``
  under the budget, where utility is the first-order decrease of the current task's loss
  that the layer's update brings to the global model (on local batches training does not
  draw) and risk the layer's conflict score with earlier tasks in the diagonal Fisher
  metric: the increase of ``sum_t 1/2 sum F_t (theta - theta*_t)^2`` that its update causes,
  ``F_t`` the Fisher diagonal of task ``t`` at the solution ``theta*_t`` the federation had
  when that task ended. ``F_t`` is the Fisher of the per-prediction loss (the loss the
  workload averages, nats per prediction for the LM), so the penalty is the second-order
  increase of that loss, in the same units as the utility and the step's bound.
  The knapsack is coverage-aware: the server gains from the union of what clients send, and a
  layer another client also sends is only averaged, so each round the layers are split into
  balanced shares, one per client (rotating with the round), and a layer outside the client's
  share counts ``overlap_weight`` of its value. Clients of the same model rank layers alike;
  independent knapsacks (``overlap_weight=1``) all sent the same few layers.

The server averages each layer's updates over the clients that sent it (a layer nobody
sent stays). For ``rieselect`` it then certifies the step: the update ``d`` is applied as
``theta + eta d`` with the largest ``eta <= 1`` that keeps ``P = sum_t 1/2 sum F_t (theta + eta d -
theta*_t)^2`` inside the safe basin (closed form: :func:`safe_step`). The paper's basin is fixed,
``P <= radius`` (``basin="fixed"``): under the quadratic model ``P`` is the loss increase the
earlier tasks have taken, and the basin bounds it for the whole run. A scaled step cannot slide
along the basin's boundary, so once the model reaches it every update with an outward component
gets ``eta = 0``; ``basin="moving"`` (``P <= P(theta) + growth`` each round) bounds each step's
increase instead and always moves. Each client
computes its Fisher diagonal of a finished task in the first round of the next one, at the
global model it receives, and keeps it for its own risk scores. For the server's cap it
uploads only its shard of that Fisher (the layers :func:`fisher_shards` gives it: one
client per layer), as the square root (the RMS gradient, half the dynamic range) in
MXINT8; those bytes come out of that round's byte budget, so every selective method sends
at most ``budget_fraction`` of the full update's bytes per client and round. A layer whose
shard was lost has no Fisher at the server and is not capped.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import torch
from flwr.app import Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from torch import nn

from .choices import BASINS, SELECTIONS
from .compression import from_record, packed_nbytes, to_record
from .engine import GlobalModelStrategy, RunResult, run_rounds
from .links import LinkSpec, Network
from .network_grid import NetworkGrid, in_process_network
from .records import RoundRecord, check_update
from .workload import model_holding, parameters_of

log = logging.getLogger("edgekit.federated")

TRAIN_ACTION = "rieselect"
FISHER, ANCHORS = "rieselect_fisher", "rieselect_anchor"
FISHER_COMPRESSION = "mxint8"  # the server's cap needs the Fisher's shape, not float32 precision


@dataclass(frozen=True)
class ContinualWorkload:
    """A model and a sequence of tasks, as RieSelect needs them.

    sample_losses: ``(model, task, partition, step) -> (batch,) losses`` of one batch of that
    client's share of the task, each sample's loss the mean over its ``observations``
    predictions (a window's next-byte losses for the LM); the training loss is their mean.
    evaluate: ``(model, task) -> loss`` on the task's validation data (what hyperparameters are chosen on).
    test: the same on the task's test data, where the workload has it (scored, never tuned on).
    """

    build_model: Callable[[], nn.Module]
    sample_losses: Callable[[nn.Module, int, int, int], torch.Tensor]
    evaluate: Callable[[nn.Module, int], float]
    num_tasks: int
    observations: int = 1
    lr: float = 3e-3
    flops_per_step: float = 1e6
    test: Callable[[nn.Module, int], float] | None = None


@dataclass(frozen=True)
class ContinualSettings:
    selection: str = "rieselect"
    clients: int = 4
    rounds_per_task: int = 4
    local_steps: int = 10
    budget_fraction: float = 0.25  # per client and round, of the full update's bytes
    risk_weight: float = 1.0
    overlap_weight: float = 0.0  # rieselect: a layer outside this round's share of the client is worth this much
    coordinated: bool = False  # random, topk: this round's share first (rieselect's coverage, without its knapsack)
    basin: str = "moving"
    growth: float = 0.01  # nats, moving basin: the second-order loss increase on earlier tasks one step may add
    radius: float = 0.1  # nats, fixed basin: the second-order loss increase on earlier tasks the model may carry
    fisher_batches: int = 4
    seed: int = 0

    def __post_init__(self):
        if self.selection not in SELECTIONS:
            raise ValueError(f"unknown selection {self.selection!r}; allowed: {', '.join(SELECTIONS)}")
        if self.basin not in BASINS:
            raise ValueError(f"unknown basin {self.basin!r}; allowed: {', '.join(BASINS)}")
        if not self.growth > 0:  # at 0 a model far from earlier solutions could stop learning
            raise ValueError(f"growth must be positive, got {self.growth}")
        if not self.radius > 0:
            raise ValueError(f"radius must be positive, got {self.radius}")
        if not 0.0 <= self.overlap_weight <= 1.0:
            raise ValueError(f"overlap_weight must be in [0, 1], got {self.overlap_weight}")
        if not 0.0 < self.budget_fraction <= 1.0:
            raise ValueError(f"budget_fraction must be in (0, 1], got {self.budget_fraction}")
        for name in ("clients", "rounds_per_task", "local_steps", "fisher_batches"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")


def task_of(server_round: int, rounds_per_task: int) -> int:
    return (server_round - 1) // rounds_per_task


# -- selection -----------------------------------------------------------------------------------

def knapsack(values: Sequence[float], sizes: Sequence[int], budget: int, unit: int = 256) -> list[int]:
    """Indices of the items of largest total value with total size at most ``budget`` (0/1
    knapsack by dynamic programming over sizes rounded up to ``unit`` bytes, so a chosen set
    always fits); items of value <= 0 are never chosen."""
    capacity = budget // unit
    weights = [math.ceil(s / unit) for s in sizes]
    best = np.zeros(capacity + 1)
    take = np.zeros((len(values), capacity + 1), dtype=bool)
    for i, (value, weight) in enumerate(zip(values, weights)):
        if value <= 0 or weight > capacity:
            continue
        candidate = np.full(capacity + 1, -np.inf)
        candidate[weight:] = best[:capacity + 1 - weight] + value
        take[i] = candidate > best
        best = np.maximum(best, candidate)
    chosen, c = [], int(np.argmax(best))
    for i in range(len(values) - 1, -1, -1):
        if take[i, c]:
            chosen.append(i)
            c -= weights[i]
    return sorted(chosen)


def greedy_fill(order: Sequence[int], sizes: Sequence[int], budget: int) -> list[int]:
    """The items in ``order`` that fit, taken while the budget lasts (skipping ones too large)."""
    chosen, used = [], 0
    for i in order:
        if used + sizes[i] <= budget:
            chosen.append(i)
            used += sizes[i]
    return sorted(chosen)


def penalty_increase(start: dict, delta: dict, anchors: Sequence[tuple[dict, dict]], name: str) -> float:
    """How much layer ``name``'s update raises ``sum_t 1/2 sum F_t (theta - theta*_t)^2``."""
    total = 0.0
    for fisher, anchor in anchors:
        before = start[name] - anchor[name]
        total += 0.5 * float(np.sum(fisher[name] * ((before + delta[name]) ** 2 - before ** 2)))
    return total


def penalty_by_task(params: dict, anchors: Sequence[tuple[dict, dict]]) -> list[float]:
    """``1/2 sum F_t (theta - theta*_t)^2`` of each earlier task ``t``: under the quadratic model, how much
    its loss has risen since its solution (nats per prediction). Layers with no Fisher add nothing."""
    return [sum(0.5 * float(np.sum(f.astype(np.float64) * (params[n] - anchor[n]).astype(np.float64) ** 2))
                for n, f in fisher.items() if n in params) for fisher, anchor in anchors]


def safe_step(params: dict, direction: dict, anchors: Sequence[tuple[dict, dict]], slack: float) -> float:
    """The largest ``eta`` in [0, 1] whose step raises ``P = sum_t 1/2 sum F_t (theta - theta*_t)^2`` by at
    most ``slack``, 0 where there is none.

    ``P(params + eta d) - P(params) = a eta^2 + b eta`` with ``a = 1/2 sum_t d.F_t d >= 0`` and
    ``b = sum_t d.F_t (params - theta*_t)``; the set of ``eta >= 0`` where it is at most ``slack`` is
    ``[0, eta+]`` (or, for a negative slack, ``[eta-, eta+]``), ``eta+`` the larger root of
    ``a eta^2 + b eta - slack``. A fixed basin ``P <= radius`` takes ``slack = radius - P(params)``;
    a moving one ``slack = growth``. The sum runs over every layer with a Fisher; one with none is not
    capped."""
    a = b = 0.0
    for fisher, anchor in anchors:
        for name, d in direction.items():
            if name not in fisher:
                continue
            f, d = fisher[name].astype(np.float64), d.astype(np.float64)
            a += 0.5 * float(np.sum(f * d * d))
            b += float(np.sum(f * d * (params[name] - anchor[name]).astype(np.float64)))
    if a <= 0:  # then b = 0 too: the step does not change P
        return 1.0
    if a + b <= slack:
        return 1.0
    disc = b * b + 4 * a * slack
    if disc < 0:  # outside the basin and the line never re-enters it
        return 0.0
    # both forms are the larger root; each is free of cancellation for its sign of b
    root = 2 * slack / (b + math.sqrt(disc)) if b > 0 else (-b + math.sqrt(disc)) / (2 * a)
    return max(0.0, min(1.0, root))


def fisher_diagonal(workload: ContinualWorkload, model: nn.Module, task: int, partition: int,
                    batches: int) -> dict[str, np.ndarray]:
    """The empirical Fisher diagonal of ``task``'s per-prediction loss at ``model``.

    Samples are the independent observations: with ``m_s`` a sample's mean loss over its
    ``n`` predictions, the Hessian of the mean loss is about ``n * mean_s (grad m_s)^2``.
    (The square of a batch's mean gradient would be that divided by the batch's
    predictions, about a thousand for the LM: a risk and a cap a thousand times too lax.)"""
    params = dict(model.named_parameters())
    out = {name: np.zeros(p.shape, np.float64) for name, p in params.items()}
    model.eval()
    count = 0
    for b in range(batches):
        losses = workload.sample_losses(model, task, partition, -1 - b)  # negative steps: batches training never draws
        for loss in losses:
            grads = torch.autograd.grad(loss, list(params.values()), retain_graph=True)
            for name, g in zip(params, grads):
                out[name] += g.double().numpy() ** 2
        count += len(losses)
    return {name: (f * workload.observations / count).astype(np.float32) for name, f in out.items()}


def fisher_shards(shapes: dict[str, tuple], clients: int) -> list[list[str]]:
    """A balanced split of the layers over clients: every layer to one client, largest first to the
    client with the fewest bytes so far, so each holds about ``1/clients`` of the model. It says
    which layers' Fisher each client uploads, and (rotated by round) each client's share of the
    knapsack (:func:`round_share`)."""
    shards, load = [[] for _ in range(clients)], [0] * clients
    for name in sorted(shapes, key=lambda n: (-math.prod(shapes[n]), n)):
        c = load.index(min(load))
        shards[c].append(name)
        load[c] += math.prod(shapes[name])
    return shards


def round_share(shapes: dict[str, tuple], clients: int, partition: int, server_round: int) -> set[str]:
    """The layers whose full value counts in this client's knapsack this round: shares rotate, so
    every client's data reaches every layer, and the clients' shares cover the model."""
    return set(fisher_shards(shapes, clients)[(partition + server_round) % clients])


UTILITY_BATCHES = 2


def layer_utilities(workload: ContinualWorkload, model: nn.Module, start: dict, delta: dict, task: int,
                    partition: int, server_round: int) -> dict[str, float]:
    """Each layer's plasticity utility: the decrease of the current task's loss along its update,
    ``-g . delta`` with ``g`` the gradient at the midpoint ``start + delta / 2`` of the whole update,
    on ``UTILITY_BATCHES`` batches of local data that training does not draw. Summed over all
    layers this is the loss change of the whole update, exactly for a quadratic loss (midpoint
    rule), and it is additive over layers, as the knapsack's sum assumes. The gradient at
    ``start`` (first order) ignored curvature: it ranked the head and attention outputs first
    every round, whose updates overshoot, and on seed 0 learned the first task more slowly than
    random layers (3.10 against 2.99 nats/byte; midpoint 2.99). The measured loss change of each
    layer's update applied alone is not additive (most layers' updates alone raised the loss:
    they help together), and selecting by it learned every task more slowly."""
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, p in params.items():
            p.copy_(torch.tensor(start[name] + 0.5 * delta[name]))
    model.eval()
    model.zero_grad(set_to_none=True)
    keys = [-1000 * (server_round + 1) - b for b in range(UTILITY_BATCHES)]
    loss = sum(workload.sample_losses(model, task, partition, k).mean() for k in keys) / len(keys)
    loss.backward()
    return {name: -float(np.sum(p.grad.numpy() * delta[name])) for name, p in params.items()}


def _select(settings: ContinualSettings, start: dict, delta: dict, utility: dict | None, anchors, share: set[str],
            budget: int, rng: np.random.Generator) -> list[str]:
    names = list(delta)
    sizes = [packed_nbytes(delta[n].shape, "none") for n in names]
    if settings.selection == "full":
        return names
    if settings.selection in ("random", "topk"):
        order = (rng.permutation(len(names)) if settings.selection == "random"
                 else np.argsort([-float(np.linalg.norm(delta[n])) for n in names], kind="stable"))
        if settings.coordinated:
            order = sorted(order, key=lambda i: names[i] not in share)  # stable: the share first, each part in order
        return [names[i] for i in greedy_fill(order, sizes, budget)]
    values = [(1.0 if n in share else settings.overlap_weight)
              * (utility[n] - settings.risk_weight * penalty_increase(start, delta, anchors, n)) for n in names]
    return [names[i] for i in knapsack(values, sizes, budget)]


# -- the client ----------------------------------------------------------------------------------

def _stored_anchors(state) -> list[tuple[dict, dict]]:
    anchors, t = [], 0
    while f"{FISHER}.{t}" in state.array_records:
        anchors.append((from_record(state[f"{FISHER}.{t}"]), from_record(state[f"{ANCHORS}.{t}"])))
        t += 1
    return anchors


def client_round(workload: ContinualWorkload, settings: ContinualSettings, context: Context, start: dict,
                 server_round: int) -> tuple[dict, dict | None, dict]:
    """(selected updates, this client's shard of the square-rooted Fisher diagonal of the task
    just finished or None, metrics) of one client round."""
    partition = int(context.node_config["partition-id"])
    task = task_of(server_round, settings.rounds_per_task)
    model = model_holding(workload, context.node_id, start)
    shard = None
    if settings.selection == "rieselect" and task > 0 and server_round == task * settings.rounds_per_task + 1:
        fisher = fisher_diagonal(workload, model, task - 1, partition, settings.fisher_batches)
        context.state[f"{FISHER}.{task - 1}"] = to_record(fisher)
        context.state[f"{ANCHORS}.{task - 1}"] = to_record(start)
        mine = fisher_shards({n: f.shape for n, f in fisher.items()}, settings.clients)[partition % settings.clients]
        shard = {n: np.sqrt(fisher[n]) for n in mine}
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=workload.lr)
    losses = []
    for step in range(settings.local_steps):
        torch.default_generator.manual_seed(int(np.random.SeedSequence([settings.seed, partition, server_round, step])
                                                .generate_state(1)[0]))
        loss = workload.sample_losses(model, task, partition, server_round * settings.local_steps + step).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    local = parameters_of(model)
    delta = {name: local[name] - start[name] for name in start}
    full = sum(packed_nbytes(d.shape, "none") for d in delta.values())
    shard_bytes = sum(packed_nbytes(f.shape, FISHER_COMPRESSION) for f in (shard or {}).values())
    rng = np.random.default_rng([settings.seed, partition, server_round])
    utility = (layer_utilities(workload, model, start, delta, task, partition, server_round)
               if settings.selection == "rieselect" else None)
    share = round_share({n: d.shape for n, d in delta.items()}, settings.clients, partition, server_round)
    chosen = _select(settings, start, delta, utility, _stored_anchors(context.state), share,
                     max(int(settings.budget_fraction * full) - shard_bytes, 0), rng)
    return ({n: delta[n] for n in chosen}, shard,
            {"train_loss": float(np.mean(losses)), "layers": len(chosen), "layer_fraction": len(chosen) / len(delta)})


def register_client(app: ClientApp, workload_for: Callable[[Context], ContinualWorkload]) -> None:
    @app.train(TRAIN_ACTION)
    def rieselect_worker(message: Message, context: Context) -> Message:
        config = dict(message.content["config"])
        server_round = int(config.pop("round"))
        settings = ContinualSettings(**config)
        update, fisher, metrics = client_round(workload_for(context), settings, context,
                                               from_record(message.content["params"]), server_round)
        content = RecordDict({"update": to_record(update), "metrics": MetricRecord(metrics)})
        if fisher is not None:
            content["fisher"] = to_record(fisher, FISHER_COMPRESSION)
        return Message(content, reply_to=message)


# -- the server ----------------------------------------------------------------------------------

class ContinualFL(GlobalModelStrategy):
    """Per-layer averaging of partial updates; for ``rieselect``, the Fisher cap on the step."""

    update_record = "update"
    partial_updates = True
    action = TRAIN_ACTION

    def __init__(self, initial: dict, settings: ContinualSettings, flops_per_round: float):
        self.settings, self.name = settings, settings.selection
        super().__init__(initial, asdict(settings), flops_per_round)

    def load_initial(self, arrays: dict) -> None:
        super().load_initial(arrays)
        self.fishers: list[dict] = []
        self.anchors: list[dict] = []

    def configure_train(self, server_round, arrays, config, grid) -> list[Message]:
        self._round_start = {k: v.copy() for k, v in self.params.items()}  # where a finished task's Fisher is taken
        return super().configure_train(server_round, arrays, config, grid)

    def aggregate_train(self, server_round, replies):
        replies = list(replies)
        shards = [self._fisher_shard(server_round, r) for r in replies if "fisher" in r.content.array_records]
        if shards:  # the task that just ended: its Fisher at the model the round started from
            fisher = {}
            for shard in filter(None, shards):
                fisher.update({n: np.square(root) for n, root in shard.items()})
            self.fishers.append(fisher)
            self.anchors.append(self._round_start)
        updates = [from_record(r.content[self.update_record]) for r in replies]
        direction = {}
        for name in self.params:
            sent = [u[name] for u in updates if name in u]
            if sent:
                direction[name] = np.mean(sent, axis=0).astype(np.float32)
        eta, anchors = 1.0, list(zip(self.fishers, self.anchors))
        before = sum(penalty_by_task(self.params, anchors))
        if self.settings.selection == "rieselect" and anchors and direction:
            slack = self.settings.growth if self.settings.basin == "moving" else self.settings.radius - before
            eta = safe_step(self.params, direction, anchors, slack)
        for name, d in direction.items():
            self.params[name] = (self.params[name] + np.float32(eta) * d).astype(np.float32)
        self.last_metrics = {"step": eta, "penalty": before, "layers_updated": len(direction),
                             "layer_fraction": float(np.mean([float(r.content["metrics"]["layer_fraction"])
                                                              for r in replies])) if replies else 0.0}
        return None, MetricRecord({"updates": len(replies)})

    def _fisher_shard(self, server_round: int, reply: Message) -> dict | None:
        """A reply's Fisher shard, or None (logged) when it is malformed: the update stands, its
        layers go uncapped."""
        shard, reason = check_update(reply, "fisher", self.update_reference, server_round, partial=True)
        if reason is None and any(np.any(root < 0) for root in shard.values()):
            shard, reason = None, "negative values in a square-rooted Fisher"
        if reason is not None:
            log.warning("round %d: Fisher shard from node %d ignored: %s", server_round, reply.metadata.src_node_id,
                        reason)
        return shard

    def state(self) -> dict:
        return {**super().state(), "fishers": self.fishers, "anchors": self.anchors}

    def load_state(self, state: dict) -> None:
        super().load_state(state)
        self.fishers, self.anchors = list(state["fishers"]), list(state["anchors"])


def check_budget(settings: ContinualSettings, shapes: dict[str, tuple]) -> None:
    """A selective method's byte budget must hold at least the model's smallest layer; below it no
    client could send anything and the federation would not learn."""
    sizes = [packed_nbytes(shape, "none") for shape in shapes.values()]
    budget = settings.budget_fraction * sum(sizes)
    if settings.selection != "full" and budget < min(sizes):
        raise ValueError(f"budget {settings.budget_fraction:g} of an update gives {int(budget)} bytes per client and "
                         f"round, below the smallest layer ({min(sizes)} bytes); allowed: at least "
                         f"{min(sizes) / sum(sizes):.2g}")


def run_continual(settings: ContinualSettings, workload: ContinualWorkload, *, grid: NetworkGrid | None = None,
                  network: Network | None = None, deadline: Callable[[ContinualFL], float] | None = None,
                  on_round: Callable[[RoundRecord], None] | None = None, checkpoint: str | None = None,
                  config: dict | None = None) -> tuple[RunResult, NetworkGrid, dict]:
    """Every task in order; (the run, its grid, the summary: average final validation loss over tasks
    and forgetting (under ``test``, the same on test data where the workload has it), uplink bytes,
    the mean fraction of layers sent, the server's steps with the Fisher penalty ``P`` before each,
    and each earlier task's penalty at the end).

    It runs on ``grid`` (say, the simulated network over a Flower engine's grid, whose nodes'
    ClientApp has :func:`register_client`'s handler), else on the in-process engine over
    ``network`` (default: 10 Mbit/s links with 50 ms latency). ``deadline`` gives the exchange
    deadline for the strategy (simulated seconds, see :func:`.apps.deadline`); without one the
    server waits for every reply that is not lost. ``checkpoint`` is rewritten every round and
    resumed from; it records ``settings`` and ``config`` (what else the run depends on: the
    settings the workload's data was built from), and a resume must match them.

    Forgetting of task ``t``: its loss at the end of the run minus its loss when its own
    rounds ended, averaged over every task but the last (``forgetting_by_task``: each)."""
    initial = parameters_of(workload.build_model())
    check_budget(settings, {n: v.shape for n, v in initial.items()})
    strategy = ContinualFL(initial, settings, settings.local_steps * workload.flops_per_step)
    if grid is None:
        app = ClientApp()
        register_client(app, lambda _: workload)
        grid = in_process_network(app, settings.clients,
                                  network or Network(LinkSpec(10e6, 0.05), 1e10, seed=settings.seed))
    timeout = deadline(strategy) if deadline is not None else None

    def evaluate(_, arrays):
        model = model_holding(workload, "evaluate", arrays).eval()
        with torch.no_grad():
            losses = [float(workload.evaluate(model, t)) for t in range(workload.num_tasks)]
            tests = [float(workload.test(model, t)) for t in range(workload.num_tasks)] if workload.test else None
        return {"loss": float(np.mean(losses)), "task_losses": losses, **({"test_task_losses": tests} if tests else {})}

    rounds = workload.num_tasks * settings.rounds_per_task
    result = run_rounds(strategy, grid, rounds, timeout=timeout, evaluate=evaluate,
                        eval_every=settings.rounds_per_task, checkpoint=checkpoint,
                        config={**(config or {}), "method_settings": asdict(settings), "rounds": rounds},
                        on_round=on_round)
    trained = result.records[1:]
    summary = {**_task_summary(result.records, "task_losses", settings.rounds_per_task, workload.num_tasks),
               "uplink_bytes": sum(grid.bytes.up.values()),
               "layer_fraction": float(np.mean([r.metrics["layer_fraction"] for r in trained])),
               "layers_covered": float(np.mean([r.metrics["layers_updated"] for r in trained])) / len(initial),
               "steps": [r.metrics.get("step") for r in trained],
               "penalties": [r.metrics.get("penalty") for r in trained],
               "penalty_by_task": penalty_by_task(strategy.params, list(zip(strategy.fishers, strategy.anchors)))}
    if workload.test:
        summary["test"] = _task_summary(result.records, "test_task_losses", settings.rounds_per_task,
                                        workload.num_tasks)
    result.summary["deadline_s"] = timeout
    return result, grid, summary


def _task_summary(records: list[RoundRecord], key: str, rounds_per_task: int, num_tasks: int) -> dict:
    """Average final loss over tasks and forgetting, from the evaluations under ``key``."""
    by_round = {r.round: r.metrics["eval"][key] for r in records if "eval" in r.metrics}
    final = by_round[num_tasks * rounds_per_task]
    at_end = [by_round[(t + 1) * rounds_per_task][t] for t in range(num_tasks)]
    forgetting = [final[t] - at_end[t] for t in range(num_tasks - 1)]
    return {"average_loss": float(np.mean(final)), "forgetting": float(np.mean(forgetting)) if forgetting else 0.0,
            "forgetting_by_task": forgetting, "task_losses": final, "loss_when_learned": at_end}
