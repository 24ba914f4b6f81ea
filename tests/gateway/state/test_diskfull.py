"""The state database on a full disk: the refusal, the disk-full state, the WAL afterwards.

The disk fills for real as far as SQLite can tell: ``PRAGMA max_page_count`` on the
database's own writer connection makes SQLite answer ``SQLITE_FULL`` ("database or disk is
full") for any write that needs a page past it, exactly as when the volume has no room.
SQLite never lowers the limit below the pages in use, so ``max_page_count = 1`` caps the
database at its current size; raising the limit is an operator freeing space. Writes that
fit in pages the database already has still go through, as they do on a real full disk.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import uuid
from pathlib import Path

import pytest

from gateway.state import DiskFullError, SessionRecord, StateDB, diskfull
from gateway.state.diskfull import Headroom

#: Guard against a hung test; never an assertion about speed.
GUARD_SECONDS = 20.0
#: Bigger than a page: a row holding it needs new (overflow) pages.
BIG = "x" * 20_000


def session(label: str | None = None) -> SessionRecord:
    key = f"agent:main:webchat:{uuid.uuid4().hex[:12]}"
    return SessionRecord(
        key=key,
        session_id=str(uuid.uuid4()),
        agent_id="main",
        kind="chat",
        created_at=1.0,
        updated_at=1.0,
        label=label,
    )


def _limit(conn: sqlite3.Connection, pages: int) -> int:
    conn.execute(f"PRAGMA max_page_count = {pages}")
    return int(conn.execute("PRAGMA max_page_count").fetchone()[0])


async def fill_disk(db: StateDB) -> int:
    """Cap the database at its current size; returns that size in pages."""
    return await db.write(lambda conn: _limit(conn, 1))


async def free_space(db: StateDB) -> None:
    await db.write(lambda conn: _limit(conn, 1_000_000_000))


def wal_size(db: StateDB) -> int:
    wal = db.path.with_name(db.path.name + "-wal")
    return wal.stat().st_size if wal.exists() else 0


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


async def test_a_write_the_disk_refuses_raises_disk_full_and_keeps_nothing(db: StateDB) -> None:
    small = await db.sessions.create(session())
    await fill_disk(db)
    refused = session(label=BIG)
    with pytest.raises(DiskFullError, match="is full") as caught:
        await db.sessions.create(refused)
    # The refusal itself, not the failed ROLLBACK after SQLite had already rolled back.
    cause = caught.value.__cause__
    assert isinstance(cause, sqlite3.OperationalError)
    assert cause.sqlite_errorcode == sqlite3.SQLITE_FULL
    assert await db.sessions.get(refused.key) is None
    assert db.space.full
    # The connection is fine: a write that fits goes through while the disk is full.
    assert (await db.sessions.touch(small[0].key, at=2.0)).updated_at == 2.0
    await free_space(db)
    assert (await db.sessions.create(refused))[1]


async def test_a_failed_commit_leaves_no_transaction_open(db: StateDB) -> None:
    # A COMMIT can fail (on a real full disk it is where the WAL grows); a deferred foreign
    # key is a refusal at COMMIT that real SQLite gives on demand.
    def orphan_run(conn: sqlite3.Connection) -> None:
        conn.execute("PRAGMA defer_foreign_keys = ON")
        conn.execute(
            "INSERT INTO runs (run_id, child_session_key, child_session_id,"
            " requester_agent_id, agent_id, task, status, created_at)"
            " VALUES ('r1', 'agent:main:subagent:none', 's', 'main', 'main', 't', 'queued', 1)"
        )

    with pytest.raises(sqlite3.IntegrityError):
        await db.write(orphan_run)
    # Every later write would otherwise fail: "cannot start a transaction within a transaction".
    _, created = await db.sessions.create(session())
    assert created
    assert await db.runs.get("r1") is None


async def test_disk_full_is_logged_once_and_its_end_once(
    db: StateDB, disk_log: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    probes: list[Headroom] = []
    probed = asyncio.Event()
    measure = diskfull.checkpoint_and_measure

    def counted(conn: sqlite3.Connection, path: Path) -> Headroom:
        room = measure(conn, path)
        probes.append(room)
        probed.set()
        return room

    monkeypatch.setattr(diskfull, "checkpoint_and_measure", counted)
    back: list[bool] = []
    db.space.subscribe(lambda: back.append(db.space.full))
    kept = (await db.sessions.create(session()))[0]
    await fill_disk(db)
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
    await free_space(db)
    assert await db.space.wait_for_space(GUARD_SECONDS)

    lines = state_lines(disk_log)
    assert [level for level, _ in lines] == ["WARNING", "INFO"], lines
    assert "disk full: the state database refused a write" in lines[0][1]
    assert "disk space is back" in lines[1][1]
    assert db.space.refusals == 11
    assert back == [False]  # listeners hear once, after the state has ended
    assert (await db.sessions.create(session(label=BIG)))[1]


async def test_the_wal_is_truncated_once_space_is_back(db: StateDB) -> None:
    # SQLite checkpoints by itself only at ~4 MB of WAL and never shrinks the file: on a
    # small volume that is the space freed by the operator, taken straight back.
    for _ in range(40):
        await db.sessions.create(session(label="y" * 2000))
    await fill_disk(db)
    with pytest.raises(DiskFullError):
        await db.sessions.create(session(label=BIG))
    before = wal_size(db)
    await free_space(db)
    assert await db.space.wait_for_space(GUARD_SECONDS)
    assert before > 100_000
    assert wal_size(db) == 0
