import math

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Error, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects

from edgekit.federated.inproc_grid import InProcessGrid
from edgekit.federated.links import SERVER, LinkSpec, Network, uniform
from edgekit.federated.network_grid import NetworkGrid
from edgekit.federated.sharing import Flow, fair_rates, finish_times
from edgekit.federated.wire import (
    PUBLISH,
    TIMING,
    nbytes,
    peer_record_name,
    peer_sources,
    timing_record,
    wire_copy,
    wire_objects,
)


def test_transfer_arithmetic():
    spec = LinkSpec(bandwidth_bps=8e6, latency_s=0.05)
    net = Network(spec, device_flops=1e9)
    t = net.transfer("client0", "down", 0, 1_000_000, start=2.0)
    assert t.lost is None and t.arrival == pytest.approx(2.0 + 0.05 + 1.0)
    assert spec.nominal_seconds(1_000_000) == pytest.approx(1.05)
    assert net.compute_seconds(0, 3e9) == pytest.approx(3.0)
    slow = Network(spec, device_flops=1e9, stragglers={1: 4.0})
    assert slow.compute_seconds(1, 3e9) == pytest.approx(12.0) and slow.compute_seconds(0, 3e9) == pytest.approx(3.0)


def test_drops_jitter_and_outages_are_seeded():
    net = Network(LinkSpec(1e6, 0.01, jitter_s=0.02, drop=0.1, outage=0.2, outage_period_s=10.0), 1e9, seed=3)
    again = Network(LinkSpec(1e6, 0.01, jitter_s=0.02, drop=0.1, outage=0.2, outage_period_s=10.0), 1e9, seed=3)
    runs = [[net.transfer("client1", "up", i, 1000, 10.0 * i + 1) for i in range(4000)] for net in (net, again)]
    assert runs[0] == runs[1]
    lost = [t.lost for t in runs[0]]
    down, dropped = lost.count("link down") / 4000, lost.count("dropped") / 4000
    assert 0.17 < down < 0.23 and 0.07 < dropped / (1 - down) < 0.13
    delays = [t.arrival - t.start - 0.01 - 0.008 for t in runs[0] if t.arrival is not None]
    assert min(delays) >= 0 and 0.01 < np.mean(delays) < 0.022  # half-normal, mean 0.02 * sqrt(2 / pi)
    # an outage takes the link down in both directions for its whole period
    for period in range(200):
        up = net.is_up("client1", 10.0 * period + 0.5)
        assert up == net.is_up("client1", 10.0 * period + 9.9)
        if not up:
            assert net.transfer("client1", "down", period, 10, 10.0 * period + 3).lost == "link down"
    assert Network(LinkSpec(1e6, outage=1.0), 1e9).transfer("peer0-1", "0>1", 0, 1, 0.0).lost == "link down"
    assert 0 < uniform(0, "x") < 1


def test_concurrent_payloads_from_one_device_share_its_uplink():
    net = Network(LinkSpec(bandwidth_bps=8e6, latency_s=0.05), device_flops=1e9)
    alone = net.transfer("peer0-1", "0>1", 0, 1_000_000, start=0.0)
    assert alone.arrival == pytest.approx(0.05 + 1.0)  # a payload alone is unchanged
    two = net.transfers([("peer0-1", "0>1", 1, 1_000_000, 0.0), ("peer0-2", "0>2", 0, 1_000_000, 0.0)])
    assert [t.arrival for t in two] == [pytest.approx(0.05 + 2.0)] * 2
    # to two receivers from two senders: no device is shared, each goes at full speed
    apart = net.transfers([("peer0-1", "0>1", 2, 1_000_000, 0.0), ("peer2-3", "2>3", 0, 1_000_000, 0.0)])
    assert [t.arrival for t in apart] == [pytest.approx(1.05)] * 2
    # a transfer that starts when the first is half done: both share from then on
    late = net.transfers([("peer0-1", "0>1", 3, 1_000_000, 0.0), ("peer0-2", "0>2", 1, 1_000_000, 0.5)])
    assert [t.arrival for t in late] == [pytest.approx(0.05 + 1.5), pytest.approx(0.05 + 2.0)]
    # a lost transfer takes no capacity
    lossy = Network(LinkSpec(8e6, 0.05), 1e9, peer_overrides={(0, 2): LinkSpec(8e6, 0.05, drop=1.0)})
    kept, lost = lossy.transfers([("peer0-1", "0>1", 0, 1_000_000, 0.0), ("peer0-2", "0>2", 0, 1_000_000, 0.0)])
    assert lost.lost == "dropped" and kept.arrival == pytest.approx(1.05)


@pytest.mark.parametrize("n", [1, 3, 5])
def test_uploads_share_a_bottleneck_server_downlink(n):
    net = Network(LinkSpec(bandwidth_bps=8e6, latency_s=0.05), device_flops=1e9, server_bandwidth_bps=8e6)
    ups = net.transfers([(f"client{i}", "up", 0, 1_000_000, 0.0) for i in range(n)])
    assert [t.arrival for t in ups] == [pytest.approx(0.05 + n * 1.0)] * n
    # with an unlimited server each client's own uplink is the limit
    free = Network(LinkSpec(bandwidth_bps=8e6, latency_s=0.05), device_flops=1e9)
    assert [t.arrival for t in free.transfers([(f"client{i}", "up", 0, 1_000_000, 0.0) for i in range(n)])] == \
        [pytest.approx(1.05)] * n


