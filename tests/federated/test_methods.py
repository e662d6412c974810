import json
import re

import numpy as np
import pytest
import torch
from flwr.app import Array, ArrayRecord

from edgekit.federated.apps import RunSettings, make_client_app, run_in_process
from edgekit.federated.compression import from_record, packed_nbytes, to_record
from edgekit.federated.diloco import DiLoCo, OuterNesterov
from edgekit.federated.engine import evaluation
from edgekit.federated.inproc_grid import InProcessGrid
from edgekit.federated.links import LinkSpec, Network
from edgekit.federated.network_grid import NetworkGrid
from edgekit.federated.wire import nbytes
from edgekit.federated.workload import parameters_of

from .toy import toy_workload

WORKLOAD = toy_workload(4)


def run(**overrides):
    settings = RunSettings(**{"clients": 4, "rounds": 3, "inner_steps": 5, "bandwidth_bps": 1e6,
                              "device_flops": 1e6, **overrides})
    return run_in_process(settings, lambda _: WORKLOAD)


def test_outer_nesterov_is_torchs_sgd():
    rng = np.random.default_rng(0)
    x, grads = rng.normal(size=(5,)).astype(np.float32), rng.normal(size=(4, 5)).astype(np.float32)
    p = torch.nn.Parameter(torch.from_numpy(x.copy()))
    sgd = torch.optim.SGD([p], lr=0.7, momentum=0.9, nesterov=True)
    params, buf = {"x": x.copy()}, {"x": np.zeros(5, np.float32)}
    for g in grads:
        p.grad = torch.from_numpy(g.copy())
        sgd.step()
        OuterNesterov(0.7, 0.9).step(params, {"x": g}, buf)
    assert np.allclose(params["x"], p.detach().numpy(), rtol=1e-6, atol=1e-6)


def test_gossip_with_exact_averaging_is_diloco():
    diloco, _ = run(method="diloco")
    for k, mix_momentum in ((1, False), (2, False), (1, True)):
        gossip, _ = run(method="gossip", mixing="exact", mixing_steps=k, mix_momentum=mix_momentum)
        for name, value in diloco.final.items():
            assert np.allclose(gossip.final[name], value, rtol=1e-5, atol=1e-6), name
        losses = [r.metrics["eval"]["loss"] for r in gossip.records]
        assert np.allclose(losses, [r.metrics["eval"]["loss"] for r in diloco.records], rtol=1e-5)
        assert max(r.metrics["disagreement"] for r in gossip.records[1:]) < 1e-6
    metropolis, _ = run(method="gossip", mixing_steps=0)
    assert metropolis.records[-1].metrics["disagreement"] > 1e-3  # a ring does not agree exactly
    assert metropolis.records[-1].metrics["eval"]["loss"] < metropolis.records[0].metrics["eval"]["loss"]
    with_momentum, grid = run(method="gossip", mixing_steps=0, mix_momentum=True)
    assert with_momentum.records[-1].metrics["disagreement"] < metropolis.records[-1].metrics["disagreement"]
    assert set(from_record(next(iter(grid.inner.contexts.values())).state["gossip_params"])) == set(
        with_momentum.final)


def test_gossip_is_scored_on_each_workers_own_model():
    class Stub:  # two workers holding different models; their average is the consensus
        def worker_arrays(self):
            return [{"w": np.array([1.0])}, {"w": np.array([3.0])}]

        def model_arrays(self):
            return {"w": np.array([2.0])}

    def squared(_, arrays):
        return {"loss": float(arrays["w"][0] ** 2), "label": "x"}

    assert evaluation(Stub(), squared, 1) == {"loss": 5.0, "worst_loss": 9.0, "oracle_loss": 4.0}
    diloco, _ = run(method="diloco")
    assert all("oracle_loss" not in r.metrics["eval"] and r.metrics["eval"]["worst_loss"] == r.metrics["eval"]["loss"]
               for r in diloco.records)
    ring, _ = run(method="gossip", mixing_steps=0)
    last = ring.records[-1].metrics["eval"]
    assert last["worst_loss"] > last["loss"]  # the workers disagree, so one of them is worse than their mean
    assert last["oracle_loss"] != last["loss"]


