"""FedRGL: robust federated graph learning under label noise, and its baselines, on Flower.

Clients hold the subgraphs of a Louvain partition (:mod:`.graphs`) with noisy train labels
and train a two-layer GCN. Methods (one strategy, :class:`GraphFL`, one ClientApp handler):

* ``fedavg``: local epochs on every train label, average weighted by train-node counts.
* ``fedprox``: the same with the proximal term ``mu / 2 ||w - w_global||^2``.
* ``fedavg+filter``: FedAvg trained only on the nodes the filter keeps (the filter as a plug-in).
* ``fedrgl``: after ``warmup`` rounds of plain local training, each round

  1. class-aware dual-consistency filtering: with the received global model, a train node is
     clean only if (a) its cross-entropy under the global model is at most its (noisy)
     class's threshold ``mean + threshold_std * std`` of that class's losses, and (b) the
     cross-entropy of its label under the global predictions propagated over the local
     subgraph (``F <- alpha A F + (1 - alpha) P``) passes the same rule;
  2. training on the clean nodes, plus pseudo-labels for the filtered-out nodes: the mean
     prediction of two augmented views (feature masking, edge dropping) where both views
     agree and the confidence is at least ``confidence``, plus a contrastive (InfoNCE) loss
     between the two views' node embeddings;
  3. server aggregation weighted by the inverse of each client's mean predictive entropy on
     its unlabelled nodes (a confident client counts more), relative to the entropy of its
     mean prediction there, tempered and scaled by its train nodes:
     ``n_k * (H_k / H(mean p)_k) ** -entropy_power``. A client that predicts mostly one class
     has a low entropy for its skew, not its quality: pure ``1 / H_k`` let one small
     label-skewed client take half the weight of ten and cost 10 points at 10 clients; the
     ratio is near 1 for a client unsure between the classes it predicts, whatever their number.

Hyperparameters are chosen by :func:`tune` on each client's validation nodes, whose labels
carry the same noise as its train labels; runs evaluated ``on="validation"`` never read a test
label. The true labels a client holds serve its test accuracy and the filter's diagnostics
(precision, recall) and the pseudo-labels' precision in the round's metrics; nothing trains
on them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields

import numpy as np
import torch
from flwr.app import Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from torch import nn
from torch.nn import functional as F

from .choices import GRAPH_METHODS
from .compression import from_record, to_record
from .engine import GlobalModelStrategy, RunResult, run_rounds
from .graphs import ClientGraph
from .links import LinkSpec, Network
from .network_grid import NetworkGrid, in_process_network
from .records import RoundRecord
from .workload import load_parameters, parameters_of

TRAIN_ACTION = "graph"
ENTROPY_REFERENCES = ("none", "predicted")
EVALUATE_ON = ("test", "validation")


@dataclass(frozen=True)
class GraphSettings:
    """Hyperparameters of every graph method (one object, sent to clients as a ConfigRecord)."""

    method: str = "fedrgl"
    hidden: int = 64
    dropout: float = 0.5
    lr: float = 0.05
    # Not Kipf and Welling's 5e-4: L2 added to the gradient, which Adam normalises, shrinks by
    # about lr a step every weight whose features a client lacks (most of a bag of words) and
    # so erases the other clients' updates (Cora, 10 clients, FedAvg: 0.57 against 0.71 at 0).
    # Without it FedAvg overfits CiteSeer's noisy labels, where 5e-4 is better (the benchmark runs both).
    weight_decay: float = 0.0
    local_epochs: int = 5
    warmup: int = 10
    mu: float = 0.01  # fedprox: weight of the proximal term
    # An optional proximal term on FedRGL's local training, which the paper does not have (0: the
    # paper's method). Measured as an ablation by benchmarks/fl_fedrgl.py: at 0.001 it cost 2-5
    # points in most settings, and validation chose 0 in every one.
    fedrgl_mu: float = 0.0
    threshold_std: float = 0.0  # the filter's threshold: class mean + this many class standard deviations
    alpha: float = 0.5  # label propagation: weight of the neighbours
    propagation_steps: int = 10
    confidence: float = 0.9  # pseudo-labels: least mean confidence of the two views
    feature_mask: float = 0.3
    edge_drop: float = 0.3
    pseudo_weight: float = 1.0
    contrastive_weight: float = 0.2
    temperature: float = 0.5
    contrastive_nodes: int = 256
    entropy_weighting: bool = True  # fedrgl: aggregate by inverse entropy (False: by train-node count; an ablation)
    entropy_power: float = 0.5  # fedrgl: weights train nodes * entropy ** -entropy_power (see the module docstring)
    entropy_reference: str = "predicted"  # fedrgl: divide it by the entropy of the mean prediction ("none": do not)
    seed: int = 0

    def __post_init__(self):
        for field in fields(self):  # settings arrive from a ConfigRecord: a wrong type fails here, not in every client
            allowed = {"str": str, "bool": bool, "int": int, "float": (int, float)}[field.type]
            value = getattr(self, field.name)
            if not isinstance(value, allowed) or (field.type in ("int", "float") and isinstance(value, bool)):
                raise TypeError(f"{field.name} must be {field.type}, got {value!r}")
        if self.method not in GRAPH_METHODS:
            raise ValueError(f"unknown graph method {self.method!r}; allowed: {', '.join(GRAPH_METHODS)}")
        for name in ("hidden", "local_epochs", "propagation_steps", "contrastive_nodes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in ("lr", "temperature"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("weight_decay", "mu", "fedrgl_mu", "entropy_power"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be non-negative, got {getattr(self, name)}")
        if self.entropy_reference not in ENTROPY_REFERENCES:
            raise ValueError(f"unknown entropy reference {self.entropy_reference!r}; allowed: "
                             f"{', '.join(ENTROPY_REFERENCES)}")
        for name in ("dropout", "alpha", "confidence", "feature_mask", "edge_drop"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")

    @property
    def proximal_weight(self) -> float:
        """``mu`` of the local objective's ``mu / 2 ||w - w_global||^2`` (0: none)."""
        return {"fedprox": self.mu, "fedrgl": self.fedrgl_mu}.get(self.method, 0.0)

    @property
    def filters(self) -> bool:
        return self.method in ("fedavg+filter", "fedrgl")