def test_max_min_fair_rates():
    # a's uplink (6) is shared by a->x and a->y; y's downlink (2) holds a->y and b->y to 1 each,
    # and a->x takes what a->y leaves of a's uplink: 5
    flows = [Flow("a", "x", 1, 0), Flow("a", "y", 1, 0), Flow("b", "y", 1, 0)]
    assert fair_rates(flows, {"a": 6, "b": 10}, {"y": 2}) == pytest.approx([5, 1, 1])
    assert fair_rates([Flow("a", "x", 1, 0, cap=1), Flow("a", "y", 1, 0)], {"a": 6}, {}) == pytest.approx([1, 5])
    assert finish_times([Flow("a", "x", 6, 0), Flow("a", "y", 2, 0)], {"a": 2}, {}) == pytest.approx([4, 2])
    with pytest.raises(ValueError, match="no finite capacity"):
        fair_rates([Flow(SERVER, SERVER, 1, 0)], {}, {})


@pytest.mark.parametrize("kwargs,message", [
    ({"bandwidth_bps": 0}, "bandwidth must be a positive number of bits per second"),
    ({"bandwidth_bps": 1e6, "latency_s": -1}, "latency must be a non-negative number of seconds"),
    ({"bandwidth_bps": 1e6, "drop": 1.5}, "drop must be a probability in [0, 1]"),
    ({"bandwidth_bps": 1e6, "outage_period_s": 0}, "outage period must be a positive number of seconds"),
])
def test_bad_link_values(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        LinkSpec(**kwargs)
    with pytest.raises(ValueError, match="straggler slowdown of client 2 must be a number >= 1"):
        Network(LinkSpec(1e6), 1e9, stragglers={2: 0.5})
    with pytest.raises(ValueError, match="server bandwidth must be a positive number of bits per second"):
        Network(LinkSpec(1e6), 1e9, server_bandwidth_bps=0)


def echo_app() -> ClientApp:
    app = ClientApp()

    @app.train()
    def train(message, context):
        x = message.content["arrays"]["w"].numpy()
        return Message(RecordDict({"arrays": ArrayRecord([x * 2]), "metrics": MetricRecord({"n": x.size})}),
                       reply_to=message)

    return app


def test_bytes_and_clock_from_real_payloads():
    spec = LinkSpec(bandwidth_bps=1e6, latency_s=0.1)
    grid = NetworkGrid(InProcessGrid(echo_app(), 3), Network(spec, device_flops=1e6))
    nodes = grid.get_node_ids()
    sizes = [100, 1000, 5000]
    messages = [Message(RecordDict({"arrays": ArrayRecord([np.ones(n, np.float32)]),
                                    TIMING: timing_record(compute_flops=5e5)}), node, "train", group_id="1")
                for node, n in zip(nodes, sizes)]
    down = [nbytes(m) for m in messages]
    assert down == [sum(map(len, wire_objects(m).values())) for m in messages]
    assert all(d > 4 * n for d, n in zip(down, sizes))
    replies = grid.send_and_receive(messages, timeout=None)
    assert sorted(r.metadata.src_node_id for r in replies) == nodes
    assert [grid.bytes.down[i] for i in range(3)] == down
    up = {grid.index_of(r.metadata.src_node_id): nbytes(r) for r in replies}
    assert grid.bytes.up == up and grid.bytes.total == sum(down) + sum(up.values())
    # every client: latency + bytes / bandwidth down, 0.5 s compute, the same up; the server waits for the last
    arrivals = [2 * 0.1 + 8 * (down[i] + up[i]) / 1e6 + 0.5 for i in range(3)]
    assert grid.now == pytest.approx(max(arrivals))
    assert grid.compute_seconds == {node: pytest.approx(0.5) for node in nodes}
    copy, size = wire_copy(messages[0])
    assert size == down[0] and np.array_equal(copy.content["arrays"]["0"].numpy(), np.ones(100, np.float32))


def test_star_exchange_shares_the_server_link():
    # the server's uplink carries all three requests, its downlink all three replies: the last
    # of each ends after the three's bits at the server's rate, not after one's
    network = Network(LinkSpec(bandwidth_bps=1e6, latency_s=0.1), device_flops=1e6, server_bandwidth_bps=1e6)
    grid = NetworkGrid(InProcessGrid(echo_app(), 3), network)
    messages = [Message(RecordDict({"arrays": ArrayRecord([np.ones(1000, np.float32)]),
                                    TIMING: timing_record(compute_flops=5e5)}), node, "train", group_id="1")
                for node in grid.get_node_ids()]
    grid.send_and_receive(messages, timeout=None)
    down, up = sum(grid.bytes.down.values()), sum(grid.bytes.up.values())
    assert grid.now == pytest.approx(2 * 0.1 + 8 * (down + up) / 1e6 + 0.5, rel=1e-3)


def flower_objects(obj) -> dict[str, bytes]:
    """Flower's own serialization of ``obj``: every nested object's id and deflated bytes."""
    return {object_id: nested.deflate() for object_id, nested in get_all_nested_objects(obj).items()}


def test_wire_objects_are_flowers_own():
    grid = InProcessGrid(echo_app(), 1)  # sets the run and node ids that messages are created with
    shared = ArrayRecord({"w": Array(np.arange(5000, dtype=np.float32))})
    message = Message(RecordDict({"params": shared, "again": shared, "config": ConfigRecord({"round": 3, "x": [1, 2]}),
                                  TIMING: timing_record(5.0), "other": ArrayRecord([np.ones(7, np.float32)])}),
                      grid.get_node_ids()[0], "train", group_id="3")
    reply = Message(RecordDict({"metrics": MetricRecord({"loss": 0.5})}), reply_to=message)
    failed = Message(Error(3, "crashed"), reply_to=message)
    for obj in (message, reply, failed, shared):
        assert wire_objects(obj) == flower_objects(obj)
    copy, size = wire_copy(message)
    assert size == nbytes(message) and copy.object_id == message.object_id
    # the copy's arrays keep the wire bytes they came from; these stay exact when the copy changes
    assert wire_objects(copy) == flower_objects(message)
    copy.content["other"]["0"].data = Array(np.zeros(7, np.float32)).data
    copy.content["config"]["round"] = 4
    assert wire_objects(copy) == flower_objects(copy) != flower_objects(message)


def test_lost_and_late_replies_are_events_and_the_server_waits_for_the_deadline():
    spec = LinkSpec(bandwidth_bps=1e6, latency_s=0.1)
    network = Network(spec, device_flops=1e6, client_overrides={1: LinkSpec(1e6, 0.1, drop=1.0)}, stragglers={2: 50})
    grid = NetworkGrid(InProcessGrid(echo_app(), 3), network)
    nodes = grid.get_node_ids()
    messages = [Message(RecordDict({"arrays": ArrayRecord([np.ones(10, np.float32)]),
                                    TIMING: timing_record(compute_flops=1e5)}), node, "train", group_id="1")
                for node in nodes]
    replies = grid.send_and_receive(messages, timeout=3.0)
    assert [r.metadata.src_node_id for r in replies] == [nodes[0]]
    kinds = {(e["client"], e["kind"]) for e in grid.events}
    assert kinds == {(1, "down"), (2, "late")}
    assert grid.now == pytest.approx(3.0)  # waited the whole deadline for the missing ones
    assert math.isclose(grid.node_time[nodes[2]], grid.node_time[nodes[0]] + 4.9, rel_tol=1e-6)


def publish_app() -> ClientApp:
    app = ClientApp()

    @app.train()
    def train(message, context):
        return Message(RecordDict({PUBLISH: ArrayRecord([np.zeros(4, np.float32)])}), reply_to=message)

    return app


def test_peer_to_peer_timing():
    network = Network(LinkSpec(bandwidth_bps=1e6, latency_s=0.1), device_flops=1e6,
                      peer_overrides={(0, 2): LinkSpec(1e6, 0.1, drop=1.0)})
    grid = NetworkGrid(InProcessGrid(publish_app(), 3), network)
    n0, n1, n2 = grid.get_node_ids()
    payload = ArrayRecord([np.ones(1000, np.float32)])

    def message(node, peers, overlap):
        content = RecordDict({TIMING: timing_record(1e6, p2p=True, overlap=overlap)})
        for peer in peers:
            content[peer_record_name(peer)] = payload
        return Message(content, node, "train", group_id="1")

    sent = [message(n0, [n1, n2], overlap=True), message(n1, [n0, n2], overlap=False)]
    replies = grid.send_and_receive(sent, timeout=2.0)
    assert len(replies) == 2 and not grid.bytes.up and not grid.bytes.down
    assert set(peer_sources(sent[0].content)) == {n1}  # the lost payload never reaches node 0
    # node 0 computes 1 s while its payloads travel, and waits for the lost one until its deadline (2 s)
    assert grid.node_time[n0] == pytest.approx(2.0)
    # node 1 needs its payloads before it computes: the two share its downlink, so both take twice as long
    shared = 0.1 + 2 * 8 * nbytes(payload) / 1e6
    assert grid.node_time[n1] == pytest.approx(shared + 1.0)
    assert [(e["client"], e["src"], e["reason"]) for e in grid.events] == [(0, 2, "dropped")]
    assert grid.bytes.peer == {(1, 0): nbytes(payload), (2, 0): nbytes(payload), (0, 1): nbytes(payload),
                               (2, 1): nbytes(payload)}
    assert grid.published_at == {n0: pytest.approx(2.0), n1: pytest.approx(shared + 1.0)}
    assert grid.live_peer_edges([(n0, n1)]) == {(n0, n1)}