def test_gossip_overlaps_communication_with_compute():
    # 1 s of compute per round (5 steps of 2e5 FLOPs at 1e6 FLOP/s); a parameter transfer takes ~0.1 s
    diloco, dgrid = run(method="diloco", latency_s=0.05)
    gossip, ggrid = run(method="gossip", latency_s=0.05)
    blocking, _ = run(method="gossip", latency_s=0.05, mixing_steps=2)
    assert gossip.summary["utilization"] == pytest.approx(1.0)
    assert diloco.summary["utilization"] < 0.95 and blocking.summary["utilization"] < gossip.summary["utilization"]
    # momentum travels too: twice the bytes; on a healthy network every payload still comes in time
    both, bgrid = run(method="gossip", latency_s=0.05, mixing_steps=1, mix_momentum=True)
    assert not any(r.missing for r in both.records) and both.summary["utilization"] < 1.0
    assert sum(bgrid.bytes.peer.values()) > 2 * sum(ggrid.bytes.peer.values())
    assert ggrid.bytes.peer and not ggrid.bytes.up and dgrid.bytes.up and not dgrid.bytes.peer
    # a ring: every worker sends its parameters to 2 neighbours per exchange
    assert len(ggrid.bytes.peer) == 8 and ggrid.bytes.relay > 0


@pytest.mark.parametrize("compression,bits", [("none", 32), ("mxint8", 8.25), ("mxfp4", 4.25)])
def test_compression_bytes(compression, bits):
    x = {"w": np.random.default_rng(0).normal(size=(64, 96)).astype(np.float32), "b": np.ones(64, np.float32)}
    record = to_record(x, compression)
    head = 4 + len(json.dumps([[k, list(v.shape)] for k, v in x.items()]))
    data = len(record["tensors"].data)
    assert data == head + sum(packed_nbytes(v.shape, compression) for v in x.values())
    assert data - head == sum(v.size for v in x.values()) * bits / 8
    assert data < nbytes(record) < data + 1000  # Flower frames the Array and its chunk in a few hundred bytes
    back = from_record(record)
    err = np.abs(back["w"] - x["w"]).max() / np.abs(x["w"]).max()
    assert err == 0 if compression == "none" else 0 < err < (0.02 if compression == "mxint8" else 0.3)
    with pytest.raises(TypeError):  # Flower will not read the packed bytes as floats
        record["tensors"].numpy()
    # compressed runs send fewer bytes up, and the pseudo-gradient survives compression
    if compression != "none":
        _, plain_grid = run(method="diloco")
        result, grid = run(method="diloco", compression=compression)
        assert sum(grid.bytes.up.values()) < sum(plain_grid.bytes.up.values())
        assert result.records[-1].metrics["eval"]["loss"] < result.records[0].metrics["eval"]["loss"]


@pytest.mark.parametrize("damage,message", [
    (lambda d: d[:-3], "bytes left, shape"),
    (lambda d: d + b"x", "1 bytes after the last tensor"),
    (lambda d: (5).to_bytes(4, "little") + b"[[1]]" + d[9:], "the layout is not a list of [name, shape] pairs"),
    (lambda d: (3).to_bytes(4, "little") + b"{{{", "Expecting property name"),
])
def test_undecodable_records(damage, message):
    data = to_record({"w": np.ones((2, 3), np.float32)})["tensors"].data
    with pytest.raises(ValueError, match=re.escape(message)):
        from_record(ArrayRecord({"tensors": Array(dtype="uint8", shape=(1,), stype="edgekit.tensors:none",
                                                  data=damage(data))}))
    with pytest.raises(ValueError, match="unknown compression 'int3'"):
        from_record(ArrayRecord({"tensors": Array(dtype="uint8", shape=(1,), stype="edgekit.tensors:int3", data=data)}))
    with pytest.raises(ValueError, match="expected one Array named 'tensors'"):
        from_record(ArrayRecord([np.ones(3, np.float32)]))


def test_flower_start_runs_the_strategy():
    initial = parameters_of(WORKLOAD.build_model())
    strategy = DiLoCo(initial, inner_steps=5, flops_per_step=WORKLOAD.flops_per_step)
    grid = NetworkGrid(InProcessGrid(make_client_app(lambda _: WORKLOAD), 4, RunSettings(clients=4).run_config()),
                       Network(LinkSpec(1e6), 1e6))
    result = strategy.start(grid=grid, initial_arrays=to_record(initial), num_rounds=2)
    final = from_record(result.arrays)
    assert set(final) == set(initial) and not np.allclose(final["0.weight"], initial["0.weight"])
    assert sorted(result.train_metrics_clientapp) == [1, 2]
