"""Faults and bad input: the run completes, the record says what was missing or rejected and how
it was handled, and nothing bad is averaged in (the result equals a run where that client's
update simply never arrived)."""

import logging

import numpy as np
import pytest
from flwr.app import ArrayRecord, Message, RecordDict

from edgekit.federated.apps import RunSettings, execute, make_client_app
from edgekit.federated.compression import from_record, to_record
from edgekit.federated.inproc_grid import InProcessGrid
from edgekit.federated.links import LinkSpec
from edgekit.federated.network_grid import NetworkGrid

from .toy import toy_workload

CLIENTS = 4


def run(method="diloco", workload=None, wrap=None, overrides=None, stragglers=None, rounds=3, **settings):
    workload = workload or toy_workload(CLIENTS)
    settings = RunSettings(method=method, clients=CLIENTS, rounds=rounds, inner_steps=5, bandwidth_bps=1e6,
                           device_flops=1e6, **settings)
    app = make_client_app(lambda _: workload)
    network = settings.network()
    network.client_overrides.update(overrides or {})
    network.stragglers.update(stragglers or {})
    grid = NetworkGrid(InProcessGrid(wrap(app) if wrap else app, CLIENTS, settings.run_config()), network)
    return execute(settings, workload, grid)


def lost_link():
    return {1: LinkSpec(1e6, 0.05, drop=1.0)}


@pytest.fixture(scope="module")
def baseline():
    """Client 1's download is lost every round: its update is simply missing."""
    result = run(overrides=lost_link())
    for record in result.records[1:]:
        assert record.used == [0, 2, 3] and record.missing == [
            {"client": 1, "reason": "down: dropped", "handled": "left out of the average"}]
    return result


def same_params(a, b):
    return all(np.array_equal(a.final[k], b.final[k]) for k in a.final)


def test_crash_mid_round(baseline):
    result = run(workload=toy_workload(CLIENTS, crash=(1, 2)))  # raises at its third inner step, every round
    for record in result.records[1:]:
        assert record.used == [0, 2, 3]
        [rejected] = record.rejected
        assert rejected["client"] == 1 and "worker 1 crashed at step 2" in rejected["reason"]
        assert rejected["reason"].startswith("client error (code 2)") and rejected["handled"] == "left out of the average"
    assert same_params(result, baseline)


def test_link_down(baseline):
    result = run(overrides={1: LinkSpec(1e6, 0.05, outage=1.0)})
    assert [m["reason"] for r in result.records[1:] for m in r.missing] == ["down: link down"] * 3
    assert same_params(result, baseline)


def test_straggler_past_the_deadline(baseline):
    result = run(stragglers={1: 20.0})
    deadline = result.summary["deadline_s"]
    for record in result.records[1:]:
        [missing] = record.missing
        assert missing["client"] == 1 and missing["reason"].startswith("late: arrived at")
        assert record.sim_time == pytest.approx(record.round * deadline)  # the server waited out each deadline
    assert same_params(result, baseline)  # its late updates never count, not even in a later round


def corrupt(how):
    def wrap(app):
        def corrupted(message, context):
            reply = app(message, context)
            if context.node_config["partition-id"] != 1:
                return reply
            update = from_record(reply.content["pseudo_gradient"])
            if how == "shape":
                update["0.weight"] = np.zeros((3, 3), np.float32)
            elif how == "nan":
                update["2.bias"] = np.full_like(update["2.bias"], np.nan)
            elif how == "missing tensor":
                del update["0.bias"]
            elif how == "no record":
                return Message(RecordDict({"something": ArrayRecord()}), reply_to=message)
            elif how == "stale":
                reply.metadata.__dict__["_group_id"] = str(int(message.metadata.group_id) - 1)
            reply.content["pseudo_gradient"] = to_record(update)
            if how == "bad bytes":
                packed = reply.content["pseudo_gradient"]["tensors"]
                packed.data = packed.data[:-7]
            return reply
        return corrupted
    return wrap


@pytest.mark.parametrize("how,reason", [
    ("shape", "0.weight: shape (3, 3), expected (32, 16)"),
    ("nan", "2.bias: 1 non-finite values"),
    ("missing tensor", "tensor names differ from the model's: missing ['0.bias']"),
    ("bad bytes", "undecodable update (2.weight: 125 bytes left, shape (1, 32) needs 128)"),
    ("no record", "no ArrayRecord named 'pseudo_gradient'"),
    ("stale", "reply belongs to round"),
])
def test_malformed_updates_are_rejected_and_logged(baseline, caplog, how, reason):
    with caplog.at_level(logging.WARNING, logger="edgekit.federated"):
        result = run(wrap=corrupt(how))
    for record in result.records[1:]:
        [rejected] = record.rejected
        assert rejected["client"] == 1 and rejected["reason"].startswith(reason), rejected["reason"]
    logged = [r.getMessage() for r in caplog.records if "rejected" in r.getMessage()]
    assert len(logged) == 3 and reason in logged[0]
    assert same_params(result, baseline)


def test_gossip_faults_are_recorded_and_never_forwarded_stale():
    result = run("gossip", workload=toy_workload(CLIENTS, crash=(1, 2)), mixing_steps=1, drop=0.2, seed=5)
    for record in result.records[1:]:
        assert 1 not in record.used and any(r["client"] == 1 and "crashed" in r["reason"] for r in record.rejected)
        # client 1 never published after the start: from round 2 on it is missing, not forwarded stale
        if record.round > 1:
            assert any(m["client"] == 1 and "never reached the server" in m["reason"] for m in record.missing)
        dropped = [e for e in record.network if e["kind"] == "peer" and e["reason"] == "dropped"]
        assert len([m for m in record.missing if "dropped" in m["reason"]]) == len(dropped)
    assert any(r.network for r in result.records[1:])
    assert result.records[-1].metrics["eval"]["loss"] < result.records[0].metrics["eval"]["loss"]


def test_gossip_reports_how_far_a_straggler_falls_behind():
    from edgekit.jobs.fl import lag_summary

    healthy = run("gossip", rounds=3)
    assert [r.metrics["lag_s"] for r in healthy.records[1:]] == pytest.approx([0.0] * 3, abs=1e-9)
    slow = run("gossip", stragglers={1: 4.0}, rounds=3)
    lags = [r.metrics["lag_s"] for r in slow.records[1:]]
    assert 0 < lags[0] < lags[1] < lags[2]  # the others go on, so it falls further behind every round
    assert lags[1] - lags[0] == pytest.approx(lags[0], rel=0.05)  # by one slow round's extra compute each time
    summary = lag_summary(slow.records[1:], slow.summary["sim_time"])
    assert summary["max_lag_s"] == lags[2]
    assert summary["max_lag_rounds"] == pytest.approx(lags[2] / (slow.summary["sim_time"] / 3))
    assert lag_summary(slow.records[1:], 0.0)["max_lag_rounds"] == 0.0
    assert lag_summary([], 1.0) == {}
