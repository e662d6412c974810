"""RieSelect: the knapsack, the Fisher safe step, and selective uplink against its baselines on the engine."""

import itertools

import numpy as np
import pytest
import torch
from flwr.app import ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from torch import nn
from torch.nn import functional as F

from edgekit.federated.compression import packed_nbytes, to_record
from edgekit.federated.inproc_grid import InProcessGrid
from edgekit.federated.records import check_update
from edgekit.federated.rieselect import (
    FISHER_COMPRESSION,
    ContinualFL,
    ContinualSettings,
    ContinualWorkload,
    client_round,
    fisher_diagonal,
    fisher_shards,
    greedy_fill,
    knapsack,
    layer_utilities,
    penalty_by_task,
    round_share,
    run_continual,
    safe_step,
)
from edgekit.federated.workload import parameters_of

from .toy import toy_continual


def test_knapsack_is_optimal():
    rng = np.random.default_rng(0)
    for _ in range(30):
        n = int(rng.integers(1, 8))
        values = rng.normal(size=n).tolist()
        sizes = (rng.integers(1, 6, n) * 256).tolist()
        budget = int(rng.integers(0, 16)) * 256
        best = max((sum(values[i] for i in s), s) for r in range(n + 1) for s in itertools.combinations(range(n), r)
                   if sum(sizes[i] for i in s) <= budget)
        chosen = knapsack(values, sizes, budget)
        assert sum(sizes[i] for i in chosen) <= budget
        assert sum(values[i] for i in chosen) == pytest.approx(best[0])
    assert greedy_fill([2, 0, 1], [5, 3, 4], 9) == [0, 2]  # 4 fits, 5 does not, 3 does


def test_safe_step_bounds_the_penalty_growth_of_one_step():
    rng = np.random.default_rng(1)
    params, anchor = {"w": rng.normal(size=50)}, {"w": rng.normal(size=50) * 0.01}
    fisher, direction = {"w": rng.random(50)}, {"w": rng.normal(size=50)}
    anchors = [(fisher, anchor)]

    def penalty(eta):
        return 0.5 * float(np.sum(fisher["w"] * (params["w"] + eta * direction["w"] - anchor["w"]) ** 2))

    now = penalty(0.0)
    eta = safe_step(params, direction, anchors, slack=1.0)
    assert 0 < eta < 1 and penalty(eta) == pytest.approx(now + 1.0)  # capped exactly at this round's bound
    assert safe_step(params, direction, anchors, slack=1e9) == 1.0  # a loose bound: the whole step


def _random_quadratic(seed, tasks=3, n=40):
    rng = np.random.default_rng(seed)
    anchors = [({"w": rng.random(n), "v": rng.random(n) * 3}, {"w": rng.normal(size=n) * 0.1, "v": rng.normal(size=n)})
               for _ in range(tasks)]
    params = {"w": rng.normal(size=n) * 0.1, "v": rng.normal(size=n) * 0.3}
    return params, {k: rng.normal(size=n) for k in params}, anchors


def _moved(params, direction, eta):
    return {k: params[k] + eta * direction[k] for k in params}


@pytest.mark.parametrize("seed", range(20))
def test_the_certified_step_stays_in_the_fixed_basin_and_a_larger_one_leaves(seed):
    params, direction, anchors = _random_quadratic(seed)
    inside = sum(penalty_by_task(params, anchors))
    radius = inside * (1.05 + seed / 10)  # a model inside the basin, with room to move
    eta = safe_step(params, direction, anchors, radius - inside)
    after = sum(penalty_by_task(_moved(params, direction, eta), anchors))
    if eta == 1.0:
        assert after <= radius
    else:
        assert 0 < eta < 1 and after == pytest.approx(radius, rel=1e-9)  # on the boundary, under the quadratic P
        assert sum(penalty_by_task(_moved(params, direction, 1.01 * eta), anchors)) > radius
        assert all(sum(penalty_by_task(_moved(params, direction, e), anchors)) <= radius * (1 + 1e-12)
                   for e in np.linspace(0, eta, 9))  # and the whole segment up to it is inside


