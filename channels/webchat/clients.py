"""What the web chat remembers per browser client: recent messages, run statuses, open pages.

A client is one browser profile (its id lives in localStorage). Everything is bounded: the
history per client, the runs per client, and the number of clients (least recently active
first out, never one with an open page). With a history directory, each client's messages
and run statuses are also kept on disk (:mod:`channels.webchat.history`), so neither a
restart nor an eviction loses them.
"""

from __future__ import annotations

import logging
from collections import OrderedDict, deque

import orjson

from channels.webchat.connection import Connection
from channels.webchat.history import HistoryFiles
from channels.webchat.protocol import delta_frame, ready_frame, typing_frame

log = logging.getLogger(__name__)

#: Sub-agent runs whose latest status is kept per client; a chat rarely has more at once.
RUNS_KEPT = 100


class ClientState:
    """One client's recent frames and open pages."""

    def __init__(
        self, client_id: str, *, history_size: int, files: HistoryFiles | None = None
    ) -> None:
        self.client_id = client_id
        self.history: deque[str] = deque(maxlen=history_size)
        self.runs: OrderedDict[str, str] = OrderedDict()
        self._files = files
        if files is not None:  # what an earlier process (or an evicted state) showed
            loaded = files.load(client_id)
            self.history.extend(loaded.messages)
            self.runs = loaded.runs
        self.connections: set[Connection] = set()
        #: Turns in progress for this client (the typing indicator is on while > 0).
        self.typing = 0
        #: The text so far of each reply being written, by turn id (for pages that join).
        self.streams: dict[str, str] = {}

    def __repr__(self) -> str:
        return (
            f"<ClientState {self.client_id} history={len(self.history)} runs={len(self.runs)} "
            f"pages={len(self.connections)}>"
        )

    def broadcast(self, frame: str) -> None:
        """Push ``frame`` to every open page of this client."""
        for connection in list(self.connections):
            connection.push(frame)

    def has_message(self, message_id: str) -> bool:
        """Whether the kept history holds a message with ``message_id``."""
        return any(message_id in frame and _id_of(frame) == message_id for frame in self.history)

    def add_message(self, frame: str) -> None:
        """Remember a message frame and show it on every open page."""
        self.history.append(frame)
        self._persist(frame)
        self.broadcast(frame)

    def refresh(self) -> int:
        """Take in what other gateway replicas wrote to this client's history file: show
        the messages this process lacks (by id) and the run statuses that changed on
        every open page. Returns how many frames were new. Nothing without a file."""
        if self._files is None:
            return 0
        loaded = self._files.load(self.client_id)
        known = {_id_of(frame) for frame in self.history}
        new = 0
        for frame in loaded.messages:
            if (ident := _id_of(frame)) not in known:
                self.history.append(frame)
                if isinstance(ident, str):
                    # A final reply takes its growing text's place (relayed by the replica
                    # that wrote it, whose end notice never comes if it died).
                    self.streams.pop(ident, None)
                self.broadcast(frame)
                new += 1
        for run_id, frame in loaded.runs.items():
            if self.runs.get(run_id) != frame:
                self._remember_run(run_id, frame)
                self.broadcast(frame)
                new += 1
        return new

    def _persist(self, frame: str) -> None:
        if self._files is not None:
            self._files.append(self.client_id, frame)

    def set_run(self, run_id: str, frame: str) -> None:
        """Remember a run's latest status frame and show it on every open page."""
        self._remember_run(run_id, frame)
        self._persist(frame)
        self.broadcast(frame)

    def _remember_run(self, run_id: str, frame: str) -> None:
        self.runs[run_id] = frame
        self.runs.move_to_end(run_id)
        while len(self.runs) > RUNS_KEPT:
            self.runs.popitem(last=False)

    def attach(self, connection: Connection) -> None:
        """A page said hello: answer ``ready``, then replay messages, runs and typing."""
        self.connections.add(connection)
        connection.push(ready_frame(self.client_id))
        for frame in self.history:
            connection.push(frame)
        for frame in self.runs.values():
            connection.push(frame)
        if self.typing:
            connection.push(typing_frame(True))
        for turn_id, text in self.streams.items():
            connection.push(delta_frame(turn_id, text, reset=True))


class ClientRegistry:
    """Client states by id, least recently active first; bounded by ``max_clients``."""

    def __init__(
        self, *, max_clients: int, history_size: int, files: HistoryFiles | None = None
    ) -> None:
        self._max_clients = max_clients
        self._history_size = history_size
        self._files = files
        self._clients: OrderedDict[str, ClientState] = OrderedDict()

    def __repr__(self) -> str:
        return f"<ClientRegistry clients={len(self._clients)} max={self._max_clients}>"

    def __len__(self) -> int:
        return len(self._clients)

    def __contains__(self, client_id: object) -> bool:
        return client_id in self._clients

    def get(self, client_id: str) -> ClientState:
        """The state of ``client_id`` (created when new), marked as most recently active."""
        state = self._clients.get(client_id)
        if state is None:
            state = self._clients[client_id] = ClientState(
                client_id, history_size=self._history_size, files=self._files
            )
            self._evict(keep=client_id)
        else:
            self._clients.move_to_end(client_id)
        return state

    def _evict(self, *, keep: str) -> None:
        excess = len(self._clients) - self._max_clients
        if excess <= 0:
            return
        # Clients with an open page stay; their number is bounded by the open sockets.
        idle = [
            cid for cid, state in self._clients.items() if not state.connections and cid != keep
        ][:excess]
        for client_id in idle:
            del self._clients[client_id]
            log.debug("web chat client forgotten", extra={"client": client_id})

    def all(self) -> list[ClientState]:
        return list(self._clients.values())


def _id_of(frame: str) -> object:
    """A message frame's id (None when it has none)."""
    data = orjson.loads(frame)
    return data.get("id") if isinstance(data, dict) else None
