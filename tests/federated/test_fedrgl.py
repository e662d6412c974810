"""FedRGL and its graphs: the Planetoid loader, CSBM graphs, Louvain clients, label noise, the
dual-consistency filter, and the methods end to end on the in-process engine."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from edgekit.federated.fedrgl import (
    GraphSettings,
    aggregation_weights,
    build_gcn,
    class_threshold_pass,
    dual_consistency_filter,
    local_round,
    normalized_adjacency,
    run_graph,
    tune,
)
from edgekit.federated.fedrgl import test_accuracy as accuracy_on  # not named test_*: pytest would collect it
from edgekit.federated.graphs import (
    client_data,
    client_rates,
    csbm,
    load_planetoid,
    louvain_clients,
    noisy_labels,
)
from edgekit.federated.workload import parameters_of

PLANETOID_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "planetoid"


@pytest.mark.skipif(not (PLANETOID_DIR / "ind.cora.x").exists(),
                    reason=f"the Planetoid raw files are not at {PLANETOID_DIR}")
def test_planetoid_loader():
    cora = load_planetoid("cora", PLANETOID_DIR)
    assert cora.features.shape == (2708, 1433) and cora.num_classes == 7 and cora.edges.shape == (2, 5278)
    assert np.bincount(cora.labels).tolist() == [351, 217, 418, 818, 426, 298, 180]
    assert np.allclose(cora.features.sum(1), 1.0)  # row-normalized bag of words
    assert (cora.edges[0] < cora.edges[1]).all()  # each undirected edge once
    citeseer = load_planetoid("citeseer", PLANETOID_DIR)
    assert citeseer.features.shape == (3327, 3703) and citeseer.edges.shape == (2, 4552)
    # the 15 isolated test nodes absent from tx: no features and no label, not class 0
    assert (citeseer.labels == -1).sum() == 15 and not citeseer.features[citeseer.labels == -1].any()
    with pytest.raises(ValueError, match="unknown Planetoid graph 'pubmed'; allowed: cora, citeseer"):
        load_planetoid("pubmed", PLANETOID_DIR)


def test_missing_planetoid_files_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=f"Planetoid files missing in {tmp_path}: ind.cora.x"):
        load_planetoid("cora", tmp_path)


def test_csbm_and_louvain_clients():
    g = csbm(600, 3, 32, avg_degree=8, homophily=0.9, seed=1)
    same = g.labels[g.edges[0]] == g.labels[g.edges[1]]
    assert 0.85 < same.mean() < 0.95 and 6.5 < 2 * g.edges.shape[1] / 600 < 9.5
    assert np.array_equal(csbm(600, 3, 32, homophily=0.9, seed=1).edges, g.edges)
    parts = louvain_clients(g, 5, seed=0)
    everything = np.concatenate(parts)
    assert len(everything) == 600 and len(np.unique(everything)) == 600
    # Louvain finds the 3 blocks; the largest is halved until there are 5: about 200, 100, 100, 100, 100
    sizes = sorted(map(len, parts))
    assert sizes[0] > 80 and sizes[3] < 130 and 170 < sizes[4] < 230
    clients = client_data(g, 5, rate=0.4, seed=0)
    kept = sum(c.edges.shape[1] for c in clients)
    assert 0.5 * g.edges.shape[1] < kept < g.edges.shape[1]  # Louvain cuts few edges, but some
    for c in clients:
        assert c.edges.max() < len(c.labels) and not set(c.train) & set(c.test)
    with pytest.raises(ValueError, match="homophily must be in \\[0, 1\\], got 1.5"):
        csbm(homophily=1.5)


def test_label_noise():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 5, 20000)
    uniform = noisy_labels(labels, 0.3, "uniform", 5, rng)
    pair = noisy_labels(labels, 0.3, "pair", 5, rng)
    assert abs((uniform != labels).mean() - 0.3) < 0.015 and abs((pair != labels).mean() - 0.3) < 0.015
    flipped = pair != labels
    assert (pair[flipped] == (labels[flipped] + 1) % 5).all()
    assert len(np.unique(uniform[uniform != labels] - labels[uniform != labels])) > 4  # any other class
    assert client_rates(0.4, 5) == pytest.approx([0.2, 0.3, 0.4, 0.5, 0.6])
    with pytest.raises(ValueError, match="unknown label noise 'flip'; allowed: uniform, pair"):
        noisy_labels(labels, 0.3, "flip", 5, rng)


def test_the_filter_keeps_mostly_clean_nodes():
    losses = np.array([0.1, 0.2, 3.0, 0.1, 0.3, 5.0])
    labels = np.array([0, 0, 0, 1, 1, 1])
    assert class_threshold_pass(losses, labels, 0.0).tolist() == [True, True, False, True, True, False]
    # a GCN trained on clean labels of one client, then its noisy labels filtered
    g = csbm(800, 4, 32, homophily=0.85, signal=1.5, seed=2)
    [data] = client_data(g, 1, noise="uniform", rate=0.4, seed=0)
    settings = GraphSettings()
    model = build_gcn(32, 4, settings)
    x, adj = torch.from_numpy(data.features), normalized_adjacency(data.edges, len(data.labels))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    for _ in range(60):
        optimizer.zero_grad()
        F.cross_entropy(model(x, adj)[data.train], torch.from_numpy(data.labels[data.train])).backward()
        optimizer.step()
    clean = dual_consistency_filter(model, x, adj, data.train, data.noisy, settings)
    truly = data.noisy == data.labels[data.train]
    assert truly.mean() < 0.65  # the noise is there
    assert truly[clean].mean() > 0.9 and clean[truly].mean() > 0.6  # and the filter removes most of it


def test_methods_end_to_end_on_the_engine():
    g = csbm(500, 3, 24, homophily=0.85, signal=1.2, seed=3)
    clients = client_data(g, 4, noise="pair", rate=0.3, seed=0)
    results = {}
    for method in ("fedavg", "fedprox", "fedavg+filter", "fedrgl"):
        result, grid = run_graph(GraphSettings(method=method, warmup=3), clients, g.num_classes, 6)
        records = result.records[1:]
        assert all(r.used == [0, 1, 2, 3] for r in records)
        assert records[-1].metrics["eval"]["accuracy"] > 0.6  # three classes: chance is about 1/3
        assert grid.bytes.down and grid.bytes.up and records[-1].sim_time > 0
        results[method] = result
    rgl = results["fedrgl"].records
    assert "clean_fraction" not in rgl[3].metrics and 0 < rgl[4].metrics["clean_fraction"] < 1  # filters after warm-up
    weights = rgl[4].metrics["weights"]
    assert sum(weights) == pytest.approx(1.0, abs=1e-3) and len(set(weights)) > 1  # inverse entropy, not counts
    assert results["fedavg+filter"].records[1].metrics["filter_precision"] > 0
    again, _ = run_graph(GraphSettings(method="fedrgl", warmup=3), clients, g.num_classes, 6)
    assert all(np.array_equal(again.final[k], results["fedrgl"].final[k]) for k in again.final)  # seeded
    with pytest.raises(ValueError, match="unknown graph method 'gat'; allowed: fedavg, fedprox, fedavg\\+filter, fedrgl"):
        GraphSettings(method="gat")
    with pytest.raises(TypeError, match="mu must be float, got '0.01'"):
        GraphSettings(mu="0.01")  # from a ConfigRecord: refused at once, not by every client every round
    with pytest.raises(TypeError, match="hidden must be int, got 2.5"):
        GraphSettings(hidden=2.5)
    with pytest.raises(ValueError, match="fedrgl_mu must be non-negative, got -0.1"):
        GraphSettings(fedrgl_mu=-0.1)
    with pytest.raises(ValueError, match="lr must be positive, got 0"):
        GraphSettings(lr=0)


def test_proximal_term_of_each_method():
    assert [GraphSettings(method=m).proximal_weight for m in ("fedavg", "fedavg+filter", "fedprox", "fedrgl")] == \
        [0.0, 0.0, 0.01, 0.0]
    # the term pulls a round's update towards the global model: the weaker the term, the further it goes
    g = csbm(300, 3, 24, homophily=0.85, signal=1.2, seed=4)
    [data] = client_data(g, 1, noise="pair", rate=0.2, seed=0)
    start = parameters_of(build_gcn(24, 3, GraphSettings()))
    drift = {mu: sum(float(np.sum((local_round(data, start, GraphSettings(fedrgl_mu=mu, warmup=0), 1, 0).params[k]
                                   - start[k]) ** 2)) for k in start)
             for mu in (0.0, 0.001, 1.0)}
    assert drift[0.0] > drift[0.001] > drift[1.0]


def test_entropy_weights_scale_with_client_size_and_are_tempered():
    # a small, very confident client (low entropy) and two large ones
    metrics = [{"train_nodes": 20, "entropy": 0.05}, {"train_nodes": 200, "entropy": 0.8}, {"train_nodes": 200, "entropy": 1.0}]
    raw = GraphSettings(entropy_reference="none")
    weights = aggregation_weights(metrics, raw, server_round=20)
    expected = np.array([20 / 0.05 ** 0.5, 200 / 0.8 ** 0.5, 200 / 1.0 ** 0.5])
    assert weights == pytest.approx(expected / expected.sum())
    assert weights[0] < 0.2 and weights[1] > weights[2]  # it cannot dominate, yet confidence still counts
    untempered = aggregation_weights(metrics, GraphSettings(entropy_reference="none", entropy_power=1.0), server_round=20)
    assert untempered[0] > weights[0]
    counts = np.array([20, 200, 200]) / 420
    assert aggregation_weights(metrics, raw, server_round=5) == pytest.approx(counts)  # warm-up: FedAvg
    assert aggregation_weights(metrics, GraphSettings(entropy_weighting=False), server_round=20) == pytest.approx(counts)
    assert aggregation_weights(metrics, GraphSettings(method="fedavg"), server_round=20) == pytest.approx(counts)


def test_entropy_is_measured_against_the_predicted_class_distribution():
    # equal sizes; the first client predicts almost one class (low entropy: skew, not quality),
    # the second is as sure of each node but spreads over all classes, the third is unsure
    metrics = [{"train_nodes": 100, "entropy": 0.2, "predicted_entropy": 0.4},
               {"train_nodes": 100, "entropy": 0.8, "predicted_entropy": 1.6},
               {"train_nodes": 100, "entropy": 1.5, "predicted_entropy": 1.9}]
    weights = aggregation_weights(metrics, GraphSettings(), server_round=20)
    expected = np.array([(0.2 / 0.4) ** -0.5, (0.8 / 1.6) ** -0.5, (1.5 / 1.9) ** -0.5])
    assert weights == pytest.approx(expected / expected.sum())
    assert weights[0] == pytest.approx(weights[1]) and weights[2] < weights[1]
    raw = aggregation_weights(metrics, GraphSettings(entropy_reference="none"), server_round=20)
    assert raw[0] > 1.5 * raw[1]  # without the reference the skewed client counts double
    with pytest.raises(ValueError, match="unknown entropy reference 'labels'; allowed: none, predicted"):
        GraphSettings(entropy_reference="labels")


def test_local_training_keeps_the_weights_of_features_a_client_lacks():
    # one client's features never use the last 8 columns: its round must leave their weights
    # alone (L2 through Adam would shrink each by about lr every epoch)
    g = csbm(300, 3, 24, homophily=0.85, signal=1.2, seed=4)
    [data] = client_data(g, 1, noise="pair", rate=0.2, seed=0)
    features = data.features.copy()
    features[:, 16:] = 0.0
    data = replace(data, features=features)
    for method in ("fedavg", "fedrgl"):
        settings = GraphSettings(method=method, warmup=0)
        start = {k: v.copy() for k, v in parameters_of(build_gcn(24, 3, settings)).items()}
        after = local_round(data, start, settings, server_round=1, partition=0)
        assert np.array_equal(after.params["conv1.weight"][:, 16:], start["conv1.weight"][:, 16:])
        assert not np.array_equal(after.params["conv1.weight"][:, :16], start["conv1.weight"][:, :16])
        assert after.metrics["entropy"] <= after.metrics["predicted_entropy"] + 1e-6  # mean of H <= H of the mean
    decayed = local_round(data, start, GraphSettings(weight_decay=5e-4), server_round=1, partition=0)
    assert not np.array_equal(decayed.params["conv1.weight"][:, 16:], start["conv1.weight"][:, 16:])


def test_validation_split_is_disjoint_and_as_noisy_as_train():
    g = csbm(3000, 4, 16, homophily=0.85, seed=5)
    clients = client_data(g, 2, noise="uniform", rate=0.4, val_fraction=0.2, seed=0)
    without = client_data(g, 2, noise="uniform", rate=0.4, seed=0)
    for c, old in zip(clients, without):
        assert not (set(c.val) & set(c.train)) and not (set(c.val) & set(c.test))
        labelled = len(c.train) + len(c.test) + len(c.val)
        assert abs(len(c.val) - 0.2 * labelled) <= 1
        # the validation labels are flipped at the client's rate, like the train labels
        val_rate, train_rate = (c.val_noisy != c.labels[c.val]).mean(), (c.noisy != c.labels[c.train]).mean()
        assert abs(val_rate - c.noise_rate) < 0.06 and abs(train_rate - c.noise_rate) < 0.05
        # adding validation leaves train, test and the train noise as they were
        assert np.array_equal(c.train, old.train) and np.array_equal(c.test, old.test)
        assert np.array_equal(c.noisy, old.noisy) and len(old.val) == 0
    with pytest.raises(ValueError, match="train_fraction \\+ test_fraction \\+ val_fraction must be at most 1"):
        client_data(g, 2, val_fraction=0.3)
    with pytest.raises(ValueError, match="val_fraction must be in \\[0, 1\\], got -0.1"):
        client_data(g, 2, val_fraction=-0.1)


def test_validation_scores_noisy_labels_and_never_test_labels():
    g = csbm(400, 3, 16, homophily=0.9, signal=1.5, seed=6)
    clients = client_data(g, 2, noise="pair", rate=0.4, val_fraction=0.2, seed=0)
    model = build_gcn(16, 3, GraphSettings())
    truth = [replace(c, val_noisy=c.labels[c.val]) for c in clients]
    assert accuracy_on(model, clients, "validation") != accuracy_on(model, truth, "validation")
    poisoned = [replace(c, labels=np.where(np.isin(np.arange(len(c.labels)), c.test), 0, c.labels)) for c in clients]
    assert accuracy_on(model, clients, "validation") == accuracy_on(model, poisoned, "validation")
    assert accuracy_on(model, clients) != accuracy_on(model, poisoned)  # the poison does reach the test score
    with pytest.raises(ValueError, match="unknown evaluation split 'train'; allowed: test, validation"):
        accuracy_on(model, clients, "train")
    with pytest.raises(ValueError, match="no client has validation nodes"):
        accuracy_on(model, client_data(g, 2, seed=0), "validation")


def test_tuning_reads_no_test_label():
    g = csbm(400, 3, 16, homophily=0.9, signal=1.2, seed=7)
    clients = client_data(g, 2, noise="pair", rate=0.3, val_fraction=0.2, seed=0)
    candidates = [GraphSettings(method="fedavg", lr=lr) for lr in (0.2, 0.005)]
    best, scores = tune(candidates, clients, g.num_classes, rounds=3, last=2)
    assert len(scores) == 2 and scores[0] != scores[1] and best == int(np.argmax(scores))
    # test labels scrambled: the same choice, the same validation scores
    rng = np.random.default_rng(0)
    poisoned = [replace(c, labels=np.where(np.isin(np.arange(len(c.labels)), c.test),
                                           rng.integers(0, 3, len(c.labels)), c.labels)) for c in clients]
    assert tune(candidates, poisoned, g.num_classes, rounds=3, last=2) == (best, scores)
    with pytest.raises(ValueError, match="unknown evaluate_on 'test-set'; allowed: test, validation"):
        run_graph(candidates[0], clients, g.num_classes, 1, evaluate_on="test-set")
