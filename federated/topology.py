"""Communication graphs for gossip and their mixing matrices.

A graph is a set of undirected edges ``(i, j)``, ``i < j``, over vertices ``0..n-1``.
Mixing uses lazy Metropolis weights over the edges that are live this round:
``W[i, j] = 1 / (2 max(deg i, deg j))`` on an edge, ``W[i, i] = 1 - sum_j W[i, j]``. The
matrix is symmetric with rows summing to one, so doubly stochastic on any subgraph, and
the laziness (``W[i, i] >= 1/2``) keeps every eigenvalue in [0, 1].
"""

from __future__ import annotations

import math

import numpy as np

TOPOLOGIES = ("ring", "hypercube", "exponential", "random", "complete")

Edge = tuple[int, int]


def _edge(a: int, b: int) -> Edge:
    return (a, b) if a < b else (b, a)


def graph(name: str, n: int, *, seed: int = 0, degree: int = 3) -> set[Edge]:
    """The edges of topology ``name`` on ``n`` vertices.

    ring: i ~ i+1; hypercube (n a power of two): i ~ i xor 2^k; exponential: i ~ i + 2^k
    (mod n) for 2^k < n; random: a seeded random graph with about ``degree`` edges per
    vertex, built on a ring so it is connected; complete: every pair.
    """
    if n < 2:
        raise ValueError(f"a communication graph needs at least 2 vertices, got {n}")
    if name == "ring":
        return {_edge(i, (i + 1) % n) for i in range(n)}
    if name == "hypercube":
        if n & (n - 1):
            raise ValueError(f"hypercube needs a power-of-two number of clients, got {n}")
        return {_edge(i, i ^ (1 << k)) for i in range(n) for k in range(int(math.log2(n)))}
    if name == "exponential":
        return {_edge(i, (i + (1 << k)) % n) for i in range(n) for k in range((n - 1).bit_length())}
    if name == "random":
        rng = np.random.default_rng([seed, n, degree])
        edges = graph("ring", n)
        extra = max(0, round(n * degree / 2) - len(edges))
        candidates = [(i, j) for i in range(n) for j in range(i + 1, n) if (i, j) not in edges]
        picked = rng.choice(len(candidates), size=min(extra, len(candidates)), replace=False) if candidates else []
        return edges | {candidates[k] for k in picked}
    if name == "complete":
        return {(i, j) for i in range(n) for j in range(i + 1, n)}
    raise ValueError(f"unknown topology {name!r}; allowed: {', '.join(TOPOLOGIES)}")


def lazy_metropolis(n: int, edges: set[Edge]) -> np.ndarray:
    """The (n, n) lazy Metropolis mixing matrix over ``edges`` (vertices without edges keep their value)."""
    degree = np.zeros(n, dtype=np.int64)
    for a, b in edges:
        degree[a] += 1
        degree[b] += 1
    w = np.zeros((n, n))
    for a, b in edges:
        w[a, b] = w[b, a] = 1.0 / (2.0 * max(degree[a], degree[b]))
    w[np.diag_indices(n)] = 1.0 - w.sum(axis=1)
    return w


def exact_average(n: int) -> np.ndarray:
    """Exact averaging as a mixing matrix: every entry ``1 / n``."""
    return np.full((n, n), 1.0 / n)


def is_doubly_stochastic(w: np.ndarray, tol: float = 1e-12) -> bool:
    return bool((w >= -tol).all() and np.allclose(w.sum(0), 1.0, atol=tol) and np.allclose(w.sum(1), 1.0, atol=tol))


def spectral_gap(w: np.ndarray) -> float:
    """1 - the second largest eigenvalue modulus of a symmetric mixing matrix: how fast it mixes."""
    moduli = np.sort(np.abs(np.linalg.eigvalsh(w)))[::-1]
    return float(1.0 - moduli[1]) if len(moduli) > 1 else 1.0
