"""The state database as the rest of Herald sees it, whichever backend keeps it.

:class:`StateDB` is the interface both backends implement —
:class:`gateway.state.sqlite.SqliteStateDB` (a file, the default) and
:class:`gateway.state.postgres.PgStateDB` (``cluster.databaseUrl``) — and the part they
share: the tables (:attr:`StateDB.sessions`, :attr:`StateDB.runs`, :attr:`StateDB.outbox`,
:attr:`StateDB.batches`, :attr:`StateDB.ends`, …), the disk-full state
(:attr:`StateDB.space`), and the two threads every operation runs on (one writer, one
reader, so the event loop never blocks on a driver). What a backend says for itself is how
it connects, migrates, runs a write (its transaction, its group commit, its retries) and
closes. Neither backend derives from the other: what both need lives here, what differs
lives in each backend's package.

Anything beyond the tables can use :meth:`StateDB.read`/:meth:`StateDB.write` with a
function of a :class:`~gateway.state.connection.Connection`.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import ClassVar, TypeVar

from gateway.state._group import WriteGroups
from gateway.state.batches import BatchesTable
from gateway.state.claims import ClaimsTable
from gateway.state.connection import Connection, Dialect
from gateway.state.cursors import CursorTable
from gateway.state.diskfull import Headroom, SpaceMonitor
from gateway.state.errors import ReadOnlyStateError, StateClosedError
from gateway.state.inbound import InboundTable
from gateway.state.outbox import OutboxTable
from gateway.state.replicas import ReplicasTable
from gateway.state.runends import RunEndsTable
from gateway.state.runs import RunsTable
from gateway.state.seen import SeenTable
from gateway.state.sessions import SessionsTable
from gateway.state.steers import SteersTable
from gateway.state.thread import StateThread

T = TypeVar("T")


class StateDB(ABC):
    """The state database (see the module docstring). A backend's class opens one; close it
    with :meth:`close` (idempotent)."""

    #: How this backend's SQL differs (the tables ask it for what is not portable).
    dialect: ClassVar[Dialect]

    def __init__(self, *, location: str, readonly: bool) -> None:
        #: Where the database is, for messages: a file, or a URL with its password masked.
        self.location = location
        self.readonly = readonly
        self.schema_version = 0
        self._closed = False
        self._writer = None if readonly else StateThread("herald-db-writer")
        self._reader = StateThread("herald-db-reader")
        #: The writer thread's queue of writes, committed in groups (once open).
        self.write_groups: WriteGroups | None = None
        #: Writes run again, with backoff, after meeting another connection's (a lock held
        #: past busy_timeout on SQLite, a serialization failure on PostgreSQL).
        self.write_conflicts = 0
        self.sessions = SessionsTable(self)
        self.runs = RunsTable(self, session_changed=self.sessions.forget)
        self.outbox = OutboxTable(self)
        self.batches = BatchesTable(self)
        self.ends = RunEndsTable(self, session_changed=self.sessions.forget)
        self.claims = ClaimsTable(self)
        self.seen = SeenTable(self)
        self.inbound = InboundTable(self)
        self.cursors = CursorTable(self)
        self.replicas = ReplicasTable(self)
        self.steers = SteersTable(self)
        #: The disk-full state of the state directory (transcripts report to it too).
        self.space = SpaceMonitor(self._probe_space)

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("read-only" if self.readonly else "open")
        return f"<{type(self).__name__} {self.location} {state} version={self.schema_version}>"

    @property
    def closed(self) -> bool:
        return self._closed

    @abstractmethod
    async def read(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn(connection)`` on the reader thread (a read-only connection)."""

    @abstractmethod
    async def write(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn(connection)`` on the writer thread inside a transaction.

        Returns once the transaction that ran ``fn`` committed (writes queued together share
        one); when ``fn`` raises, its changes are rolled back and the exception is re-raised
        here. ``fn`` may run more than once (a write that met another, a group whose
        transaction was lost), so it must not have effects outside the connection. A write
        the disk has no room for raises :class:`~gateway.state.errors.DiskFullError`
        (nothing of it was kept).
        """

    @abstractmethod
    async def reachable(self) -> bool | None:
        """Whether a shared database answers now; None where the database is a local file
        (always there while the process runs)."""

    @abstractmethod
    async def close(self) -> None:
        """Finish queued operations, close the connections, stop the threads. Idempotent."""

    @abstractmethod
    async def _probe_space(self) -> Headroom | None:
        """The disk-full state's probe (:class:`SpaceMonitor`): the headroom now, or None
        once closed."""

    # -- shared by the backends --------------------------------------------------------------

    def _closed_error(self) -> StateClosedError:
        return StateClosedError(f"the state database {self.location} is closed")

    async def _run(self, thread: StateThread | None, fn: Callable[[], T]) -> T:
        """``fn()`` on ``thread`` (the writer's or the reader's)."""
        if thread is None:
            raise ReadOnlyStateError(f"{self.location} is open read-only")
        try:
            future = thread.submit(fn)
        except RuntimeError:
            # The thread refuses work after shutdown: report it as the typed error.
            raise self._closed_error() from None
        return await future

    async def _queue_write(self, groups: WriteGroups, fn: Callable[[Connection], T]) -> T:
        """``fn`` queued for the writer's next group; its result once that committed."""
        try:
            future = groups.submit(fn)
        except RuntimeError:
            # The thread refuses work after shutdown: report it as the typed error.
            raise self._closed_error() from None
        return await future

    async def _stop_threads(self) -> None:
        """The end of :meth:`close`, once the backend closed its connections."""
        for thread in (self._writer, self._reader):
            if thread is not None:
                await asyncio.to_thread(thread.shutdown)