# -- the model ----------------------------------------------------------------------------------

def normalized_adjacency(edges: np.ndarray, n: int) -> torch.Tensor:
    """``D^-1/2 (A + I) D^-1/2`` of an undirected edge list, as a sparse tensor."""
    loops = np.arange(n)
    src = np.concatenate([edges[0], edges[1], loops])
    dst = np.concatenate([edges[1], edges[0], loops])
    degree = np.bincount(src, minlength=n).astype(np.float32)
    values = 1.0 / np.sqrt(degree[src] * degree[dst])
    return torch.sparse_coo_tensor(torch.from_numpy(np.stack([src, dst])), torch.from_numpy(values.astype(np.float32)),
                                   (n, n), check_invariants=False).coalesce()  # built valid here


class GCN(nn.Module):
    """Two graph convolutions: ``A relu(A X W1) W2``, dropout on the hidden layer; :meth:`embed` is the hidden layer."""

    def __init__(self, features: int, hidden: int, classes: int, dropout: float):
        super().__init__()
        self.conv1, self.conv2, self.dropout = nn.Linear(features, hidden), nn.Linear(hidden, classes), dropout

    def embed(self, x: torch.Tensor, adj: torch.Tensor) -> torch.Tensor:
        # No dropout on the input features (Kipf and Welling drop them too): on thousands of
        # bag-of-words columns it cost more than the rest of a local epoch together.
        return F.relu(torch.sparse.mm(adj, self.conv1(x)))

    def head(self, h: torch.Tensor, adj: torch.Tensor) -> torch.Tensor:
        return torch.sparse.mm(adj, self.conv2(F.dropout(h, self.dropout, self.training)))

    def forward(self, x: torch.Tensor, adj: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(x, adj), adj)


def build_gcn(features: int, classes: int, settings: GraphSettings) -> GCN:
    torch.manual_seed(settings.seed)
    return GCN(features, settings.hidden, classes, settings.dropout)


