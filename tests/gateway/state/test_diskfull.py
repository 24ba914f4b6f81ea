"""The state database on a full disk: the refusal, the disk-full state, the WAL afterwards.

On both backends the disk fills for real as far as the state layer can tell:

- SQLite: ``PRAGMA max_page_count`` on the database's own writer connection makes SQLite
  answer ``SQLITE_FULL`` ("database or disk is full") for any write that needs a page past
  it, exactly as when the volume has no room. SQLite never lowers the limit below the pages
  in use, so ``max_page_count = 1`` caps the database at its current size; raising the limit
  is an operator freeing space. Writes that fit in pages the database already has still go
  through, as they do on a real full disk.
- PostgreSQL: a trigger on ``sessions`` makes the real server refuse new rows with SQLSTATE
  ``53100`` (``disk_full``) and the message PostgreSQL gives when it cannot extend a file
  (:func:`tests.postgres.fill_disk`); updates of existing rows still go through. A deferred
  constraint trigger refuses at ``COMMIT`` instead. Dropping the trigger is the operator
  freeing space.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import sqlite3
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import psycopg
import pytest

from gateway.state import (
    ConstraintError,
    DiskFullError,
    SessionRecord,
    SqliteStateDB,
    StateDB,
    diskfull,
)
from gateway.state.connection import Connection
from gateway.state.diskfull import Headroom
from gateway.state.postgres import PgStateDB
from gateway.state.sqlite import database as sqlite_database
from tests import postgres
from tests.gateway.state.conftest import StateTarget
from tests.gateway.state.records import session_record

#: Guard against a hung test; never an assertion about speed.
GUARD_SECONDS = 20.0
#: Bigger than a page: a row holding it needs new (overflow) pages.
BIG = "x" * 20_000


def session(label: str | None = None) -> SessionRecord:
    return session_record(f"agent:main:webchat:{uuid.uuid4().hex[:12]}", label=label)


def _limit(conn: Connection, pages: int) -> int:
    conn.execute(f"PRAGMA max_page_count = {pages}")
    return int(conn.execute("PRAGMA max_page_count").fetchone()[0])


async def fill_sqlite(db: StateDB) -> int:
    """Cap the database at its current size; returns that size in pages."""
    return await db.write(lambda conn: _limit(conn, 1))


async def free_sqlite(db: StateDB) -> None:
    await db.write(lambda conn: _limit(conn, 1_000_000_000))


async def fill_postgres(url: str, *, at_commit: bool = False) -> None:
    await asyncio.to_thread(postgres.fill_disk, url, at_commit=at_commit)


async def free_postgres(url: str) -> None:
    await asyncio.to_thread(postgres.free_disk, url)


def disk_of(target: StateTarget) -> tuple[Callable[[StateDB], Awaitable[object]], ...]:
    """(fill, free) of ``target``'s backend."""
    url = target.url
    if url is None:
        return fill_sqlite, free_sqlite
    return (lambda _db: fill_postgres(url)), (lambda _db: free_postgres(url))


def wal_size(db: StateDB) -> int:
    assert isinstance(db, SqliteStateDB)
    wal = db.path.with_name(db.path.name + "-wal")
    return wal.stat().st_size if wal.exists() else 0


@pytest.fixture
async def sqlite_db(tmp_path: Path) -> AsyncIterator[StateDB]:
    """A SQLite state database, for what only SQLite has (its page limit, its WAL)."""
    db = await SqliteStateDB.open(tmp_path / "herald.db")
    try:
        yield db
    finally:
        await db.close()


@pytest.fixture
def disk_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG, logger=diskfull.__name__)
    return caplog


def state_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    """The disk-full state's log lines above DEBUG: (level, message)."""
    return [
        (r.levelname, r.getMessage())
        for r in caplog.records
        if r.name == diskfull.__name__ and r.levelno > logging.DEBUG
    ]


