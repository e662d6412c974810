"""Graphs for federated graph learning: Planetoid citation graphs, contextual SBM graphs,
Louvain clients, per-client node splits and label noise.

A :class:`Graph` is node features, labels (-1: the node has none) and undirected edges.
:func:`load_planetoid` reads the standard Planetoid raw files (``ind.<name>.x`` ...), as
graph libraries do when they load Cora or CiteSeer; :func:`csbm` generates a contextual
stochastic block model graph; :func:`load_graph` gives either by name.
:func:`louvain_clients` partitions a graph into clients the usual way of federated graph
learning: Louvain communities, largest first, each to the client that has the fewest nodes
so far; every client keeps the subgraph its nodes induce
(edges between clients are lost). :func:`client_data` splits each client's labelled nodes
into train, validation and test, and :func:`noisy_labels` corrupts the train and validation
labels alike (a client has no clean labels to tune on).
"""

from __future__ import annotations

import math
import pickle
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx
import numpy as np
import scipy.sparse as sp

from .choices import NOISES, PLANETOID

_PARTS = ("x", "y", "tx", "ty", "allx", "ally", "graph")


@dataclass(frozen=True)
class Graph:
    features: np.ndarray  # (n, f) float32, rows sum to one (or zero)
    labels: np.ndarray  # (n,) int64, -1 where a node has no label
    edges: np.ndarray  # (2, m) int64, undirected, each once with i < j, no self loops
    num_classes: int
    name: str

    @property
    def num_nodes(self) -> int:
        return len(self.labels)