def gcn_like(params: dict[str, np.ndarray], settings: GraphSettings) -> GCN:
    """A GCN shaped like ``params`` (its sizes read off the weights), holding them."""
    hidden, features = params["conv1.weight"].shape
    return load_parameters(GCN(features, hidden, params["conv2.weight"].shape[0], settings.dropout), params)


def gcn_flops(n: int, nnz: int, features: int, hidden: int, classes: int) -> float:
    """FLOPs of one full-batch training epoch (forward and backward, about 3x forward)."""
    return 3.0 * 2.0 * (n * features * hidden + nnz * hidden + n * hidden * classes + nnz * classes)


# -- the filter ----------------------------------------------------------------------------------

def class_threshold_pass(losses: np.ndarray, labels: np.ndarray, multiple: float) -> np.ndarray:
    """Which losses are at most their class's ``mean + multiple * std`` (over that class's nodes)."""
    keep = np.zeros(len(losses), dtype=bool)
    for c in np.unique(labels):
        members = labels == c
        keep[members] = losses[members] <= losses[members].mean() + multiple * losses[members].std()
    return keep


def propagate(probs: torch.Tensor, adj: torch.Tensor, alpha: float, steps: int) -> torch.Tensor:
    """Label propagation of ``probs`` over the graph: ``F <- alpha A F + (1 - alpha) probs``."""
    out = probs
    for _ in range(steps):
        out = alpha * torch.sparse.mm(adj, out) + (1 - alpha) * probs
    return out / out.sum(dim=1, keepdim=True).clamp_min(1e-12)


def dual_consistency_filter(model: nn.Module, x: torch.Tensor, adj: torch.Tensor, train: np.ndarray,
                            labels: np.ndarray, settings: GraphSettings) -> np.ndarray:
    """The clean mask over ``train`` (with its noisy ``labels``) under ``model`` (the global model):
    both the model's loss and the propagated-label loss pass their class's threshold. A plug-in:
    any method can train on the nodes it keeps."""
    model.eval()
    with torch.no_grad():
        probs = F.softmax(model(x, adj), dim=1)
        propagated = propagate(probs, adj, settings.alpha, settings.propagation_steps)
    index, target = torch.from_numpy(train), torch.from_numpy(labels)
    model_loss = -torch.log(probs[index, target].clamp_min(1e-12)).numpy()
    propagated_loss = -torch.log(propagated[index, target].clamp_min(1e-12)).numpy()
    return (class_threshold_pass(model_loss, labels, settings.threshold_std)
            & class_threshold_pass(propagated_loss, labels, settings.threshold_std))


# -- a client's round ----------------------------------------------------------------------------

def _edge_dropped(edges: np.ndarray, n: int, p: float, generator: torch.Generator) -> torch.Tensor:
    keep = torch.rand(edges.shape[1], generator=generator).numpy() >= p
    return normalized_adjacency(edges[:, keep], n)


def info_nce(a: torch.Tensor, b: torch.Tensor, temperature: float) -> torch.Tensor:
    """Symmetric InfoNCE between two views' embeddings: node i's views are positives, other nodes negatives."""
    a, b = F.normalize(a, dim=1), F.normalize(b, dim=1)
    logits = a @ b.T / temperature
    target = torch.arange(len(a))
    return 0.5 * (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target))


@dataclass
class LocalResult:
    params: dict
    metrics: dict