def test_on_the_fixed_basins_boundary_only_inward_steps_move():
    params, direction, anchors = _random_quadratic(0)
    radius = sum(penalty_by_task(params, anchors))
    gradient = {k: sum(f[k] * (params[k] - a[k]) for f, a in anchors) for k in params}  # of P
    outward = {k: direction[k] + gradient[k] * 10 for k in params}
    assert sum(float(np.sum(gradient[k] * outward[k])) for k in params) > 0
    assert safe_step(params, outward, anchors, 0.0) == 0.0  # the stall: a scaled step cannot slide along it
    inward = {k: -gradient[k] for k in params}
    eta = safe_step(params, inward, anchors, 0.0)
    assert eta > 0 and sum(penalty_by_task(_moved(params, inward, eta), anchors)) <= radius


def test_outside_the_fixed_basin_a_step_counts_only_where_it_re_enters():
    fisher, anchor = {"w": np.ones(2)}, {"w": np.zeros(2)}
    params = {"w": np.array([2.0, 0.0])}  # P = 2, radius 0.5: outside
    back = safe_step(params, {"w": np.array([-2.0, 0.0])}, [(fisher, anchor)], 0.5 - 2.0)
    assert back == 1.0  # lands on the anchor, P = 0
    across = safe_step(params, {"w": np.array([-4.0, 0.0])}, [(fisher, anchor)], 0.5 - 2.0)
    assert across == pytest.approx(0.75)  # the far edge of the basin, w = -1: P = 0.5
    assert safe_step(params, {"w": np.array([1.0, 0.0])}, [(fisher, anchor)], 0.5 - 2.0) == 0.0


def test_safe_step_keeps_learning_far_from_earlier_solutions():
    # "v" is far from its anchor (a fixed basin P <= 1 would be left already); the step moves only "w", outward
    fisher = {"w": np.ones(4), "v": np.ones(4)}
    anchor = {"w": np.zeros(4), "v": np.zeros(4)}
    params = {"w": np.full(4, 0.1), "v": np.full(4, 3.0)}
    eta = safe_step(params, {"w": np.ones(4)}, [(fisher, anchor)], slack=0.48)
    # "v" adds nothing to the growth; "w" grows by 2 (0.1 + eta)^2 - 0.02 = 0.48 at eta = 0.4
    assert eta == pytest.approx(0.4)
    assert safe_step(params, {"w": np.full(4, -0.1)}, [(fisher, anchor)], slack=0.48) == 1.0  # inward: uncapped


def test_fisher_is_the_hessian_of_the_per_prediction_loss():
    """A softmax classifier with labels drawn from itself: the Fisher equals the Hessian of the mean
    cross-entropy per prediction, E[p_k (1 - p_k) x_j^2], whatever the predictions per sample."""
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    x = torch.randn(4, 64, 8, 4, generator=torch.Generator().manual_seed(1))  # batches, samples, predictions, features
    with torch.no_grad():
        p = model(x).softmax(-1)
    labels = torch.multinomial(p.reshape(-1, 3), 1, generator=torch.Generator().manual_seed(2)).reshape(p.shape[:-1])

    def sample_losses(m, task, partition, step):
        return F.cross_entropy(m(x[-1 - step]).transpose(1, 2), labels[-1 - step], reduction="none").mean(1)

    workload = ContinualWorkload(lambda: model, sample_losses, lambda m, t: 0.0, 1, observations=8)
    fisher = fisher_diagonal(workload, model, 0, 0, batches=4)
    v, flat = (p * (1 - p)).reshape(-1, 3), x.reshape(-1, 4)
    hessian = {"weight": (v.T @ flat ** 2 / len(flat)).numpy(), "bias": v.mean(0).numpy()}
    for name, h in hessian.items():
        np.testing.assert_allclose(fisher[name], h, rtol=0.2)


