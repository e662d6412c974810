"""A Flower ``Grid`` that puts a simulated network between a ServerApp and any other Grid.

It wraps the in-process grid, Flower's simulation grid or a deployment's grid alike: the
ServerApp sees a Grid, the clients see messages, and in between every message is sized
from its real serialized bytes, sent over its simulated link (:mod:`.links`) and either
lost or delivered at a simulated time. It keeps

* the clocks: the server's (``now``) and each node's (when it is free again); a node
  starts a message's work when both the message and the node are there, and works
  ``compute_flops / device speed`` (times its straggler slowdown) simulated seconds;
* the bytes sent per direction and client, per directed peer edge, and what the relay
  through the server carried (see :class:`ByteCounts`);
* an event for every transfer that was lost or came past its deadline; the engine drains
  them into the round's record.

Plain (star) messages go down the client's link, are worked on, and the reply comes up
the same link; a reply that arrives after ``timeout`` simulated seconds is discarded, and
the call then lasts the whole ``timeout`` (the server waited for it). Peer-to-peer
messages (``p2p`` timing, see :mod:`.wire`) carry relayed ``peer.<j>`` payloads, each sent
over peer link ``j -> i`` from the time node ``j`` published it. The receiver waits for
them until its deadline: ``timeout`` after it started the exchange, or the moment it needs
them, whichever is later. A payload lost or later than that is removed from the message
before delivery (the receiver never gets it late), and the receiver, which learns that it
is missing only at the deadline, waits until then.

On this grid ``send_and_receive``'s ``timeout`` is in simulated seconds; the wrapped grid
gets ``inner_timeout`` (real seconds).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from flwr.app import ArrayRecord, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid
from flwr.supercore.run import Run

from .inproc_grid import InProcessGrid
from .links import Network, client_link_name, peer_link_name
from .wire import PUBLISH, message_timing, nbytes, peer_sources, typed_record


@dataclass
class ByteCounts:
    """Bytes sent, by client index: ``down`` server -> client, ``up`` client -> server,
    ``peer[(src, dst)]`` on peer links; ``relay`` is what gossip's relay through the server
    actually carried (replies up and forwarded messages down), kept apart from the modelled
    peer-to-peer traffic."""

    down: dict[int, int] = field(default_factory=dict)
    up: dict[int, int] = field(default_factory=dict)
    peer: dict[tuple[int, int], int] = field(default_factory=dict)
    relay: int = 0

    @property
    def total(self) -> int:
        return sum(self.down.values()) + sum(self.up.values()) + sum(self.peer.values())

    def as_dict(self) -> dict:
        return {"total": self.total, "down": sum(self.down.values()), "up": sum(self.up.values()),
                "peer": sum(self.peer.values()), "relay": self.relay,
                "down_by_client": {str(k): v for k, v in sorted(self.down.items())},
                "up_by_client": {str(k): v for k, v in sorted(self.up.items())},
                "peer_by_edge": {f"{a}->{b}": v for (a, b), v in sorted(self.peer.items())}}


def _add(counts: dict, key, value: int) -> None:
    counts[key] = counts.get(key, 0) + value


@dataclass
class _Plan:
    node: int
    index: int
    p2p: bool
    delivered: bool
    done: float = 0.0  # when the node finished the message's work


class ExchangeGrid(Grid):
    """A Grid over an ``inner`` one that handles whole exchanges (``send_and_receive``) only:
    the run is the inner grid's, and the one-way pushes and pulls are refused."""

    def __init__(self, inner: Grid):
        self.inner = inner

    def set_run(self, run: Run) -> None:
        self.inner.set_run(run)

    @property
    def run(self) -> Run:
        return self.inner.run

    def create_message(self, content: RecordDict, message_type: str, dst_node_id: int, group_id: str,
                       ttl: float | None = None) -> Message:
        return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        raise NotImplementedError(f"a {type(self).__name__} handles whole exchanges: use send_and_receive")

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        raise NotImplementedError(f"a {type(self).__name__} handles whole exchanges: use send_and_receive")


