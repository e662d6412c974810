import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgekit.federated.topology import (
    TOPOLOGIES,
    exact_average,
    graph,
    is_doubly_stochastic,
    lazy_metropolis,
    spectral_gap,
)


def degrees(n, edges):
    d = np.zeros(n, int)
    for a, b in edges:
        d[a] += 1
        d[b] += 1
    return d


def test_graph_shapes():
    assert set(degrees(8, graph("ring", 8))) == {2}
    assert set(degrees(8, graph("hypercube", 8))) == {3}
    assert set(degrees(8, graph("exponential", 8))) == {5}  # +-1, +-2, 4 (its own inverse)
    assert len(graph("complete", 5)) == 10
    random = graph("random", 12, seed=4, degree=4)
    assert graph("ring", 12) <= random and len(random) == 24 and random == graph("random", 12, seed=4, degree=4)
    with pytest.raises(ValueError, match="hypercube needs a power-of-two number of clients, got 6"):
        graph("hypercube", 6)
    with pytest.raises(ValueError, match="unknown topology 'star'; allowed: ring, hypercube"):
        graph("star", 4)


@given(st.sampled_from([t for t in TOPOLOGIES if t != "hypercube"]), st.integers(2, 12),
       st.lists(st.booleans(), min_size=66, max_size=66))
def test_metropolis_is_doubly_stochastic_over_any_live_links(name, n, alive):
    edges = sorted(graph(name, n, seed=1))
    live = {e for e, up in zip(edges, alive) if up}
    w = lazy_metropolis(n, live)
    assert is_doubly_stochastic(w) and np.allclose(w, w.T)
    assert (np.diag(w) >= 0.5 - 1e-12).all()  # lazy: every eigenvalue in [0, 1]
    assert np.linalg.eigvalsh(w).min() > -1e-12
    off = {(a, b) for a in range(n) for b in range(a + 1, n) if w[a, b] > 0}
    assert off == live  # weight only on live links


def test_mixing_speed_and_exact_average():
    n = 8
    gaps = {name: spectral_gap(lazy_metropolis(n, graph(name, n))) for name in ("ring", "hypercube", "exponential")}
    assert 0 < gaps["ring"] < gaps["hypercube"] <= gaps["exponential"]
    assert spectral_gap(exact_average(n)) == pytest.approx(1.0)
    x = np.arange(n, dtype=float)
    assert np.allclose(exact_average(n) @ x, x.mean())
    assert not is_doubly_stochastic(np.array([[0.6, 0.4], [0.6, 0.4]]))
