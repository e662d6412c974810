"""What a ServerApp on Flower's own engines puts under its :class:`~.network_grid.NetworkGrid`.

Flower's engines draw node ids at random, and a node's client state lives in that node's
context, for one run only. So that a run on them is deterministic and resumes from a
checkpoint exactly as the in-process engine does, :class:`FlowerNodes`

* shows every node under the id the in-process engine gives it, ``FIRST_NODE_ID`` plus its
  ``partition-id`` (asked once per run with a ``query.partition`` message): client indices,
  the order of updates and the network's draws then follow the partitions, not the draw;
* when the run is checkpointed, asks each client to send its context state back with every
  reply (:func:`carry_state`, a ClientApp mod), keeps the latest one per node in its
  :meth:`state`, and after a resume hands it back with the node's first message.

It sits below the NetworkGrid: what it adds to messages is not part of the simulated
traffic, as the in-process engine's checkpoints cost none either. It is real traffic on these
engines, so it is counted apart, in :attr:`FlowerNodes.state_bytes`.
"""

from __future__ import annotations

from collections.abc import Iterable

from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.clientapp.typing import ClientAppCallable
from flwr.serverapp import Grid
from flwr.supercore.inflatable.inflatable_utils import inflate_object_from_contents

from .inproc_grid import FIRST_NODE_ID
from .network_grid import ExchangeGrid
from .wire import nbytes, wire_objects

PARTITION_QUERY = "query.partition"
STATE_PREFIX = "edgekit.state."  # a context state record travelling in a message
SEND_STATE = "edgekit.send-state"  # asks the client to send its context state with its reply
ENGINE = "flower"  # marks this grid's checkpoint state (a checkpoint of another engine is refused)


def register_partition_query(app: ClientApp) -> None:
    """Answer ``query.partition`` with the node's ``partition-id``."""

    @app.query("partition")
    def partition(message: Message, context: Context) -> Message:
        return Message(RecordDict({"node": ConfigRecord({"partition-id": int(context.node_config["partition-id"])})}),
                       reply_to=message)


def carry_state(message: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """ClientApp mod: a message carrying context state records restores them first (a resumed
    run's first message to this node); a message asking for the state gets it back in the reply.
    The handler sees neither."""
    if not message.has_content():
        return call_next(message, context)
    restore = {name[len(STATE_PREFIX):]: message.content[name] for name in list(message.content)
               if name.startswith(STATE_PREFIX)}
    send = message.content.get(SEND_STATE) is not None
    for name in [n for n in message.content if n.startswith(STATE_PREFIX) or n == SEND_STATE]:
        del message.content[name]
    if restore:
        context.state = RecordDict(restore)
    reply = call_next(message, context)
    if send and reply.has_content():
        for name, record in context.state.items():
            reply.content[STATE_PREFIX + name] = record
    return reply


class FlowerNodes(ExchangeGrid):
    """Flower's ``inner`` grid with stable node ids and, with ``keep_state``, the clients' context states."""

    def __init__(self, inner: Grid, *, keep_state: bool, timeout: float | None = None):
        super().__init__(inner)
        self.keep_state = keep_state
        self.node_of: dict[int, int] = {}  # shown id -> Flower's node id
        self.shown: dict[int, int] = {}  # Flower's node id -> shown id
        self.states: dict[int, dict] = {}  # shown id -> its context state's records
        self.restore: set[int] = set()  # shown ids whose next message restores their state
        # serialized size of what travels for checkpoints: "down" the requests and restored
        # states, "up" the states in the replies (kept in the checkpoint: a resumed run goes on counting)
        self.state_bytes = {"up": 0, "down": 0}
        self._ask_partitions(timeout)

    def _ask_partitions(self, timeout: float | None) -> None:
        nodes = sorted(self.inner.get_node_ids())
        asks = [Message(RecordDict(), node, PARTITION_QUERY) for node in nodes]
        replies = {r.metadata.src_node_id: r for r in self.inner.send_and_receive(asks, timeout=timeout)}
        for node in nodes:
            reply = replies.get(node)
            if reply is None or not reply.has_content():
                why = reply.error.reason if reply is not None and reply.has_error() else "no reply"
                raise RuntimeError(f"node {node} did not tell its partition-id ({why})")
            shown = FIRST_NODE_ID + int(reply.content["node"]["partition-id"])
            if shown in self.node_of:
                raise RuntimeError(f"nodes {self.node_of[shown]} and {node} both have partition-id "
                                   f"{shown - FIRST_NODE_ID}")
            self.node_of[shown], self.shown[node] = node, shown

    # -- Grid ---------------------------------------------------------------------------------

    def get_node_ids(self) -> list[int]:
        return sorted(self.node_of)

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> list[Message]:
        outgoing = []
        for message in messages:
            shown = message.metadata.dst_node_id
            content = RecordDict(dict(message.content))  # the caller's message stays as it was
            if self.keep_state:
                content[SEND_STATE] = ConfigRecord()
                self.state_bytes["down"] += nbytes(content[SEND_STATE])
            if shown in self.restore:
                self.restore.discard(shown)
                for name, record in self.states.get(shown, {}).items():
                    content[STATE_PREFIX + name] = record
                    self.state_bytes["down"] += nbytes(record)
            outgoing.append(Message(content, self.node_of[shown], message.metadata.message_type,
                                    ttl=message.metadata.ttl, group_id=message.metadata.group_id))
        replies = list(self.inner.send_and_receive(outgoing, timeout=timeout))
        for reply in replies:
            shown = self.shown[reply.metadata.src_node_id]
            reply.metadata.__dict__["_src_node_id"] = shown  # Metadata has no setter for it
            if reply.has_content():
                names = [name for name in reply.content if name.startswith(STATE_PREFIX)]
                if names:
                    self.states[shown] = {name[len(STATE_PREFIX):]: reply.content[name] for name in names}
                    self.state_bytes["up"] += sum(nbytes(reply.content[name]) for name in names)
                for name in names:
                    del reply.content[name]
        return replies

    # -- checkpoints --------------------------------------------------------------------------

    def state(self) -> dict:
        """Every node's latest context state as serialized Flower objects, by shown id."""
        states = {}
        for shown, records in self.states.items():
            state = RecordDict(records)
            states[shown] = {"root": state.object_id, "objects": wire_objects(state)}
        return {"engine": ENGINE, "states": states, "state_bytes": dict(self.state_bytes)}

    def load_state(self, state: dict) -> None:
        if not isinstance(state, dict) or state.get("engine") != ENGINE:
            raise ValueError("this checkpoint was written by the in-process engine; resume it there "
                             "(a run resumes exactly on the engine it ran on)")
        self.states = {shown: dict(inflate_object_from_contents(saved["root"], dict(saved["objects"])))
                       for shown, saved in state["states"].items()}
        self.restore = set(self.states)
        self.state_bytes = dict(state["state_bytes"])
