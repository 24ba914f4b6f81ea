"""Group commit on SQLite: writes that queue up while the writer is busy share one
transaction, and each caller still gets its own result or its own exception.

The writer thread is held by a write that waits on an event, so the writes of a test queue
up behind it deterministically and form one group when it is released.
"""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import tempfile
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.state import SqliteStateDB, StateDB
from gateway.state._group import MAX_GROUP, WriteGroups
from gateway.state.connection import Connection

Kind = Literal["ok", "raise", "abort"]
HOLD_SECONDS = 30.0  # a guard against a hung test, never a statement about speed


class RefusedError(Exception):
    """What a failing write of these tests raises."""


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[StateDB]:
    opened = await SqliteStateDB.open(tmp_path / "herald.db")
    await opened.write(
        lambda c: c.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, owner TEXT UNIQUE)")
    )
    yield opened
    await opened.close()


def groups(db: StateDB) -> WriteGroups:
    assert db.write_groups is not None
    return db.write_groups


@asynccontextmanager
async def writer_held(db: StateDB) -> AsyncIterator[None]:
    """Hold the writer thread inside a write; release it (and let that write commit) on exit."""
    started, release = threading.Event(), threading.Event()

    def block(conn: Connection) -> None:
        started.set()
        release.wait(HOLD_SECONDS)

    blocker = asyncio.ensure_future(db.write(block))
    assert await asyncio.to_thread(started.wait, HOLD_SECONDS)
    try:
        yield
    finally:
        release.set()
        await blocker


def insert(owner: str, calls: list[str] | None = None) -> Callable[[Connection], str]:
    def write(conn: Connection) -> str:
        if calls is not None:
            calls.append(owner)
        conn.execute("INSERT INTO t (owner) VALUES (?)", (owner,))
        row = conn.execute("SELECT owner FROM t WHERE owner = ?", (owner,)).fetchone()
        return f"{row[0]} wrote"

    return write


def failing(owner: str, kind: Kind) -> Callable[[Connection], str]:
    """A write that inserts its row, then fails; ``abort`` ends the whole transaction first
    (as SQLite does by itself on a full disk)."""

    def write(conn: Connection) -> str:
        conn.execute("INSERT INTO t (owner) VALUES (?)", (owner,))
        if kind == "abort":
            conn.execute("ROLLBACK")
        raise RefusedError(owner)

    return write


async def owners(db: StateDB) -> list[str]:
    rows = await db.read(lambda c: c.execute("SELECT owner FROM t ORDER BY owner").fetchall())
    return [row[0] for row in rows]


async def test_writes_queued_together_share_one_commit_and_get_their_own_results(
    db: StateDB, tmp_path: Path
) -> None:
    names = [f"w{n:02d}" for n in range(20)]

    async def write_then_look(name: str) -> tuple[str, bool]:
        """The write's result, and whether another connection sees its row as soon as the
        write returned (nothing is acknowledged before its commit)."""
        result = await db.write(insert(name))
        other = sqlite3.connect(tmp_path / "herald.db")
        try:
            seen = other.execute("SELECT 1 FROM t WHERE owner = ?", (name,)).fetchone()
        finally:
            other.close()
        return result, seen is not None

    before = groups(db).commits
    async with writer_held(db):
        tasks = [asyncio.ensure_future(write_then_look(name)) for name in names]
        await asyncio.sleep(0)
        assert groups(db).queued == len(names)
    results = await asyncio.gather(*tasks)
    assert results == [(f"{name} wrote", True) for name in names]
    # The held write's transaction, then one for all twenty.
    assert groups(db).commits - before == 2
    assert await owners(db) == names


async def test_a_failing_write_rolls_back_alone_and_raises_to_its_own_caller(db: StateDB) -> None:
    names = [f"w{n:02d}" for n in range(10)]
    async with writer_held(db):
        tasks = [
            asyncio.ensure_future(
                db.write(failing(name, "raise") if name == "w04" else insert(name))
            )
            for name in names
        ]
        await asyncio.sleep(0)
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    refused = outcomes[4]
    assert isinstance(refused, RefusedError)
    assert str(refused) == "w04"
    assert [o for n, o in enumerate(outcomes) if n != 4] == [
        f"{name} wrote" for name in names if name != "w04"
    ]
    assert await owners(db) == [name for name in names if name != "w04"]


async def test_a_failure_that_ends_the_transaction_runs_the_others_again(db: StateDB) -> None:
    calls: list[str] = []
    names = ["a", "b", "c", "d"]
    before = groups(db).commits
    async with writer_held(db):
        tasks = [
            asyncio.ensure_future(db.write(failing(n, "abort") if n == "c" else insert(n, calls)))
            for n in names
        ]
        await asyncio.sleep(0)
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    assert outcomes[0] == "a wrote"
    assert outcomes[1] == "b wrote"
    assert isinstance(outcomes[2], RefusedError)
    assert outcomes[3] == "d wrote"
    # a and b were rolled back with the transaction c ended; they ran again, with d, in a
    # new one: kept once each.
    assert calls == ["a", "b", "a", "b", "d"]
    assert await owners(db) == ["a", "b", "d"]
    assert groups(db).commits - before == 2  # the held write's, then a, b and d
    assert groups(db).rerun == 3  # a and b again, d in the new transaction (for /metrics)


async def test_a_group_holds_at_most_max_group_writes(db: StateDB) -> None:
    names = [f"w{n:04d}" for n in range(MAX_GROUP + 3)]
    before = groups(db).commits
    async with writer_held(db):
        tasks = [asyncio.ensure_future(db.write(insert(name))) for name in names]
        await asyncio.sleep(0)
    await asyncio.gather(*tasks)
    assert groups(db).commits - before == 3
    assert await owners(db) == names


async def play(directory: Path, plan: list[Kind]) -> None:
    db = await SqliteStateDB.open(directory / "herald.db")
    try:
        await db.write(
            lambda c: c.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, owner TEXT UNIQUE)")
        )
        names = [f"w{n:02d}" for n in range(len(plan))]
        assert db.write_groups is not None
        before = db.write_groups.commits
        async with writer_held(db):
            tasks = [
                asyncio.ensure_future(
                    db.write(insert(name) if kind == "ok" else failing(name, kind))
                )
                for name, kind in zip(names, plan, strict=True)
            ]
            await asyncio.sleep(0)
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        for name, kind, outcome in zip(names, plan, outcomes, strict=True):
            if kind == "ok":
                assert outcome == f"{name} wrote"
            else:
                assert isinstance(outcome, RefusedError)
                assert str(outcome) == name
        assert await owners(db) == [n for n, k in zip(names, plan, strict=True) if k == "ok"]
        # Grouped: the held write's transaction, one for the plan, one more after each
        # failure that ended a transaction.
        assert db.write_groups.commits - before <= 2 + plan.count("abort")
    finally:
        await db.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    plan=st.lists(st.sampled_from(["ok", "ok", "ok", "raise", "abort"]), min_size=1, max_size=30)
)
def test_any_mix_of_writes_keeps_exactly_the_successful_ones(plan: list[Kind]) -> None:
    directory = Path(tempfile.mkdtemp(prefix="herald-group-"))
    try:
        asyncio.run(play(directory, plan))
    finally:
        shutil.rmtree(directory, ignore_errors=True)
