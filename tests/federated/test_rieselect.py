"""RieSelect: the knapsack, the Fisher safe step, and selective uplink against its baselines on the engine."""

import itertools

import numpy as np
import pytest
from flwr.app import Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from edgekit.federated.compression import to_record
from edgekit.federated.inproc_grid import InProcessGrid
from edgekit.federated.records import check_update
from edgekit.federated.rieselect import ContinualSettings, greedy_fill, knapsack, run_continual, safe_step

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


def test_safe_step_stays_in_the_basin():
    rng = np.random.default_rng(1)
    params, anchor = {"w": rng.normal(size=50)}, {"w": rng.normal(size=50) * 0.01}
    fisher, direction = {"w": rng.random(50)}, {"w": rng.normal(size=50)}
    anchors = [(fisher, anchor)]

    def penalty(eta):
        return 0.5 * float(np.sum(fisher["w"] * (params["w"] + eta * direction["w"] - anchor["w"]) ** 2))

    now = penalty(0.0)
    eta = safe_step(params, direction, anchors, basin=now + 1.0)
    assert 0 < eta < 1 and penalty(eta) == pytest.approx(now + 1.0)  # capped exactly at the basin's edge
    assert safe_step(params, direction, anchors, basin=1e9) == 1.0  # far inside: the whole step
    eta = safe_step(params, direction, anchors, basin=0.0)  # already outside: never pushed further out
    assert penalty(eta) <= now + 1e-9


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
                         ("capped", {"selection": "rieselect", "risk_weight": 0.0, "basin": 1e-3})]:
        settings = ContinualSettings(**{"selection": name, **kwargs}, clients=3, rounds_per_task=3, local_steps=8,
                                     budget_fraction=0.5)
        result, _, summary = run_continual(settings, workload)
        assert all(r.used == [0, 1, 2] and not r.rejected for r in result.records[1:])  # partial updates pass
        runs[name] = (result, summary)
    full = runs["full"][1]
    for name in ("random", "topk", "rieselect", "capped"):
        result, summary = runs[name]
        # half of each update, plus framing (and for RieSelect its Fisher diagonal once a task)
        assert summary["uplink_bytes"] < 0.7 * full["uplink_bytes"]
        assert all(r.metrics["layer_fraction"] < 1 for r in result.records[1:])
    for result, summary in runs.values():
        first = result.records[0].metrics["eval"]["task_losses"]
        assert summary["loss_when_learned"][0] < first[0]  # the first task was learned in its rounds
    # the Fisher basin: no cap while there is no earlier task, then steps shrink, and less is forgotten
    steps = [r.metrics["step"] for r in runs["capped"][0].records[1:]]
    assert steps[:3] == [1.0, 1.0, 1.0] and min(steps) < 0.5
    assert runs["capped"][1]["forgetting"] < 0.5 * full["forgetting"]


def test_lm_tasks_from_the_stdlib():
    from edgekit.fl_job import CONTINUAL_TASKS, continual_lm_workload

    workload = continual_lm_workload(2)
    assert workload.num_tasks == len(CONTINUAL_TASKS) == 3
    settings = ContinualSettings(clients=2, rounds_per_task=1, local_steps=2, budget_fraction=0.25)
    _, grid, summary = run_continual(settings, workload)
    # the packages differ: a model that has learned a little scores the tasks differently
    assert len(set(np.round(summary["task_losses"], 3))) == 3 and all(0 < x < 6 for x in summary["task_losses"])
    assert summary["uplink_bytes"] == sum(grid.bytes.up.values()) > 0
    with pytest.raises(ValueError, match="no stdlib files under 'nosuchpackage'"):
        continual_lm_workload(2, ("nosuchpackage",))
