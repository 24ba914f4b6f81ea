"""The state database on PostgreSQL (``cluster.databaseUrl``): the same tables and the same
threads as the SQLite backend, on PostgreSQL's own connection.

:class:`PgStateDB` implements :class:`gateway.state.database.StateDB`: everything that takes
the state database takes it unchanged, and the tables run their functions of a
:class:`~gateway.state.connection.Connection` on it as they do on SQLite. It keeps the
shared model: one writer thread and one reader thread, each with its own connection
(psycopg 3, synchronous, on its thread, so the event loop never blocks on the database).
What is its own:

- Connections are :class:`gateway.state.postgres.connection.PgConnection` (PostgreSQL's
  dialect and psycopg's errors as Herald's typed errors); migrations are applied at open
  under an advisory lock (:mod:`gateway.state.postgres.schema`).
- Each write runs in a ``SERIALIZABLE`` transaction. The tables count on SQLite running one
  write at a time (a run's completion reads and updates its row in one transaction); with
  several replicas writing at once, serializable isolation keeps that promise: a write that
  would break it fails with a :class:`WriteConflictError` and is run again whole, with
  backoff.
- Writes that queue up while one runs share the next transaction, and its messages, as on
  SQLite (group commit, :mod:`gateway.state.postgres.groups`); a write alone is one transaction,
  its ``BEGIN`` sent in one message with its first statement and its ``COMMIT`` with its
  last (parameters are bound on the client, so they go as one simple query).
- Reads run in autocommit, one snapshot per statement, as the SQLite reader does: they never
  take part in the serializable writes' conflicts.
- A lost connection raises :class:`StateUnavailableError` and is opened again by the next
  operation; nothing is retried behind the caller's back, since a write cut off at its
  commit may or may not have happened.
- A write the server refuses for want of disk space (SQLSTATE ``53100``) raises
  :class:`DiskFullError` and enters :attr:`space`'s disk-full state, as ``SQLITE_FULL``
  does; its probe measures only the state directory (the transcripts' disk), the one disk
  of the state that is this process's to measure.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import ClassVar, Final, Literal, TypeVar

import psycopg

from configbase import redact_url, url_password
from gateway.backoff import backoff
from gateway.state import diskfull
from gateway.state._group import WriteGroups
from gateway.state.connection import Connection, Dialect
from gateway.state.database import StateDB
from gateway.state.diskfull import Headroom
from gateway.state.errors import (
    DiskFullError,
    ReadOnlyStateError,
    StateClosedError,
    StateUnavailableError,
    WriteConflictError,
)
from gateway.state.postgres.connection import POSTGRESQL, PgConnection, state_error
from gateway.state.postgres.groups import PG_MAX_GROUP, PgGroups
from gateway.state.postgres.prepared import plainly
from gateway.state.postgres.schema import check_current, migrate
from gateway.state.thread import StateThread

log = logging.getLogger(__name__)

T = TypeVar("T")

#: A conflicting write is retried with backoff for up to this long in all.
CONFLICT_RETRY_SECONDS: Final = 120.0
CONFLICT_RETRY_FIRST_SECONDS: Final = 0.005
CONFLICT_RETRY_MAX_DELAY_SECONDS: Final = 1.0
#: Seconds a readiness ping may take: a database slower than this is as good as gone.
PING_SECONDS: Final = 5.0
#: PostgreSQL truncates application_name to 63 bytes.
APPLICATION_NAME_MAX: Final = 63

Role = Literal["writer", "reader"]


class PgStateDB(StateDB):
    """The state database on PostgreSQL. Open with :meth:`connect`; close with
    :meth:`close` (idempotent)."""

    dialect: ClassVar[Dialect] = POSTGRESQL

    def __init__(self, url: str, *, readonly: bool, replica_id: str, state_dir: Path) -> None:
        # Messages name the database by its URL, password masked.
        super().__init__(location=redact_url(url), readonly=readonly)
        #: Where the transcripts are written: the disk the disk-full probe measures.
        self.state_dir = state_dir
        self.url = url
        self.replica_id = replica_id
        self._password = url_password(url)
        self._conns: dict[Role, PgConnection | None] = {"writer": None, "reader": None}
        #: Set once close() has begun: operations queued before it still run on their
        #: connection, but none may open a new one.
        self._closing = False

    @classmethod
    async def connect(
        cls, url: str, *, readonly: bool = False, replica_id: str, state_dir: Path
    ) -> PgStateDB:
        """Connect to ``url`` and, unless ``readonly``, migrate under the advisory lock.

        ``state_dir`` is the gateway's state directory (transcripts), whose disk the
        disk-full state measures. Read-only opens raise :class:`SchemaError` when the schema
        is not the one this code knows; an unreachable server raises
        :class:`StateUnavailableError`.
        """
        db = cls(url, readonly=readonly, replica_id=replica_id, state_dir=Path(state_dir))
        try:
            if not readonly:
                await db._on("writer", db._open_writer_pg)
                if db._writer is not None:
                    runner = PgGroups(functools.partial(db._connection, "writer"))
                    db.write_groups = WriteGroups(db._writer, runner, max_group=PG_MAX_GROUP)
                db.space.attach(asyncio.get_running_loop())
            await db._on("reader", db._open_reader_pg)
        except BaseException:
            await db.close()
            raise
        return db

    async def read(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn(connection)`` on the reader thread (a read-only session, autocommit)."""
        self._check_open()
        return await self._on("reader", lambda: plainly(lambda: fn(self._connection("reader"))))

    async def write(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn(connection)`` on the writer thread in a serializable transaction.

        Returns once the transaction that ran ``fn`` committed (writes queued together share
        one); when ``fn`` raises, its changes are rolled back and the exception re-raised
        here. A write that conflicts with another replica's is run again whole, so ``fn``
        must not have effects outside the connection. A write the server's disk has no room
        for raises :class:`DiskFullError` (nothing of it was kept).
        """
        self._check_open()
        groups = self.write_groups
        if self.readonly or groups is None:
            raise ReadOnlyStateError(f"{self.location} is open read-only")
        deadline = time.monotonic() + CONFLICT_RETRY_SECONDS
        attempt = 0
        while True:
            attempt += 1
            try:
                result = await self._typed(self._queue_write(groups, fn))
            except DiskFullError as exc:
                # As on SQLite: not retried here; the disk-full state says when space is back.
                cause = exc.__cause__ or exc
                self.space.refused("state database", cause)
                raise DiskFullError(f"the disk of {self.location} is full: {exc}") from cause
            except WriteConflictError as exc:
                delay = backoff(
                    attempt,
                    base=CONFLICT_RETRY_FIRST_SECONDS,
                    cap=CONFLICT_RETRY_MAX_DELAY_SECONDS,
                )
                if time.monotonic() + delay > deadline:
                    raise WriteConflictError(self._message(exc)) from exc
                log.debug("state database: write conflict (%s); retrying", exc)
                self.write_conflicts += 1
                await asyncio.sleep(delay)
            else:
                self.space.wrote()
                return result

    async def reachable(self) -> bool:
        """Whether the database answers now (:meth:`ping`)."""
        return await self.ping()

    async def ping(self) -> bool:
        """Whether the database answers within :data:`PING_SECONDS` (``SELECT 1`` on the
        reader's connection, opened again if it was lost)."""
        if self.closed:
            return False
        try:
            async with asyncio.timeout(PING_SECONDS):
                await self._on("reader", lambda: self._connection("reader").execute("SELECT 1"))
        except (StateUnavailableError, StateClosedError, TimeoutError):
            return False
        return True

    async def close(self) -> None:
        """Finish queued operations, close both connections, stop the threads. Idempotent."""
        if self.closed or self._closing:
            return
        self._closing = True
        roles: tuple[tuple[Role, StateThread | None], ...] = (
            ("writer", self._writer),
            ("reader", self._reader),
        )
        for role, thread in roles:
            if thread is not None:  # after the operations queued before it
                await thread.submit(functools.partial(self._disconnect, role))
        self._closed = True
        await self.space.close()
        await self._stop_threads()

    # -- internals (each runs on its role's thread) -----------------------------------------

    def _check_open(self) -> None:
        if self.closed or self._closing:
            raise self._closed_error()

    async def _on(self, role: Role, fn: Callable[[], T]) -> T:
        thread = self._writer if role == "writer" else self._reader
        if thread is None:
            raise ReadOnlyStateError(f"{self.location} is open read-only")
        return await self._typed(self._run(thread, fn))

    async def _typed(self, operation: Awaitable[T]) -> T:
        """``operation``'s outcome, the driver's own errors as Herald's (and a lost
        connection's message naming the database)."""
        try:
            return await operation
        except psycopg.Error as exc:  # opening a connection, or the connection's own calls
            error = state_error(exc)
            if type(error) is StateUnavailableError:
                raise StateUnavailableError(self._message(exc)) from exc
            raise error from exc
        except StateUnavailableError as exc:
            if type(exc) is not StateUnavailableError:
                raise  # a write conflict: write() runs it again
            raise StateUnavailableError(self._message(exc)) from exc.__cause__ or exc

    async def _probe_space(self) -> Headroom | None:
        """The state directory's headroom (:class:`SpaceMonitor`'s probe): no SQLite file to
        checkpoint here, and the server's disk is not this process's to measure."""
        if self.closed or self._closing:
            return None
        return await asyncio.to_thread(diskfull.measure_directory, self.state_dir)

    def _connection(self, role: Role) -> PgConnection:
        """The role's connection, opened again if it was lost."""
        conn = self._conns[role]
        if conn is None or conn.closed:
            if self._closing:
                raise StateClosedError(f"the state database {self.location} is closed")
            if conn is not None:
                log.warning("state database %s: reconnecting (%s)", self.location, role)
            conn = self._conns[role] = self._new_connection(readonly=role == "reader")
        return conn

    def _disconnect(self, role: Role) -> None:
        conn = self._conns[role]
        self._conns[role] = None
        if conn is not None:
            conn.close()

    def _new_connection(self, *, readonly: bool) -> PgConnection:
        name = f"herald:{self.replica_id}"[:APPLICATION_NAME_MAX]
        return PgConnection.connect(self.url, application_name=name, readonly=readonly)

    def _open_writer_pg(self) -> None:
        conn = self._connection("writer")
        self.schema_version = migrate(conn, self.location)

    def _open_reader_pg(self) -> None:
        conn = self._connection("reader")
        if self.readonly:
            self.schema_version = check_current(conn, self.location)

    def _message(self, exc: Exception) -> str:
        # One line (libpq's messages run over several), never the password.
        text = " ".join(f"state database {self.location}: {exc}".split())
        if self._password:
            text = text.replace(self._password, "********")
        return text