def test_utility_is_the_loss_decrease_on_held_out_batches():
    from .toy import toy_continual

    workload = toy_continual(1)
    model = workload.build_model()
    start = parameters_of(model)
    rng = np.random.default_rng(0)
    delta = {n: (1e-3 * rng.normal(size=x.shape)).astype(np.float32) for n, x in start.items()}
    utility = layer_utilities(workload, model, start, delta, 0, 0, 1)
    keys = [-2000, -2001]  # the batches of round 1 that training never draws

    def loss(arrays):
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(torch.from_numpy(arrays[name]))
            return float(np.mean([float(workload.sample_losses(model, 0, 0, k).mean()) for k in keys]))

    base = loss(start)
    for name in ("0.weight", "4.weight"):  # a small step: each layer's value is its measured decrease
        measured = base - loss({**start, name: start[name] + delta[name]})
        assert utility[name] == pytest.approx(measured, rel=0.05, abs=1e-7)
    joint = base - loss({n: start[n] + delta[n] for n in start})
    assert sum(utility.values()) == pytest.approx(joint, rel=0.05)  # additive over layers


def test_utility_sums_to_the_exact_decrease_of_a_quadratic_loss():
    """Least squares is quadratic in the weights: the midpoint gradient gives the whole update's
    loss change exactly, however large the step, where the gradient at the start does not."""
    x = torch.randn(4, 32, 3, generator=torch.Generator().manual_seed(0))  # batches, samples, features
    y = x @ torch.tensor([1.0, -2.0, 0.5]) + 0.3

    def sample_losses(m, task, partition, step):
        return (m(x[step % 4])[:, 0] - y[step % 4]) ** 2

    model = nn.Linear(3, 1)
    workload = ContinualWorkload(lambda: model, sample_losses, lambda m, t: 0.0, 1)
    start = parameters_of(model)
    delta = {"weight": np.array([[1.5, -2.5, 1.0]], np.float32), "bias": np.array([0.8], np.float32)}
    utility = layer_utilities(workload, model, start, delta, 0, 0, 1)

    def loss(arrays):
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(torch.from_numpy(arrays[name]))
            return float(np.mean([float(sample_losses(model, 0, 0, k).mean()) for k in (-2000, -2001)]))

    exact = loss(start) - loss({n: start[n] + delta[n] for n in start})
    assert sum(utility.values()) == pytest.approx(exact, rel=1e-4)
    model.zero_grad()
    loss(start)  # puts start back into the model
    with torch.enable_grad():
        torch.stack([sample_losses(model, 0, 0, k).mean() for k in (-2000, -2001)]).mean().backward()
    first_order = -sum(float(np.sum(p.grad.numpy() * delta[n])) for n, p in model.named_parameters())
    assert abs(first_order - exact) > 0.1 * abs(exact)  # the step is large enough for curvature to matter


def test_fisher_shards_split_the_layers():
    shapes = {"a": (64, 64), "b": (64, 64), "c": (32, 64), "d": (32, 64), "e": (64,)}
    shards = fisher_shards(shapes, 2)
    assert sorted(n for shard in shards for n in shard) == sorted(shapes)  # every layer exactly once
    sizes = [sum(np.prod(shapes[n]) for n in shard) for shard in shards]
    assert max(sizes) - min(sizes) <= 64
    assert fisher_shards(shapes, 7)[5:] == [[], []]  # more clients than layers: some send none


def test_round_shares_split_the_model_and_rotate():
    shapes = {"a": (64, 64), "b": (64, 64), "c": (32, 64), "d": (32, 64), "e": (64,)}
    for server_round in (1, 2, 3):
        shares = [round_share(shapes, 3, p, server_round) for p in range(3)]
        assert sorted(n for share in shares for n in share) == sorted(shapes)  # disjoint, and they cover the model
    assert round_share(shapes, 3, 0, 2) == round_share(shapes, 3, 1, 1) != round_share(shapes, 3, 0, 1)


