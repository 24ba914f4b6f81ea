"""The state database in SQLite at ``<stateDir>/herald.db``, the source of truth after a
restart (:class:`SqliteStateDB`, the default backend).

One dedicated writer thread owns the read-write connection: every write runs there, one at
a time, so there is exactly one writer and the event loop never blocks on SQLite. Writes
that queue up while a transaction commits share the next ``BEGIN IMMEDIATE`` transaction
(group commit, :mod:`gateway.state.sqlite.groups`): each runs in a savepoint of its own, so
a failing write rolls back alone and raises to its own caller, and every caller hears of its
write only after the commit that kept it. Reads run on a second thread with its own read-only
connection; WAL lets them proceed while a write is in progress, and a read issued after a
write's awaitable resolved sees that write. ``herald`` CLI commands open the same file
read-only while the daemon runs.

Settings: ``journal_mode=WAL`` (readers never block the writer), ``synchronous=NORMAL``
(with WAL a crash cannot corrupt the file; a power cut may lose the last commits),
``busy_timeout`` (another process — a CLI reader, a second daemon by mistake — waits
instead of failing at once), ``foreign_keys=ON``. At open, the pending migrations are
applied in order (:mod:`gateway.state.sqlite.schema`). The file is created ``0600``.

A write the disk has no room for raises :class:`DiskFullError` at once and puts
:attr:`~gateway.state.database.StateDB.space` in its disk-full state
(:mod:`gateway.state.diskfull`); its probe here checkpoints the WAL and measures the file's
headroom (:func:`checkpoint_and_measure`).

The tables and everything else both backends share are
:class:`~gateway.state.database.StateDB`'s; the connection the tables are given is a
:class:`~gateway.state.sqlite.connection.SqliteConnection` (sqlite3's errors arrive as
:mod:`gateway.state.errors`').
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
from gateway.state._group import WriteGroups
from gateway.state.connection import Connection, Dialect
from gateway.state.database import StateDB
from gateway.state.diskfull import Headroom, file_size
from gateway.state.errors import (
    DiskFullError,
    ReadOnlyStateError,
    StateClosedError,
    StateError,
    StateMissingError,
    WriteConflictError,
)
from gateway.state.sqlite.connection import SQLITE, SqliteConnection, state_error
from gateway.state.sqlite.groups import SqliteGroups
from gateway.state.sqlite.schema import check_current, migrate

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Milliseconds another connection may hold a lock before an operation fails.
BUSY_TIMEOUT_MS: Final = 5000
#: After busy_timeout, a locked write is retried with backoff for up to this long in all.
LOCKED_RETRY_SECONDS: Final = 120.0
LOCKED_RETRY_FIRST_SECONDS: Final = 0.05
LOCKED_RETRY_MAX_DELAY_SECONDS: Final = 5.0
DB_FILE_MODE: Final = 0o600


class SqliteStateDB(StateDB):
    """The state database in a SQLite file. Open with :meth:`open`; close with :meth:`close`
    (idempotent)."""

    dialect: ClassVar[Dialect] = SQLITE

    def __init__(self, path: Path, *, readonly: bool) -> None:
        super().__init__(location=str(path), readonly=readonly)
        self.path = path
        self._wconn: sqlite3.Connection | None = None
        self._rconn: SqliteConnection | None = None

    @classmethod
    async def open(cls, path: Path, *, readonly: bool = False) -> SqliteStateDB:
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
        """Run ``fn(connection)`` on the writer thread inside a ``BEGIN IMMEDIATE``
        transaction (see :meth:`StateDB.write`). A write that finds the database locked by
        another process past ``busy_timeout`` is run again with backoff."""
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

    async def reachable(self) -> None:
        """None: a local file is always there while the process runs."""
        return None

    async def close(self) -> None:
        """Finish queued operations, close both connections, stop the threads. Idempotent."""
        if self._closed:
            return
        self._closed = True
        await self.space.close()
        if self._writer is not None and self._wconn is not None:
            wconn, self._wconn = self._wconn, None
            await self._writer.submit(wconn.close)
        if self._rconn is not None:
            rconn, self._rconn = self._rconn, None
            await self._reader.submit(rconn.raw.close)
        await self._stop_threads()

    # -- internals --------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise self._closed_error()

    async def _probe_space(self) -> Headroom | None:
        """Checkpoint and measure on the writer's thread (:class:`SpaceMonitor`'s probe)."""
        conn = self._wconn
        if self._closed or conn is None:
            return None
        return await self._run(self._writer, lambda: checkpoint_and_measure(conn, self.path))

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
            self.schema_version = migrate(conn, self.path)
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
                self.schema_version = check_current(conn, self.path)
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise StateError(f"cannot read {self.path}: {exc}") from exc
        except BaseException:
            conn.close()
            raise
        return conn


def checkpoint_and_measure(conn: sqlite3.Connection, db_path: Path) -> Headroom:
    """Checkpoint the WAL into the database and truncate it, then measure the headroom.

    Runs on the writer's thread with its connection (``max_page_count`` is per connection).
    A checkpoint the disk refuses raises, which a probe takes as "still full".
    """
    wal = db_path.with_name(db_path.name + "-wal")
    before = file_size(wal)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    after = file_size(wal)

    def pragma(name: str) -> int:
        return int(conn.execute(f"PRAGMA {name}").fetchone()[0])

    pages = pragma("max_page_count") - pragma("page_count") + pragma("freelist_count")
    volume = os.statvfs(db_path.parent)
    return Headroom(
        volume_bytes=volume.f_bavail * volume.f_frsize,
        database_bytes=pages * pragma("page_size"),
        wal_before=before,
        wal_after=after,
    )


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