def local_round(data: ClientGraph, global_params: dict[str, np.ndarray], settings: GraphSettings, server_round: int,
                partition: int) -> LocalResult:
    """One client's round of ``settings.method`` from the global parameters."""
    model = gcn_like(global_params, settings)
    reference = {name: p.detach().clone() for name, p in model.named_parameters()}
    generator = torch.Generator().manual_seed(int(np.random.SeedSequence([settings.seed, partition, server_round])
                                                   .generate_state(1)[0]))
    torch.default_generator.manual_seed(int(generator.initial_seed()))  # dropout draws
    x, n = torch.from_numpy(data.features), len(data.labels)
    adj = normalized_adjacency(data.edges, n)
    train, labels = data.train, data.noisy
    filtering = settings.filters and (settings.method != "fedrgl" or server_round > settings.warmup)
    metrics: dict = {"train_nodes": len(train)}
    clean = np.ones(len(train), dtype=bool)
    if filtering:
        clean = dual_consistency_filter(model, x, adj, train, labels, settings)
        truly = labels == data.labels[train]
        metrics.update(clean_nodes=int(clean.sum()), filtered_nodes=int((~clean).sum()),
                       clean_fraction=float(clean.mean()),
                       filter_precision=float(truly[clean].mean()) if clean.any() else 0.0,
                       filter_recall=float(clean[truly].mean()) if truly.any() else 0.0)
    contrast = settings.method == "fedrgl" and filtering
    filtered = torch.from_numpy(train[~clean])
    kept, kept_labels = torch.from_numpy(train[clean]), torch.from_numpy(labels[clean])
    optimizer = torch.optim.Adam(model.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
    losses, pseudo_counts, pseudo_right = [], [], []
    for _ in range(settings.local_epochs):
        model.train()
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x, adj)[kept], kept_labels) if len(kept) else torch.zeros(())
        if settings.proximal_weight:
            loss = loss + settings.proximal_weight / 2 * sum(((p - reference[name]) ** 2).sum() for name, p in model.named_parameters())
        if contrast:
            masked = x * (torch.rand(x.shape[1], generator=generator) >= settings.feature_mask).float()
            dropped = _edge_dropped(data.edges, n, settings.edge_drop, generator)
            h1, h2 = model.embed(masked, adj), model.embed(x, dropped)
            logits1, logits2 = model.head(h1, adj), model.head(h2, dropped)
            with torch.no_grad():
                p1, p2 = F.softmax(logits1[filtered], 1), F.softmax(logits2[filtered], 1)
                confidence, pseudo = ((p1 + p2) / 2).max(dim=1)
                agree = (p1.argmax(1) == p2.argmax(1)) & (confidence >= settings.confidence)
            pseudo_counts.append(int(agree.sum()))
            if agree.any():
                chosen = filtered[agree]
                # diagnostics only, as the filter's precision: how often the pseudo-labels are the truth
                pseudo_right.append(float((pseudo[agree].numpy() == data.labels[chosen.numpy()]).mean()))
                loss = loss + settings.pseudo_weight * 0.5 * (F.cross_entropy(logits1[chosen], pseudo[agree])
                                                              + F.cross_entropy(logits2[chosen], pseudo[agree]))
            sample = torch.randperm(n, generator=generator)[:settings.contrastive_nodes]
            loss = loss + settings.contrastive_weight * info_nce(h1[sample], h2[sample], settings.temperature)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    model.eval()
    with torch.no_grad():
        probs = F.softmax(model(x, adj), dim=1)
    unlabelled = torch.from_numpy(data.unlabelled)
    entropy = float(_entropy(probs[unlabelled]).mean())
    metrics.update(train_loss=float(np.mean(losses)), entropy=entropy,
                   predicted_entropy=float(_entropy(probs[unlabelled].mean(0))))
    if pseudo_counts:
        metrics["pseudo_labels"] = float(np.mean(pseudo_counts))
    if pseudo_right:
        metrics["pseudo_precision"] = float(np.mean(pseudo_right))
    return LocalResult(parameters_of(model), metrics)


def _entropy(probs: torch.Tensor) -> torch.Tensor:
    return -(probs * torch.log(probs.clamp_min(1e-12))).sum(-1)


def test_accuracy(model: GCN, clients: Sequence[ClientGraph], on: str = "test") -> dict:
    """Accuracy of ``model`` on every client's test nodes (true labels), pooled, and its loss;
    ``on="validation"``: on the validation nodes against their noisy labels instead (no test label is read)."""
    if on not in EVALUATE_ON:
        raise ValueError(f"unknown evaluation split {on!r}; allowed: {', '.join(EVALUATE_ON)}")
    model.eval()
    correct = total = 0
    loss = 0.0
    with torch.no_grad():
        for data in clients:
            nodes, labels = (data.test, data.labels[data.test]) if on == "test" else (data.val, data.val_noisy)
            if not len(nodes):
                continue
            logits = model(torch.from_numpy(data.features), normalized_adjacency(data.edges, len(data.labels)))
            index, target = torch.from_numpy(nodes), torch.from_numpy(labels)
            correct += int((logits[index].argmax(1) == target).sum())
            loss += float(F.cross_entropy(logits[index], target, reduction="sum"))
            total += len(nodes)
    if not total:
        raise ValueError(f"no client has {on} nodes (client_data's {'val' if on == 'validation' else on}_fraction)")
    return {"accuracy": correct / total, "loss": loss / total}