def _unique_edges(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    lo, hi = np.minimum(src, dst), np.maximum(src, dst)
    keep = lo != hi
    pairs = np.unique(np.stack([lo[keep], hi[keep]], axis=1), axis=0)
    return pairs.T.astype(np.int64).reshape(2, -1)


def _row_normalize(x: np.ndarray) -> np.ndarray:
    sums = x.sum(axis=1, keepdims=True)
    return np.divide(x, sums, out=np.zeros_like(x), where=sums > 0).astype(np.float32)


def load_planetoid(name: str, root: str | Path) -> Graph:
    """Cora or CiteSeer from the Planetoid raw files in ``root``.

    The test nodes' rows (``tx``, ``ty``) go to the positions ``test.index`` names; CiteSeer's
    test indices have gaps (isolated nodes absent from ``tx``), which get zero features and
    no label (-1), instead of the class 0 that filling with zero rows would give them.
    """
    if name not in PLANETOID:
        raise ValueError(f"unknown Planetoid graph {name!r}; allowed: {', '.join(PLANETOID)}")
    root = Path(root)
    missing = [f"ind.{name}.{p}" for p in (*_PARTS, "test.index") if not (root / f"ind.{name}.{p}").exists()]
    if missing:
        raise FileNotFoundError(f"Planetoid files missing in {root}: {', '.join(missing)}")
    parts = {}
    for part in _PARTS:
        with open(root / f"ind.{name}.{part}", "rb") as f, warnings.catch_warnings():
            # the pickles name SciPy's old module paths (scipy.sparse.csr), which SciPy still reads but warns about
            warnings.simplefilter("ignore", DeprecationWarning)
            parts[part] = pickle.load(f, encoding="latin1")  # written by Python 2
    test_index = np.array([int(line) for line in (root / f"ind.{name}.test.index").read_text().split()])
    allx, tx = sp.csr_matrix(parts["allx"]), sp.csr_matrix(parts["tx"])
    ally, ty = np.asarray(parts["ally"]), np.asarray(parts["ty"])
    test_sorted = np.sort(test_index)
    span = test_sorted[-1] - test_sorted[0] + 1
    # every index from the first to the last test node has a row; the gaps stay empty
    tx_full = sp.lil_matrix((span, tx.shape[1]), dtype=np.float32)
    tx_full[test_sorted - test_sorted[0], :] = tx
    ty_full = np.zeros((span, ty.shape[1]))
    ty_full[test_sorted - test_sorted[0]] = ty
    features = sp.vstack([allx, tx_full.tocsr()]).tolil()
    onehot = np.vstack([ally, ty_full])
    features[test_index, :] = features[test_sorted, :]  # the files hold test rows in sorted order
    onehot[test_index] = onehot[test_sorted]
    labels = np.where(onehot.sum(axis=1) > 0, onehot.argmax(axis=1), -1).astype(np.int64)
    src, dst = [], []
    for node, neighbours in parts["graph"].items():
        for other in neighbours:
            src.append(node)
            dst.append(other)
    edges = _unique_edges(np.array(src), np.array(dst))
    n = len(labels)
    if edges.size and edges.max() >= n:
        raise ValueError(f"{name}: the graph names node {edges.max()}, but there are {n} feature rows")
    return Graph(_row_normalize(features.toarray().astype(np.float32)), labels, edges, onehot.shape[1], name)


def csbm(num_nodes: int = 2000, num_classes: int = 5, num_features: int = 128, avg_degree: float = 8.0,
         homophily: float = 0.8, signal: float = 1.0, seed: int = 0) -> Graph:
    """A contextual stochastic block model graph: uniform class labels; an edge within a class
    with probability ``avg_degree * homophily / (n / C)``, across classes ``avg_degree * (1 -
    homophily) / (n - n / C)``; features = ``signal`` times a random unit class mean plus
    standard normal noise of scale ``1 / sqrt(f)`` per entry."""
    if not 0.0 <= homophily <= 1.0:
        raise ValueError(f"homophily must be in [0, 1], got {homophily}")
    if num_classes < 2 or num_nodes < 2 * num_classes:
        raise ValueError(f"need at least 2 classes and 2 nodes per class, got {num_classes} classes, {num_nodes} nodes")
    rng = np.random.default_rng([seed, num_nodes, num_classes])
    labels = rng.integers(0, num_classes, num_nodes)
    block = num_nodes / num_classes
    p_in, p_out = avg_degree * homophily / block, avg_degree * (1 - homophily) / (num_nodes - block)
    i, j = np.triu_indices(num_nodes, k=1)
    same = labels[i] == labels[j]
    keep = rng.random(len(i)) < np.where(same, p_in, p_out)
    means = rng.normal(size=(num_classes, num_features))
    means /= np.linalg.norm(means, axis=1, keepdims=True)
    features = signal * means[labels] + rng.normal(size=(num_nodes, num_features)) / math.sqrt(num_features)
    return Graph(features.astype(np.float32), labels.astype(np.int64), np.stack([i[keep], j[keep]]).astype(np.int64),
                 num_classes, f"csbm-h{homophily:g}")


def load_graph(name: str, planetoid_root: str | Path, seed: int = 0) -> Graph:
    """A graph by name: ``csbm`` (the default CSBM graph, drawn from ``seed``) or a Planetoid
    graph read from ``planetoid_root``."""
    if name == "csbm":
        return csbm(seed=seed)
    return load_planetoid(name, planetoid_root)


def louvain_clients(graph: Graph, clients: int, seed: int = 0) -> list[np.ndarray]:
    """Each client's node ids (sorted): Louvain communities, largest first, each to the client
    with the fewest nodes so far (while there are fewer communities than clients, the largest
    is halved)."""
    if clients < 1:
        raise ValueError(f"clients must be at least 1, got {clients}")
    g = nx.Graph()
    g.add_nodes_from(range(graph.num_nodes))
    g.add_edges_from(graph.edges.T.tolist())
    communities = [sorted(c) for c in nx.community.louvain_communities(g, seed=seed)]
    while len(communities) < clients:
        # Fewer communities than clients (a CSBM graph has one per class): halve the largest along
        # a breadth-first order, so each half stays mostly connected.
        largest = max(communities, key=len)
        if len(largest) < 2:
            raise ValueError(f"a graph of {graph.num_nodes} nodes cannot be split into {clients} clients")
        communities.remove(largest)
        order = list(nx.bfs_tree(g.subgraph(largest), largest[0]))
        order += [v for v in largest if v not in set(order)]
        communities += [order[:len(order) // 2], order[len(order) // 2:]]
    communities.sort(key=lambda c: (-len(c), min(c)))
    members: list[list[int]] = [[] for _ in range(clients)]
    for community in communities:
        smallest = min(range(clients), key=lambda c: (len(members[c]), c))
        members[smallest].extend(community)
    return [np.array(sorted(m), dtype=np.int64) for m in members]


def subgraph_edges(graph: Graph, nodes: np.ndarray) -> np.ndarray:
    """The edges among ``nodes``, renumbered to positions in ``nodes``."""
    position = np.full(graph.num_nodes, -1, dtype=np.int64)
    position[nodes] = np.arange(len(nodes))
    a, b = position[graph.edges[0]], position[graph.edges[1]]
    keep = (a >= 0) & (b >= 0)
    return np.stack([a[keep], b[keep]])


def noisy_labels(labels: np.ndarray, rate: float, kind: str, num_classes: int, rng: np.random.Generator) -> np.ndarray:
    """``labels`` with a fraction ``rate`` flipped: ``uniform`` to any other class, ``pair`` to the next class."""
    if kind not in NOISES:
        raise ValueError(f"unknown label noise {kind!r}; allowed: {', '.join(NOISES)}")
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"noise rate must be in [0, 1), got {rate}")
    out = labels.copy()
    flip = rng.random(len(labels)) < rate
    if kind == "pair":
        out[flip] = (labels[flip] + 1) % num_classes
    else:
        shift = rng.integers(1, num_classes, len(labels))
        out[flip] = (labels[flip] + shift[flip]) % num_classes
    return out


def client_rates(rate: float, clients: int) -> list[float]:
    """Heterogeneous per-client noise rates with mean ``rate``: evenly spaced from 0.5 to 1.5
    times it (clients differ in how noisy their annotators are)."""
    if clients == 1:
        return [rate]
    return [min(rate * (0.5 + i / (clients - 1)), 0.95) for i in range(clients)]


@dataclass(frozen=True)
class ClientGraph:
    """One client's subgraph: features, edges, true labels, and its noisy train labels."""

    features: np.ndarray
    edges: np.ndarray
    labels: np.ndarray  # the truth: test accuracy and filter diagnostics only, never trained on
    train: np.ndarray  # positions of the labelled training nodes
    test: np.ndarray  # positions of the test nodes (true labels)
    noisy: np.ndarray  # the train labels as the client sees them (aligned with ``train``)
    noise_rate: float
    val: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # positions of the validation nodes
    val_noisy: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # their labels as seen (noisy)

    @property
    def unlabelled(self) -> np.ndarray:
        mask = np.ones(len(self.labels), dtype=bool)
        mask[self.train] = False
        return np.flatnonzero(mask)


def client_data(graph: Graph, clients: int, *, noise: str = "uniform", rate: float = 0.0, train_fraction: float = 0.4,
                test_fraction: float = 0.4, val_fraction: float = 0.0, seed: int = 0) -> list[ClientGraph]:
    """Louvain clients of ``graph``; each client's labelled nodes split at random into train
    (``train_fraction``, labels corrupted at its rate from :func:`client_rates`), test
    (``test_fraction``, true labels), validation (``val_fraction``, labels corrupted at the same
    rate as train, drawn independently) and the rest unlabelled. Validation takes its nodes
    after train and test, so adding it leaves those splits and the train noise as they were."""
    fractions = {"train_fraction": train_fraction, "test_fraction": test_fraction, "val_fraction": val_fraction}
    for name, value in fractions.items():
        if not 0 <= value <= 1 or (value == 0 and name != "val_fraction"):
            raise ValueError(f"{name} must be in {'[0' if name == 'val_fraction' else '(0'}, 1], got {value}")
    if train_fraction + test_fraction + val_fraction > 1 + 1e-9:
        raise ValueError(f"train_fraction + test_fraction + val_fraction must be at most 1, got "
                         f"{train_fraction} + {test_fraction} + {val_fraction}")
    parts = louvain_clients(graph, clients, seed)
    out = []
    for c, (nodes, client_rate) in enumerate(zip(parts, client_rates(rate, clients))):
        rng = np.random.default_rng([seed, c, 7])
        labels = graph.labels[nodes]
        labelled = rng.permutation(np.flatnonzero(labels >= 0))
        n_train, n_test = round(train_fraction * len(labelled)), round(test_fraction * len(labelled))
        n_val = round(val_fraction * len(labelled))
        train, test = np.sort(labelled[:n_train]), np.sort(labelled[n_train:n_train + n_test])
        val = np.sort(labelled[n_train + n_test:n_train + n_test + n_val])
        noisy = noisy_labels(labels[train], client_rate, noise, graph.num_classes, rng)
        val_noisy = noisy_labels(labels[val], client_rate, noise, graph.num_classes, rng)
        out.append(ClientGraph(graph.features[nodes], subgraph_edges(graph, nodes), labels, train, test, noisy,
                               client_rate, val, val_noisy))
    return out