async def test_a_write_the_disk_refuses_raises_disk_full_and_keeps_nothing(
    state_target: StateTarget, db: StateDB
) -> None:
    fill, free = disk_of(state_target)
    small = await db.sessions.create(session())
    await fill(db)
    refused = session(label=BIG)
    with pytest.raises(DiskFullError, match="is full") as caught:
        await db.sessions.create(refused)
    # The driver's refusal itself, not the failed ROLLBACK after SQLite had already rolled
    # back: SQLite's SQLITE_FULL, or PostgreSQL's disk_full as the server sent it.
    cause = caught.value.__cause__
    if state_target.url is None:
        assert isinstance(cause, sqlite3.OperationalError)
        assert cause.sqlite_errorcode == sqlite3.SQLITE_FULL
    else:
        assert isinstance(cause, psycopg.errors.DiskFull)
        assert cause.sqlstate == "53100"
        assert postgres.DISK_FULL_MESSAGE in str(caught.value)
    assert await db.sessions.get(refused.key) is None
    assert db.space.full
    # The connection is fine: a write that fits goes through while the disk is full.
    assert (await db.sessions.touch(small[0].key, at=2.0)).updated_at == 2.0
    await free(db)
    assert (await db.sessions.create(refused))[1]


@pytest.mark.postgres
async def test_a_commit_the_servers_disk_refuses_is_disk_full_too(
    pg_url: str, tmp_path: Path
) -> None:
    # On a real full disk PostgreSQL may refuse at COMMIT (a deferred write); that answer
    # comes from a live server, not a lost one, so it is the disk, not "unavailable".
    db = await PgStateDB.connect(pg_url, replica_id="full", state_dir=tmp_path)
    try:
        await fill_postgres(pg_url, at_commit=True)
        refused = session()
        with pytest.raises(DiskFullError, match="No space left on device"):
            await db.sessions.create(refused)
        assert db.space.full
        assert await db.sessions.get(refused.key) is None
        await free_postgres(pg_url)
        assert (await db.sessions.create(refused))[1]
    finally:
        await db.close()


async def test_a_failed_commit_leaves_no_transaction_open(sqlite_db: StateDB) -> None:
    db = sqlite_db

    # A COMMIT can fail (on a real full disk it is where the WAL grows); a deferred foreign
    # key is a refusal at COMMIT that real SQLite gives on demand.
    def orphan_run(conn: Connection) -> None:
        conn.execute("PRAGMA defer_foreign_keys = ON")
        conn.execute(
            "INSERT INTO runs (run_id, child_session_key, child_session_id,"
            " requester_agent_id, agent_id, task, status, created_at)"
            " VALUES ('r1', 'agent:main:subagent:none', 's', 'main', 'main', 't', 'queued', 1)"
        )

    with pytest.raises(ConstraintError, match="FOREIGN KEY"):
        await db.write(orphan_run)
    # Every later write would otherwise fail: "cannot start a transaction within a transaction".
    _, created = await db.sessions.create(session())
    assert created
    assert await db.runs.get("r1") is None