def test_coverage_aware_knapsacks_send_more_of_the_model():
    """Clients of the same model rank layers alike: independent knapsacks send the same layer,
    shares spread the budget over the model."""
    workload = toy_continual(2)
    start = parameters_of(workload.build_model())
    sent = {}
    for overlap in (1.0, 0.1):
        settings = ContinualSettings(clients=3, rounds_per_task=2, local_steps=4, budget_fraction=0.34,
                                     overlap_weight=overlap)
        union = set()
        for partition in range(3):
            context = Context(0, partition + 1, {"partition-id": partition, "num-partitions": 3}, RecordDict(), {})
            union |= set(client_round(workload, settings, context, start, 1)[0])
        sent[overlap] = union
    assert len(sent[1.0]) == 1 and len(sent[0.1]) >= 3
    # the ablation: coordinated random layers send the client's share first
    settings = ContinualSettings(selection="random", clients=3, rounds_per_task=2, local_steps=4, budget_fraction=0.34,
                                 coordinated=True)
    budget = 0.34 * sum(packed_nbytes(x.shape, "none") for x in start.values())
    shares = [round_share({n: x.shape for n, x in start.items()}, 3, partition, 1) for partition in range(3)]
    fitting = [p for p in range(3) if sum(packed_nbytes(start[n].shape, "none") for n in shares[p]) <= budget]
    assert len(fitting) == 2  # one share is a single layer too large to send
    for partition in fitting:
        context = Context(0, partition + 1, {"partition-id": partition, "num-partitions": 3}, RecordDict(), {})
        assert shares[partition] <= set(client_round(workload, settings, context, start, 1)[0])
    with pytest.raises(ValueError, match="overlap_weight"):
        ContinualSettings(overlap_weight=1.5)


def test_fisher_bytes_come_out_of_the_round_budget():
    from .toy import toy_continual

    workload = toy_continual(2)
    settings = ContinualSettings(clients=2, rounds_per_task=2, local_steps=2, budget_fraction=0.5)
    start = parameters_of(workload.build_model())
    budget = int(0.5 * sum(packed_nbytes(x.shape, "none") for x in start.values()))
    for partition in range(2):
        context = Context(0, partition + 1, {"partition-id": partition, "num-partitions": 2}, RecordDict(), {})
        client_round(workload, settings, context, start, 1)
        update, shard, _ = client_round(workload, settings, context, start, 3)  # the first round of task 1
        assert shard  # this client's part of the finished task's Fisher
        sent = (sum(packed_nbytes(x.shape, "none") for x in update.values())
                + sum(packed_nbytes(x.shape, FISHER_COMPRESSION) for x in shard.values()))
        assert 0 < sent <= budget


def test_the_server_squares_fisher_shards_and_ignores_malformed_ones(caplog):
    grid = InProcessGrid(ClientApp(), 2)
    initial = {"a": np.zeros(3, np.float32), "b": np.zeros(2, np.float32)}
    strategy = ContinualFL(initial, ContinualSettings(clients=2, rounds_per_task=5), 1.0)
    sent = strategy.configure_train(6, to_record(initial), ConfigRecord({}), grid)

    def reply(message, shard):
        return Message(RecordDict({"update": to_record({"a": np.ones(3)}), "metrics": MetricRecord({"layer_fraction": 0.5}),
                                   "fisher": to_record(shard, FISHER_COMPRESSION)}), reply_to=message)

    strategy.aggregate_train(6, [reply(sent[0], {"a": np.full(3, 0.5)}), reply(sent[1], {"b": np.ones(5)})])
    assert list(strategy.fishers[0]) == ["a"] and strategy.fishers[0]["a"] == pytest.approx(0.25)
    assert "Fisher shard from node" in caplog.text and "b: shape (5,), expected (2,)" in caplog.text


def test_partial_updates_pass_the_check_only_when_allowed():
    InProcessGrid(ClientApp(), 1)  # messages are made as the server makes them (it sets Flower's task identity)
    reference = {"a": np.zeros(3, np.float32), "b": np.zeros(2, np.float32)}
    message = Message(RecordDict(), 1, "train", group_id="1")
    reply = Message(RecordDict({"update": to_record({"a": np.ones(3, np.float32)}), "metrics": MetricRecord()}),
                    reply_to=message)
    assert check_update(reply, "update", reference, 1, partial=True)[1] is None
    assert "missing ['b']" in check_update(reply, "update", reference, 1)[1]
    extra = Message(RecordDict({"update": to_record({"c": np.ones(1, np.float32)})}), reply_to=message)
    assert "unexpected ['c']" in check_update(extra, "update", reference, 1, partial=True)[1]


