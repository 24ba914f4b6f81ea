"""The state database: SQLite at ``<stateDir>/herald.db``, the source of truth after a restart.

One dedicated writer thread owns the read-write connection: every write runs there, one at
a time, so there is exactly one writer and the event loop never blocks on SQLite. Writes
that queue up while a transaction commits share the next ``BEGIN IMMEDIATE`` transaction
(group commit, :mod:`gateway.state._group`): each runs in a savepoint of its own, so a
failing write rolls back alone and raises to its own caller, and every caller hears of its
write only after the commit that kept it. Reads run on a second thread with its own read-only
connection; WAL lets them proceed while a write is in progress, and a read issued after a
write's awaitable resolved sees that write. ``herald`` CLI commands open the same file
read-only while the daemon runs.

Settings: ``journal_mode=WAL`` (readers never block the writer), ``synchronous=NORMAL``
(with WAL a crash cannot corrupt the file; a power cut may lose the last commits),
``busy_timeout`` (another process — a CLI reader, a second daemon by mistake — waits
instead of failing at once), ``foreign_keys=ON``. At open, migrations from
:mod:`gateway.state.schema` are applied in order. The file is created ``0600``.

A write the disk has no room for raises :class:`DiskFullError` at once and puts
:attr:`StateDB.space` in its disk-full state (:mod:`gateway.state.diskfull`), which
checkpoints the WAL and tells its listeners when space is back.

Table access lives in :attr:`StateDB.sessions`, :attr:`StateDB.runs`,
:attr:`StateDB.outbox`, :attr:`StateDB.batches`, :attr:`StateDB.ends` (a run's end and its
result's way on), :attr:`StateDB.seen`, :attr:`StateDB.steers` and others; anything else can
use :meth:`StateDB.read`/:meth:`StateDB.write` with a function of a
:class:`~gateway.state.connection.Connection` (here :class:`gateway.state.sqlite.SqliteConnection`:
sqlite3's errors arrive as :mod:`gateway.state.errors`').
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar, Final, TypeVar
from urllib.parse import quote

from gateway.backoff import backoff
from gateway.files import ensure_dir
from gateway.state import diskfull
from gateway.state._group import SqliteGroups, WriteGroups
from gateway.state.batches import BatchesTable
from gateway.state.claims import ClaimsTable
from gateway.state.connection import SQLITE, Connection, Dialect
from gateway.state.cursors import CursorTable
from gateway.state.diskfull import Headroom, SpaceMonitor
from gateway.state.errors import (
    DiskFullError,
    ReadOnlyStateError,
    SchemaError,
    StateClosedError,
    StateError,
    StateMissingError,
    WriteConflictError,
)
from gateway.state.inbound import InboundTable
from gateway.state.outbox import OutboxTable
from gateway.state.replicas import ReplicasTable
from gateway.state.runends import RunEndsTable
from gateway.state.runs import RunsTable
from gateway.state.schema import LATEST_VERSION, MIGRATIONS
from gateway.state.seen import SeenTable
from gateway.state.sessions import SessionsTable
from gateway.state.sqlite import SqliteConnection, state_error
from gateway.state.steers import SteersTable
from gateway.state.thread import StateThread

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Milliseconds another connection may hold a lock before an operation fails.
BUSY_TIMEOUT_MS: Final = 5000
#: After busy_timeout, a locked write is retried with backoff for up to this long in all.
LOCKED_RETRY_SECONDS: Final = 120.0
LOCKED_RETRY_FIRST_SECONDS: Final = 0.05
LOCKED_RETRY_MAX_DELAY_SECONDS: Final = 5.0
DB_FILE_MODE: Final = 0o600


class StateDB:
    """The state database. Open with :meth:`open`; close with :meth:`close` (idempotent)."""

    #: How this backend's SQL differs (the tables ask it for what is not portable).
    dialect: ClassVar[Dialect] = SQLITE

    def __init__(self, path: Path, *, readonly: bool) -> None:
        self.path = path
        self.readonly = readonly
        self.schema_version = 0
        self._closed = False
        self._writer = None if readonly else StateThread("herald-db-writer")
        self._reader = StateThread("herald-db-reader")
        self._wconn: sqlite3.Connection | None = None
        self._rconn: SqliteConnection | None = None
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
        return f"<StateDB {self.path} {state} version={self.schema_version}>"

    @property
    def closed(self) -> bool:
        return self._closed

    @classmethod
    async def open(cls, path: Path, *, readonly: bool = False) -> StateDB:
        """Open (creating and migrating unless ``readonly``) the database at ``path``.

        Read-only opens raise :class:`StateMissingError` when there is no file, and
        :class:`SchemaError` when its schema is not the one this code knows.
        """
        db = cls(Path(path), readonly=readonly)
        try:
            if not readonly:
                db._wconn = await db._run(db._writer, db._open_writer)
                if db._writer is not None:
                    db.write_groups = WriteGroups(db._writer, SqliteGroups(db._wconn))
                db.space.attach(asyncio.get_running_loop())
            db._rconn = SqliteConnection(await db._run(db._reader, db._open_reader))
        except BaseException:
            await db.close()
            raise
        return db

    async def read(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn(connection)`` on the reader thread (a read-only connection)."""
        self._check_open()
        conn = self._rconn
        if conn is None:
            raise StateClosedError("the state database is not open")
        return await self._run(self._reader, lambda: fn(conn))

    async def write(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn(connection)`` on the writer thread inside a transaction.

        Returns once the transaction that ran ``fn`` committed (writes queued together share
        one); when ``fn`` raises, its changes are rolled back, the others' are not, and the
        exception is re-raised here. ``fn`` may run more than once (a locked database, a
        group whose transaction a full disk ended), so it must not have effects outside the
        connection. A write the disk has no room for raises :class:`DiskFullError`
        (nothing of it was kept).
        """
        self._check_open()
        groups = self.write_groups
        if self.readonly or self._wconn is None or groups is None:
            raise ReadOnlyStateError(f"{self.path} is open read-only")
        deadline = time.monotonic() + LOCKED_RETRY_SECONDS
        attempt = 0
        while True:
            attempt += 1
            try:
                result = await self._queue_write(groups, fn)
            except sqlite3.Error as exc:  # the group's BEGIN or COMMIT, on the bare connection
                error: StateError = state_error(exc)
                cause: BaseException = exc
            except (DiskFullError, WriteConflictError) as exc:
                error, cause = exc, exc.__cause__ or exc
            else:
                self.space.wrote()
                return result
            if isinstance(error, DiskFullError):
                # Not retried here: a chat turn answers at once, a run's bookkeeping waits
                # for space (the disk-full state says when it is back).
                self.space.refused("state database", cause)
                raise DiskFullError(f"the disk of {self.path} is full: {error}") from cause
            # Another process holds the lock past busy_timeout (a long CLI read, a backup):
            # keep trying for a while rather than fail a run that finished fine.
            delay = backoff(
                attempt, base=LOCKED_RETRY_FIRST_SECONDS, cap=LOCKED_RETRY_MAX_DELAY_SECONDS
            )
            if not isinstance(error, WriteConflictError) or time.monotonic() + delay > deadline:
                raise error from cause
            log.warning("state database %s is locked; retrying in %.1fs", self.path, delay)
            self.write_conflicts += 1
            await asyncio.sleep(delay)

    async def close(self) -> None:
        """Finish queued operations, close both connections, stop the threads. Idempotent."""
        if self._closed:
            return
        self._closed = True
        await self.space.close()
        for thread, attr in ((self._writer, "_wconn"), (self._reader, "_rconn")):
            if thread is None:
                continue
            conn = getattr(self, attr)
            if conn is not None:
                setattr(self, attr, None)
                raw = conn.raw if isinstance(conn, SqliteConnection) else conn
                await thread.submit(raw.close)
            await asyncio.to_thread(thread.shutdown)

    # -- internals --------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StateClosedError(f"the state database {self.path} is closed")

    async def _run(self, thread: StateThread | None, fn: Callable[[], T]) -> T:
        if thread is None:
            raise ReadOnlyStateError(f"{self.path} is open read-only")
        try:
            future = thread.submit(fn)
        except RuntimeError:
            # The thread refuses work after shutdown: report it as the typed error.
            raise StateClosedError(f"the state database {self.path} is closed") from None
        return await future

    async def _queue_write(self, groups: WriteGroups, fn: Callable[[Connection], T]) -> T:
        try:
            future = groups.submit(fn)
        except RuntimeError:
            # The thread refuses work after shutdown: report it as the typed error.
            raise StateClosedError(f"the state database {self.path} is closed") from None
        return await future

    async def _probe_space(self) -> Headroom | None:
        """Checkpoint and measure on the writer's thread (:class:`SpaceMonitor`'s probe)."""
        conn = self._wconn
        if self._closed or conn is None:
            return None
        return await self._run(
            self._writer, lambda: diskfull.checkpoint_and_measure(conn, self.path)
        )

    def _open_writer(self) -> sqlite3.Connection:
        ensure_dir(self.path.parent)
        if not self.path.exists():
            # SQLite creates files 0644; the journal and WAL files copy the main file's mode.
            os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, DB_FILE_MODE))
        conn = _connect(str(self.path), uri=False)
        try:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if mode != "wal":
                log.warning("state database %s: journal mode is %s, not wal", self.path, mode)
            conn.execute("PRAGMA synchronous=NORMAL")
            self.schema_version = _migrate(conn, self.path)
        except BaseException:
            conn.close()
            raise
        return conn

    def _open_reader(self) -> sqlite3.Connection:
        if not self.path.exists():
            raise StateMissingError(f"no state database at {self.path}")
        conn = _connect(f"file:{quote(str(self.path))}?mode=ro", uri=True)
        try:
            conn.execute("PRAGMA query_only=ON")
            if self.readonly:
                version = _current_version(conn)
                if version != LATEST_VERSION:
                    raise SchemaError(
                        f"{self.path} has schema version {version}; this Herald reads "
                        f"version {LATEST_VERSION} (start the daemon once to migrate)"
                    )
                self.schema_version = version
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise StateError(f"cannot read {self.path}: {exc}") from exc
        except BaseException:
            conn.close()
            raise
        return conn


def _connect(target: str, *, uri: bool) -> sqlite3.Connection:
    # isolation_level=None: transactions are explicit (BEGIN IMMEDIATE in the write groups).
    conn = sqlite3.connect(
        target,
        uri=uri,
        isolation_level=None,
        check_same_thread=False,  # created on one thread, used only on its executor's thread
        timeout=BUSY_TIMEOUT_MS / 1000,
    )
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA foreign_keys=ON")
    return conn


def _current_version(conn: sqlite3.Connection) -> int:
    exists = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
    ).fetchone()
    if exists is None:
        return 0
    row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
    return int(row[0] or 0)


def _migrate(conn: sqlite3.Connection, path: Path) -> int:
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_version "
        "(version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)"
    )
    current = _current_version(conn)
    if current > LATEST_VERSION:
        raise SchemaError(
            f"{path} has schema version {current}, newer than this Herald ({LATEST_VERSION})"
        )
    for version in range(current + 1, LATEST_VERSION + 1):
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in MIGRATIONS[version - 1]:
                conn.execute(statement)
            conn.execute(
                "INSERT INTO schema_version (version, applied_at) VALUES (?, ?)",
                (version, time.time()),
            )
        except sqlite3.Error as exc:
            conn.execute("ROLLBACK")
            raise SchemaError(f"{path}: migration to version {version} failed: {exc}") from exc
        conn.execute("COMMIT")
        log.info("state database %s: migrated to schema version %d", path, version)
    return LATEST_VERSION