async def test_disk_full_is_logged_once_and_its_end_once(
    sqlite_db: StateDB, disk_log: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = sqlite_db
    probes: list[Headroom] = []
    probed = asyncio.Event()
    measure = sqlite_database.checkpoint_and_measure

    def counted(conn: sqlite3.Connection, path: Path) -> Headroom:
        room = measure(conn, path)
        probes.append(room)
        probed.set()
        return room

    monkeypatch.setattr(sqlite_database, "checkpoint_and_measure", counted)
    back: list[bool] = []
    db.space.subscribe(lambda: back.append(db.space.full))
    kept = (await db.sessions.create(session()))[0]
    await fill_sqlite(db)
    for _ in range(10):
        with pytest.raises(DiskFullError):
            await db.sessions.create(session(label=BIG))
    # Writes that fit keep going through, and wake the probe; none of them ends the state.
    async with asyncio.timeout(GUARD_SECONDS):  # a hang guard
        while len(probes) < 3:
            await db.sessions.touch(kept.key, at=float(len(probes)))
            probed.clear()
            await probed.wait()
    assert db.space.full
    assert not any(room.enough for room in probes)
    with pytest.raises(DiskFullError):
        await db.sessions.create(session(label=BIG))
    await free_sqlite(db)
    assert await db.space.wait_for_space(GUARD_SECONDS)

    lines = state_lines(disk_log)
    assert [level for level, _ in lines] == ["WARNING", "INFO"], lines
    assert "disk full: the state database refused a write" in lines[0][1]
    assert "disk space is back" in lines[1][1]
    assert db.space.refusals == 11
    assert back == [False]  # listeners hear once, after the state has ended
    assert (await db.sessions.create(session(label=BIG)))[1]


async def test_the_wal_is_truncated_once_space_is_back(sqlite_db: StateDB) -> None:
    db = sqlite_db
    # SQLite checkpoints by itself only at ~4 MB of WAL and never shrinks the file: on a
    # small volume that is the space freed by the operator, taken straight back.
    for _ in range(40):
        await db.sessions.create(session(label="y" * 2000))
    await fill_sqlite(db)
    with pytest.raises(DiskFullError):
        await db.sessions.create(session(label=BIG))
    before = wal_size(db)
    await free_sqlite(db)
    assert await db.space.wait_for_space(GUARD_SECONDS)
    assert before > 100_000
    assert wal_size(db) == 0


@pytest.mark.postgres
async def test_on_postgresql_the_state_ends_when_the_state_directory_has_room(
    pg_url: str,
    tmp_path: Path,
    disk_log: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The server's disk is not the gateway's to measure: the probe measures the state
    # directory (the transcripts' volume), for real. Its volume is made to lack headroom by
    # asking for more than it has, which is the operator's volume filling up.
    probes: list[Headroom] = []
    probed = asyncio.Event()
    measure = diskfull.measure_directory

    def counted(directory: Path) -> Headroom:
        assert directory == tmp_path  # the state directory, never a database path
        room = measure(directory)
        probes.append(room)
        probed.set()
        return room

    monkeypatch.setattr(diskfull, "measure_directory", counted)
    monkeypatch.setattr(diskfull, "HEADROOM_BYTES", 2**62)
    db = await PgStateDB.connect(pg_url, replica_id="full", state_dir=tmp_path)
    try:
        back: list[bool] = []
        db.space.subscribe(lambda: back.append(db.space.full))
        kept = (await db.sessions.create(session()))[0]
        await fill_postgres(pg_url)
        for _ in range(10):
            with pytest.raises(DiskFullError):
                await db.sessions.create(session())
        async with asyncio.timeout(GUARD_SECONDS):  # a hang guard
            while len(probes) < 3:
                await db.sessions.touch(kept.key, at=float(len(probes)))
                probed.clear()
                await probed.wait()
        assert db.space.full
        assert not any(room.enough for room in probes)
        await free_postgres(pg_url)
        monkeypatch.setattr(diskfull, "HEADROOM_BYTES", 4 * 1024 * 1024)
        assert await db.space.wait_for_space(GUARD_SECONDS)

        lines = state_lines(disk_log)
        assert [level for level, _ in lines] == ["WARNING", "INFO"], lines
        assert "disk full: the state database refused a write" in lines[0][1]
        assert "No space left on device" in lines[0][1]
        assert "disk space is back" in lines[1][1]
        assert "WAL" not in lines[1][1]  # no SQLite file was checkpointed
        assert db.space.refusals == 10
        assert back == [False]
        assert (await db.sessions.create(session()))[1]
    finally:
        await db.close()


@pytest.mark.postgres
async def test_a_full_transcript_disk_enters_and_leaves_the_state_on_postgresql(
    pg_url: str, tmp_path: Path, disk_log: pytest.LogCaptureFixture
) -> None:
    # The transcript writer reports ENOSPC from its own thread; on PostgreSQL too the state
    # database's disk-full state must hear it, and its probe must be able to end it.
    db = await PgStateDB.connect(pg_url, replica_id="transcripts", state_dir=tmp_path)
    try:
        refusal = OSError(errno.ENOSPC, "No space left on device")
        await asyncio.to_thread(db.space.refused_threadsafe, "transcript writer", refusal)
        # Handed to the loop before the thread's own completion was.
        assert db.space.full
        assert await db.space.wait_for_space(GUARD_SECONDS)
        lines = state_lines(disk_log)
        assert [level for level, _ in lines] == ["WARNING", "INFO"], lines
        assert "the transcript writer refused a write" in lines[0][1]
    finally:
        await db.close()