# -- the strategy and the ClientApp --------------------------------------------------------------

def aggregation_weights(metrics: Sequence[dict], settings: GraphSettings, server_round: int) -> np.ndarray:
    """The clients' weights (summing to one) from their round metrics: train-node counts, and
    for FedRGL after its warm-up, times the mean entropy (relative to that of the mean
    prediction unless ``entropy_reference`` is "none") raised to ``-entropy_power``."""
    weights = np.array([float(m["train_nodes"]) for m in metrics])
    if settings.method == "fedrgl" and settings.entropy_weighting and server_round > settings.warmup:
        entropy = np.array([max(float(m["entropy"]), 1e-6) for m in metrics])
        if settings.entropy_reference != "none":
            entropy = entropy / np.array([max(float(m["predicted_entropy"]), 1e-6) for m in metrics])
        weights = weights * entropy ** -settings.entropy_power
    return weights / weights.sum()


class GraphFL(GlobalModelStrategy):
    """The server side of every graph method: send the global GCN, average what comes back
    (by :func:`aggregation_weights`)."""

    update_record = "params"
    action = TRAIN_ACTION

    def __init__(self, initial: dict[str, np.ndarray], settings: GraphSettings, flops_per_round: float):
        self.settings, self.name = settings, settings.method
        super().__init__(initial, asdict(settings), flops_per_round)

    def aggregate_train(self, server_round, replies):
        replies = list(replies)
        if not replies:  # nothing arrived: the global model stays
            return None, MetricRecord({"updates": 0})
        metrics = [r.content["metrics"] for r in replies]
        weights = aggregation_weights(metrics, self.settings, server_round)
        updates = [from_record(r.content[self.update_record]) for r in replies]
        self.params = {name: sum(np.float32(w) * u[name] for w, u in zip(weights, updates)).astype(np.float32)
                       for name in self.params}
        self.last_metrics = {key: float(np.mean([float(m[key]) for m in metrics if key in m]))
                             for key in ("clean_fraction", "filter_precision", "filter_recall", "pseudo_labels",
                                         "pseudo_precision", "entropy")
                             if any(key in m for m in metrics)}
        self.last_metrics.update({key: sum(int(m[key]) for m in metrics if key in m)
                                  for key in ("clean_nodes", "filtered_nodes") if any(key in m for m in metrics)})
        self.last_metrics["weights"] = [round(float(w), 4) for w in weights]
        return None, MetricRecord({"updates": len(replies)})


def register_client(app: ClientApp, clients_for: Callable[[Context], Sequence[ClientGraph]]) -> None:
    """Add the graph methods' worker (message type ``train.graph``) to ``app``; ``clients_for``
    gives every client's data, the node takes its ``partition-id``'s."""

    @app.train(TRAIN_ACTION)
    def graph_worker(message: Message, context: Context) -> Message:
        config = dict(message.content["config"])
        server_round = int(config.pop("round"))
        settings = GraphSettings(**config)
        partition = int(context.node_config["partition-id"])
        result = local_round(clients_for(context)[partition], from_record(message.content["params"]), settings,
                             server_round, partition)
        return Message(RecordDict({"params": to_record(result.params), "metrics": MetricRecord(result.metrics)}),
                       reply_to=message)


