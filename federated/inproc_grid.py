"""A Flower ``Grid`` that runs a ClientApp for every simulated node in this process.

Each message is serialized and inflated on the way to the client and back (see
:mod:`.wire`), so a client never shares an object with the server, exactly as over a real
link. Clients run one after another in a fixed order, so a run is deterministic. A
ClientApp that raises answers with an error reply, as Flower's engines do. The node
contexts (each client's persistent state) are part of :meth:`state`, so an in-process run
can be checkpointed and resumed whole.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Iterable

from flwr.app import Context, Error, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.constant import SUPERLINK_NODE_ID, ErrorCode
from flwr.serverapp import Grid
from flwr.supercore.inflatable.inflatable_utils import inflate_object_from_contents
from flwr.supercore.run import Run
from flwr.supercore.task_identity import TaskIdentity

from .wire import wire_copy, wire_objects

FIRST_NODE_ID = 1000


class InProcessGrid(Grid):
    """``num_nodes`` simulated nodes running ``client_app``; node ``i`` has ``partition-id = i``."""

    def __init__(self, client_app: ClientApp, num_nodes: int, run_config: dict | None = None, run_id: int = 1):
        if num_nodes < 1:
            raise ValueError(f"num_nodes must be at least 1, got {num_nodes}")
        self.client_app = client_app
        self._run = Run.create_empty(run_id)
        self._run.override_config = dict(run_config or {})
        self.contexts = {
            FIRST_NODE_ID + i: Context(run_id, FIRST_NODE_ID + i, {"partition-id": i, "num-partitions": num_nodes},
                                       RecordDict(), dict(run_config or {}))
            for i in range(num_nodes)}
        self._replies: dict[str, Message] = {}
        self._sent = 0
        self.client_seconds = 0.0  # inside ClientApps: the clients' own work
        self.engine_seconds = 0.0  # serializing and delivering messages
        # Messages are created in this process as the server would create them in a ServerApp process.
        TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, run_id, SUPERLINK_NODE_ID

    def set_run(self, run: Run) -> None:
        self._run = run

    @property
    def run(self) -> Run:
        return self._run

    def create_message(self, content: RecordDict, message_type: str, dst_node_id: int, group_id: str,
                       ttl: float | None = None) -> Message:
        return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self) -> list[int]:
        return list(self.contexts)

    def push_messages(self, messages: Iterable[Message]) -> list[str]:
        ids = []
        for message in messages:
            node = message.metadata.dst_node_id
            if node not in self.contexts:
                raise ValueError(f"message for node {node}, which is not in this grid (nodes: {list(self.contexts)})")
            self._sent += 1
            message.metadata.__dict__["_message_id"] = f"{self._run.run_id}.{self._sent}"
            began = time.perf_counter()
            delivered, _ = wire_copy(message)
            ran = time.perf_counter()
            try:
                reply = self.client_app(delivered, self.contexts[node])
            except Exception as err:  # noqa: BLE001 (any crash of a client answers with an error, as on Flower's engines)
                reason = "".join(traceback.format_exception_only(err)).strip()
                reply = Message(Error(ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason), reply_to=delivered)
            done = time.perf_counter()
            self._replies[message.metadata.message_id], _ = wire_copy(reply)
            self.client_seconds += done - ran
            self.engine_seconds += (ran - began) + (time.perf_counter() - done)
            ids.append(message.metadata.message_id)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> list[Message]:
        return [self._replies.pop(i) for i in message_ids if i in self._replies]

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> list[Message]:
        """Every reply, at once: in process nothing is ever late (a NetworkGrid on top models time)."""
        return self.pull_messages(self.push_messages(messages))

    # -- checkpoints ----------------------------------------------------------------------

    def state(self) -> dict:
        """Every node's context state as serialized Flower objects, and the message counter."""
        return {"sent": self._sent,
                "contexts": {node: {"root": ctx.state.object_id, "objects": wire_objects(ctx.state)}
                             for node, ctx in self.contexts.items()}}

    def load_state(self, state: dict) -> None:
        if "contexts" not in state:
            raise ValueError("this checkpoint was written by one of Flower's engines; resume it there "
                             "(a run resumes exactly on the engine it ran on)")
        self._sent = state["sent"]
        for node, saved in state["contexts"].items():
            self.contexts[node].state = inflate_object_from_contents(saved["root"], dict(saved["objects"]))