class NetworkGrid(ExchangeGrid):
    """``inner`` behind the simulated ``network``."""

    def __init__(self, inner: Grid, network: Network, *, inner_timeout: float | None = None):
        super().__init__(inner)
        self.network = network
        self.inner_timeout = inner_timeout
        self.now = 0.0
        self.node_time: dict[int, float] = {}
        self.published_at: dict[int, float] = {}
        self.compute_seconds: dict[int, float] = {}
        self.bytes = ByteCounts()
        self.events: list[dict] = []
        self.engine_seconds = 0.0
        self._transfers: dict[str, int] = {}
        self._index: dict[int, int] = {}

    # -- Grid -----------------------------------------------------------------------------

    def get_node_ids(self) -> list[int]:
        return list(self.inner.get_node_ids())

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> list[Message]:
        began = time.perf_counter()
        messages = list(messages)
        nodes = [m.metadata.dst_node_id for m in messages]
        if len(set(nodes)) != len(nodes):
            raise ValueError("a NetworkGrid exchange sends at most one message to each node")
        start = self.now
        plans = self._plan(messages, start, timeout)
        deliver = [m for m in messages if plans[m.metadata.dst_node_id].delivered]
        inner_began = time.perf_counter()
        replies = list(self.inner.send_and_receive(deliver, timeout=self.inner_timeout))
        inner_done = time.perf_counter()
        mine = []
        for reply in replies:
            plan = plans.get(reply.metadata.src_node_id)
            if plan is not None and plan.delivered:  # else not a reply to this exchange
                mine.append((reply, plan))
        answered = {plan.node for _, plan in mine}
        accepted, arrivals = [], []
        for (reply, _), arrival in zip(mine, self._receive(mine, start, timeout)):
            if arrival is not None:
                accepted.append(reply)
                arrivals.append(arrival)
        for plan in plans.values():
            if plan.delivered and plan.node not in answered:
                self._event(plan, "no reply", "the client sent no reply", plan.done)
        star_complete = all(p.p2p or p.node in {r.metadata.src_node_id for r in accepted} for p in plans.values())
        ends = [self.now, *arrivals]
        if not star_complete and timeout is not None:
            ends.append(start + timeout)  # the server waited for the missing replies until the deadline
        self.now = max(ends)
        self.engine_seconds += (inner_began - began) + (time.perf_counter() - inner_done)
        return accepted

    # -- timing -----------------------------------------------------------------------------

    def index_of(self, node: int) -> int:
        """A node's client index: its position among the sorted node ids (new nodes are appended)."""
        if node not in self._index:
            for known in sorted(self.inner.get_node_ids()):
                self._index.setdefault(known, len(self._index))
            self._index.setdefault(node, len(self._index))
        return self._index[node]

    def _transfer_all(self, requests: list[tuple[str, str, int, float]]):
        """Concurrent transfers ``(link, direction, nbytes, start)``, numbered per link and direction."""
        numbered = []
        for link, direction, size, start in requests:
            key = f"{link}/{direction}"
            count = self._transfers.get(key, 0)
            self._transfers[key] = count + 1
            numbered.append((link, direction, count, size, start))
        return self.network.transfers(numbered)

    def _event(self, plan: _Plan, kind: str, reason: str, at: float, **extra) -> None:
        self.events.append({"client": plan.index, "node": plan.node, "kind": kind, "reason": reason,
                            "at": round(at, 6), **extra})

    def _plan(self, messages: list[Message], start: float, timeout: float | None) -> dict[int, _Plan]:
        """Every message's delivery and work; the exchange's transfers (star messages down, relayed
        peer payloads) share their devices' links."""
        requests, owners = [], []
        for message in messages:
            index = self.index_of(message.metadata.dst_node_id)
            if message_timing(message.content)[1]:
                for src, name in peer_sources(message.content).items():
                    src_index = self.index_of(src)
                    size = nbytes(message.content[name])
                    requests.append((peer_link_name(src_index, index), f"{src_index}>{index}", size,
                                     self.published_at.get(src, 0.0)))
                    owners.append((message, (src, name)))
            else:
                requests.append((client_link_name(index), "down", nbytes(message), start))
                owners.append((message, None))
        transfers: dict[int, list] = {}
        for (message, source), t in zip(owners, self._transfer_all(requests)):
            transfers.setdefault(id(message), []).append((source, t))
        return {m.metadata.dst_node_id: self._plan_one(m, transfers.get(id(m), []), timeout) for m in messages}

    def _plan_one(self, message: Message, transfers: list, timeout: float | None) -> _Plan:
        node = message.metadata.dst_node_id
        index = self.index_of(node)
        flops, p2p, overlap = message_timing(message.content)
        compute = self.network.compute_seconds(index, flops)
        plan = _Plan(node, index, p2p, True)
        if p2p:
            ready = self.node_time.get(node, 0.0)
            needed = ready + compute if overlap else ready
            deadline = None if timeout is None else max(needed, ready + timeout)
            arrivals, waited = [], []
            for (src, name), t in transfers:
                src_index = self.index_of(src)
                _add(self.bytes.peer, (src_index, index), t.nbytes)
                if t.arrival is None:
                    reason = t.lost
                elif deadline is not None and t.arrival > deadline:
                    reason = f"arrived at {t.arrival:.3f} s, past the deadline {deadline:.3f} s"
                else:
                    arrivals.append(t.arrival)
                    continue
                del message.content[name]
                waited = [deadline] if deadline is not None else []  # only the deadline tells it is missing
                self._event(plan, "peer", reason, t.start, src=src_index, bytes=t.nbytes, late=t.arrival is not None)
            plan.done = max([needed, *arrivals, *waited]) + (0.0 if overlap else compute)
            self.bytes.relay += nbytes(message)
        else:
            (_, t), = transfers
            _add(self.bytes.down, index, t.nbytes)
            if t.arrival is None:
                plan.delivered = False
                self._event(plan, "down", t.lost, t.start, bytes=t.nbytes)
                return plan
            plan.done = max(t.arrival, self.node_time.get(node, 0.0)) + compute
        self.node_time[node] = plan.done
        self.compute_seconds[node] = self.compute_seconds.get(node, 0.0) + compute
        return plan

    def _receive(self, replies: list[tuple[Message, _Plan]], start: float, timeout: float | None) -> list[float | None]:
        """When each reply reaches the server, or None when it is lost or late (with an event); the
        star replies share the server's downlink."""
        star = [(reply, plan) for reply, plan in replies if not plan.p2p]
        sent = self._transfer_all([(client_link_name(plan.index), "up", nbytes(reply), plan.done)
                                   for reply, plan in star])
        up = {id(reply): t for (reply, _), t in zip(star, sent)}
        arrivals = []
        for reply, plan in replies:
            if plan.p2p:
                self.bytes.relay += nbytes(reply)
                if reply.has_content() and typed_record(reply.content, PUBLISH, ArrayRecord) is not None:
                    self.published_at[plan.node] = plan.done
                arrivals.append(plan.done)
                continue
            t = up[id(reply)]
            _add(self.bytes.up, plan.index, t.nbytes)
            if t.arrival is None:
                self._event(plan, "up", t.lost, plan.done, bytes=t.nbytes)
                arrivals.append(None)
            elif timeout is not None and t.arrival > start + timeout:
                self._event(plan, "late", f"arrived at {t.arrival:.3f} s, past the deadline {start + timeout:.3f} s",
                            plan.done, bytes=t.nbytes)
                arrivals.append(None)
            else:
                arrivals.append(t.arrival)
        return arrivals

    # -- what strategies may ask ------------------------------------------------------------

    def live_peer_edges(self, pairs: Iterable[tuple[int, int]]) -> set[tuple[int, int]]:
        """The node pairs whose peer link is up at both ends' next publish time (not in an outage)."""
        live = set()
        for a, b in pairs:
            link = peer_link_name(self.index_of(a), self.index_of(b))
            if (self.network.is_up(link, self.published_at.get(a, 0.0))
                    and self.network.is_up(link, self.published_at.get(b, 0.0))):
                live.add((a, b))
        return live

    def clock(self, nodes: Iterable[int] | None = None) -> float:
        """The simulated time: the server's, or the latest of the given nodes' clocks."""
        if nodes is None:
            return self.now
        return max([self.node_time.get(n, 0.0) for n in nodes], default=self.now)

    def drain_events(self) -> list[dict]:
        events, self.events = self.events, []
        return events

    # -- checkpoints ------------------------------------------------------------------------

    def state(self) -> dict:
        return {"now": self.now, "node_time": dict(self.node_time), "published_at": dict(self.published_at),
                "compute_seconds": dict(self.compute_seconds), "transfers": dict(self._transfers),
                "index": dict(self._index), "events": list(self.events),
                "bytes": {"down": dict(self.bytes.down), "up": dict(self.bytes.up), "peer": dict(self.bytes.peer),
                          "relay": self.bytes.relay},
                "inner": self.inner.state() if hasattr(self.inner, "state") else None}

    def load_state(self, state: dict) -> None:
        self.now = state["now"]
        self.node_time, self.published_at = dict(state["node_time"]), dict(state["published_at"])
        self.compute_seconds, self._transfers = dict(state["compute_seconds"]), dict(state["transfers"])
        self._index, self.events = dict(state["index"]), list(state["events"])
        self.bytes = ByteCounts(**state["bytes"])
        if state["inner"] is not None:
            self.inner.load_state(state["inner"])


def in_process_network(client_app: ClientApp, num_nodes: int, network: Network,
                       run_config: dict | None = None) -> NetworkGrid:
    """``num_nodes`` in-process clients running ``client_app`` behind the simulated ``network``."""
    return NetworkGrid(InProcessGrid(client_app, num_nodes, run_config), network)