def run_graph(settings: GraphSettings, clients: Sequence[ClientGraph], num_classes: int, rounds: int, *,
              grid: NetworkGrid | None = None, network: Network | None = None,
              deadline: Callable[[GraphFL], float] | None = None, checkpoint: str | None = None,
              config: dict | None = None, evaluate_on: str = "test",
              on_round: Callable[[RoundRecord], None] | None = None) -> tuple[RunResult, NetworkGrid]:
    """``settings.method`` for ``rounds`` rounds, the global model's accuracy every round on
    ``evaluate_on``: "test" (true labels) or "validation" (noisy labels: what tuning may see).

    It runs on ``grid`` (say, the simulated network over a Flower engine's grid, whose nodes'
    ClientApp has :func:`register_client`'s handler), else on the in-process engine over
    ``network`` (default: 10 Mbit/s links with 50 ms latency). ``deadline`` gives the exchange
    deadline for the strategy (simulated seconds, see :func:`.apps.deadline`); without one the
    server waits for every reply that is not lost. ``checkpoint`` is rewritten every round and
    resumed from; it records ``settings``, ``rounds``, a digest of the clients' data and
    ``config`` (say, the settings the data was built from), and a resume must match them all."""
    if evaluate_on not in EVALUATE_ON:
        raise ValueError(f"unknown evaluate_on {evaluate_on!r}; allowed: {', '.join(EVALUATE_ON)}")
    initial = parameters_of(build_gcn(clients[0].features.shape[1], num_classes, settings))
    biggest = max(clients, key=lambda c: len(c.labels))
    flops = settings.local_epochs * gcn_flops(len(biggest.labels), 2 * biggest.edges.shape[1] + len(biggest.labels),
                                              biggest.features.shape[1], settings.hidden, num_classes)
    strategy = GraphFL(initial, settings, flops)
    if grid is None:
        app = ClientApp()
        register_client(app, lambda _: clients)
        grid = in_process_network(app, len(clients), network or Network(LinkSpec(10e6, 0.05), 1e10, seed=settings.seed))
    timeout = deadline(strategy) if deadline is not None else None

    def evaluate(_, arrays):
        return test_accuracy(gcn_like(arrays, settings), clients, evaluate_on)

    result = run_rounds(strategy, grid, rounds, timeout=timeout, evaluate=evaluate, checkpoint=checkpoint,
                        config={**(config or {}), "method_settings": asdict(settings), "rounds": rounds,
                                "data": data_digest(clients)},
                        on_round=on_round)
    result.summary["deadline_s"] = timeout
    return result, grid


def data_digest(clients: Sequence[ClientGraph]) -> str:
    """SHA-256 over every client's arrays and noise rate: a checkpoint of other data is not resumed."""
    digest = hashlib.sha256()
    for data in clients:
        for field in fields(data):
            value = getattr(data, field.name)
            digest.update(np.ascontiguousarray(value).tobytes() if isinstance(value, np.ndarray) else repr(value).encode())
    return digest.hexdigest()


def graph_summary(records: Sequence[RoundRecord], last: int = 5) -> dict:
    """What a graph run comes to: test accuracy per round and its mean over the ``last`` rounds
    (the score: round-to-round swings under label noise are a few points), and the filter's
    means over the rounds it ran (precision and recall of the labels it kept, per client) and
    its counts in the last round it ran (summed over clients)."""
    accuracy = [r.metrics["eval"]["accuracy"] for r in records if "eval" in r.metrics]
    filtered = [r.metrics for r in records if "filter_precision" in r.metrics]
    return {"accuracy": accuracy, "final_accuracy": accuracy[-1], "score": float(np.mean(accuracy[-last:])),
            "filter_precision": float(np.mean([m["filter_precision"] for m in filtered])) if filtered else None,
            "filter_recall": float(np.mean([m["filter_recall"] for m in filtered])) if filtered else None,
            "clean_nodes": filtered[-1]["clean_nodes"] if filtered else None,
            "filtered_nodes": filtered[-1]["filtered_nodes"] if filtered else None}


def tune(candidates: Sequence[GraphSettings], clients: Sequence[ClientGraph], num_classes: int, rounds: int,
         last: int = 5) -> tuple[int, list[float]]:
    """The index of the candidate with the best validation score (mean noisy-label validation
    accuracy over its ``last`` rounds; the first on ties) and every candidate's score. Runs are
    evaluated on validation only: no test label is read."""
    if not candidates:
        raise ValueError("tune needs at least one candidate")
    scores = []
    for settings in candidates:
        result, _ = run_graph(settings, clients, num_classes, rounds, evaluate_on="validation")
        scores.append(graph_summary(result.records, last)["score"])
    return int(np.argmax(scores)), scores