def test_selective_uplink_on_the_engine():
    workload = toy_continual(3)
    runs = {}
    for name, kwargs in [("full", {}), ("random", {}), ("topk", {}), ("rieselect", {}),
                         ("capped", {"selection": "rieselect", "risk_weight": 0.0, "growth": 1e-3}),
                         ("fixed", {"selection": "rieselect", "risk_weight": 0.0, "basin": "fixed", "radius": 0.01})]:
        settings = ContinualSettings(**{"selection": name, **kwargs}, clients=3, rounds_per_task=3, local_steps=8,
                                     budget_fraction=0.5)
        result, _, summary = run_continual(settings, workload)
        assert all(r.used == [0, 1, 2] and not r.rejected for r in result.records[1:])  # partial updates pass
        runs[name] = (result, summary)
    full = runs["full"][1]
    for name in ("random", "topk", "rieselect", "capped", "fixed"):
        result, summary = runs[name]
        # half of each update (for RieSelect its Fisher shards included), plus framing
        assert summary["uplink_bytes"] < 0.7 * full["uplink_bytes"]
        assert all(r.metrics["layer_fraction"] < 1 for r in result.records[1:])
    for result, summary in runs.values():
        first = result.records[0].metrics["eval"]["task_losses"]
        assert summary["loss_when_learned"][0] < first[0]  # the first task was learned in its rounds
    # the Fisher cap: no cap while there is no earlier task, then steps shrink, and less is forgotten
    steps = [r.metrics["step"] for r in runs["capped"][0].records[1:]]
    assert steps[:3] == [1.0, 1.0, 1.0] and min(steps) < 0.5
    assert runs["capped"][1]["forgetting"] < 0.5 * full["forgetting"]
    # the fixed basin: P never leaves it, and once P reaches the radius the outward steps are refused
    fixed = runs["fixed"][1]
    assert max(fixed["penalties"]) <= 0.01 * (1 + 1e-6) and sum(fixed["penalty_by_task"]) <= 0.01 * (1 + 1e-6)
    assert fixed["steps"][:3] == [1.0, 1.0, 1.0] and fixed["steps"][-1] == 0.0


def test_lm_tasks_from_the_stdlib():
    from edgekit.jobs.fl import CONTINUAL_TASKS, continual_lm_workload

    workload = continual_lm_workload(2)
    assert workload.num_tasks == len(CONTINUAL_TASKS) == 3
    settings = ContinualSettings(clients=2, rounds_per_task=1, local_steps=2, budget_fraction=0.25)
    _, grid, summary = run_continual(settings, workload)
    # the packages differ: a model that has learned a little scores the tasks differently
    assert len(set(np.round(summary["task_losses"], 3))) == 3 and all(0 < x < 6 for x in summary["task_losses"])
    assert summary["uplink_bytes"] == sum(grid.bytes.up.values()) > 0
    # validation and test: different held-out files, scored alike
    assert len(summary["test"]["task_losses"]) == 3 and summary["test"]["task_losses"] != summary["task_losses"]
    assert all(abs(t - v) < 0.5 for t, v in zip(summary["test"]["task_losses"], summary["task_losses"]))
    with pytest.raises(ValueError, match="no stdlib files under 'nosuchpackage'"):
        continual_lm_workload(2, ("nosuchpackage",))


def test_bad_settings_name_the_parameter():
    with pytest.raises(ValueError, match="unknown basin 'round'; allowed: moving, fixed"):
        ContinualSettings(basin="round")
    with pytest.raises(ValueError, match="radius must be positive, got 0"):
        ContinualSettings(basin="fixed", radius=0)
    with pytest.raises(ValueError, match="unknown selection 'all'; allowed: full, random, topk, rieselect"):
        ContinualSettings(selection="all")
