"""The state database: open, migrate, reopen, WAL, read-only readers, close — on SQLite and,
where the behaviour is the backend's promise and not SQLite's own, on PostgreSQL too."""

from __future__ import annotations

import asyncio
import stat
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from gateway.state import (
    ReadOnlyStateError,
    SchemaError,
    SqliteStateDB,
    StateClosedError,
    StateDB,
    StateMissingError,
)
from gateway.state.connection import Connection
from gateway.state.postgres import schema as pgschema
from gateway.state.schema import LATEST_VERSION, migrations
from gateway.state.sqlite import schema as db_module
from tests.gateway.state.conftest import StateTarget

Opener = Callable[..., Awaitable[StateDB]]


@pytest.fixture
async def open_db() -> AsyncIterator[Opener]:
    opened: list[StateDB] = []

    async def opener(path: Path, *, readonly: bool = False) -> StateDB:
        db = await SqliteStateDB.open(path, readonly=readonly)
        opened.append(db)
        return db

    yield opener
    for db in opened:
        await db.close()


def _tables(conn: Connection) -> set[str]:
    rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    return {row[0] for row in rows}


async def test_fresh_database_is_migrated_wal_and_private(open_db: Opener, tmp_path: Path) -> None:
    path = tmp_path / "state" / "herald.db"
    db = await open_db(path)
    assert db.schema_version == LATEST_VERSION == len(migrations())
    assert {"sessions", "runs", "outbox", "schema_version"} <= await db.read(_tables)
    mode = await db.read(lambda c: c.execute("PRAGMA journal_mode").fetchone()[0])
    assert mode == "wal"
    assert await db.read(lambda c: c.execute("PRAGMA foreign_keys").fetchone()[0]) == 1
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


async def test_reopen_keeps_data_and_does_not_migrate_again(state_target: StateTarget) -> None:
    first = await state_target.open()
    assert {"sessions", "runs", "outbox", "batches", "seen_keys", "schema_version"} <= (
        await state_target.tables(first)
    )
    await first.write(lambda c: c.execute("CREATE TABLE extra (x INTEGER)"))
    await first.write(lambda c: c.execute("INSERT INTO extra VALUES (42)"))
    await first.close()
    again = await state_target.open()
    assert await again.read(lambda c: c.execute("SELECT x FROM extra").fetchone()[0]) == 42
    versions = await again.read(
        lambda c: c.execute("SELECT version FROM schema_version").fetchall()
    )
    assert [row[0] for row in versions] == list(range(1, LATEST_VERSION + 1))


async def test_a_newer_schema_is_refused(state_target: StateTarget) -> None:
    db = await state_target.open()
    await db.write(lambda c: c.execute("INSERT INTO schema_version VALUES (999, 0)"))
    await db.close()
    with pytest.raises(SchemaError, match="newer"):
        await state_target.open()
    with pytest.raises(SchemaError):
        await state_target.open(readonly=True)


async def test_a_failing_migration_leaves_the_previous_version(
    state_target: StateTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    await (await state_target.open()).close()
    broken = (*migrations(), ("CREATE TABLE good (x INTEGER)", "THIS IS NOT SQL"))
    for module in (db_module, pgschema):
        monkeypatch.setattr(module, "migrations", lambda: broken)
        monkeypatch.setattr(module, "LATEST_VERSION", len(broken))
    with pytest.raises(SchemaError, match=f"version {len(broken)}"):
        await state_target.open()
    monkeypatch.undo()
    db = await state_target.open()
    assert db.schema_version == LATEST_VERSION
    assert "good" not in await state_target.tables(db)  # the half-applied one rolled back


async def test_write_rolls_back_when_the_function_raises(state_target: StateTarget) -> None:
    db = await state_target.open()
    await db.write(lambda c: c.execute("CREATE TABLE t (x INTEGER)"))

    def insert_then_fail(conn: Connection) -> None:
        conn.execute("INSERT INTO t VALUES (1)")
        raise KeyError("boom")

    with pytest.raises(KeyError):
        await db.write(insert_then_fail)
    assert await db.read(lambda c: c.execute("SELECT COUNT(*) FROM t").fetchone()[0]) == 0


async def test_read_only_sees_writes_of_a_running_writer(state_target: StateTarget) -> None:
    writer = await state_target.open()
    reader = await state_target.open(readonly=True)
    await writer.write(lambda c: c.execute("CREATE TABLE t (x INTEGER)"))
    await writer.write(lambda c: c.execute("INSERT INTO t VALUES (7)"))
    assert await reader.read(lambda c: c.execute("SELECT x FROM t").fetchone()[0]) == 7
    with pytest.raises(ReadOnlyStateError):
        await reader.write(lambda c: c.execute("INSERT INTO t VALUES (8)"))
    with pytest.raises(ReadOnlyStateError, match=r"readonly|read-only"):
        await reader.read(lambda c: c.execute("INSERT INTO t VALUES (8)"))
    assert "read-only" in repr(reader)


async def test_read_only_open_never_creates_a_database(tmp_path: Path) -> None:
    with pytest.raises(StateMissingError):
        await SqliteStateDB.open(tmp_path / "absent" / "herald.db", readonly=True)
    assert not (tmp_path / "absent").exists()


async def test_close_is_idempotent_and_later_calls_fail_typed(state_target: StateTarget) -> None:
    db = await state_target.open()
    await db.close()
    await db.close()
    assert db.closed
    assert "closed" in repr(db)
    with pytest.raises(StateClosedError):
        await db.read(lambda c: c.execute("SELECT 1").fetchone())
    with pytest.raises(StateClosedError):
        await db.write(lambda c: c.execute("SELECT 1").fetchone())
    with pytest.raises(StateClosedError):
        await db.sessions.get("agent:main:main")


async def test_close_lets_queued_writes_finish(state_target: StateTarget) -> None:
    db = await state_target.open()
    await db.write(lambda c: c.execute("CREATE TABLE t (x INTEGER)"))

    def insert(n: int) -> Callable[[Connection], object]:
        return lambda c: c.execute("INSERT INTO t VALUES (?)", (n,))

    inserts = asyncio.gather(*(db.write(insert(n)) for n in range(20)))
    await asyncio.sleep(0)  # the writes are queued on the writer thread
    await db.close()
    await inserts
    again = await state_target.open()
    assert await again.read(lambda c: c.execute("SELECT COUNT(*) FROM t").fetchone()[0]) == 20
