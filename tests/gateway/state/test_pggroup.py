"""Group commit on PostgreSQL: writes that queue up while the writer is busy share one
serializable transaction and its messages, and each caller still gets its own result or its
own exception — whichever message carried the statement that failed, and also when another
transaction's conflict condemns the group.

The writer thread is held by a write that waits on an event, so the writes of a test queue
up behind it deterministically and form one group when it is released.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Literal

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.state import DiskFullError, RecordConflictError, StateError
from gateway.state.connection import Connection
from gateway.state.postgres import PgStateDB
from tests.gateway.state.test_group import RefusedError, writer_held

pytestmark = pytest.mark.postgres

Kind = Literal["ok", "raise", "raise-unsent", "unbindable", "refuse", "refuse-queued"]
TAKEN = "taken"
_tables = itertools.count()


async def open_db(url: str, state_dir: Path) -> tuple[PgStateDB, str]:
    """A state database with a fresh table of owners (``TAKEN`` already in it) and a counter
    each successful write moves by one; the table's name."""
    db = await PgStateDB.connect(url, replica_id="group", state_dir=state_dir)
    table = f"t{next(_tables)}"

    def create(conn: Connection) -> None:
        conn.execute(f"CREATE TABLE {table} (owner TEXT PRIMARY KEY)")
        conn.execute(f"CREATE TABLE {table}_count (n INTEGER NOT NULL)")
        conn.execute(f"INSERT INTO {table} VALUES (?)", (TAKEN,))
        conn.execute(f"INSERT INTO {table}_count VALUES (0)")

    await db.write(create)
    return db, table


@pytest.fixture
async def opened(pg_url: str, tmp_path: Path) -> AsyncIterator[tuple[PgStateDB, str]]:
    db, table = await open_db(pg_url, tmp_path)
    try:
        yield db, table
    finally:
        await db.close()


def write(table: str, owner: str, kind: Kind, calls: list[str]) -> Callable[[Connection], str]:
    """A spawn's shape: a statement whose result it reads, then one queued (two messages
    alone). ``raise`` fails after both, ``raise-unsent`` before anything was sent,
    ``unbindable`` with a value the driver cannot send, ``refuse`` with a duplicate key,
    ``refuse-queued`` with a duplicate key in the queued statement (sent with the next
    write's first, or with the COMMIT)."""

    def run(conn: Connection) -> str:
        calls.append(owner)
        count = f"UPDATE {table}_count SET n = n + 1"
        if kind == "raise-unsent":
            conn.queue(count)
            raise RefusedError(owner)
        if kind == "unbindable":
            conn.execute(f"INSERT INTO {table} VALUES (?)", (object(),))
        inserted = TAKEN if kind == "refuse" else owner
        row = conn.execute(
            f"INSERT INTO {table} VALUES (?) RETURNING owner", (inserted,)
        ).fetchone()
        if kind == "refuse-queued":
            conn.queue(f"INSERT INTO {table} VALUES (?)", (TAKEN,))
        conn.queue(count)
        if kind == "raise":
            raise RefusedError(owner)
        return f"{row[0]} wrote"

    return run


async def kept(db: PgStateDB, table: str) -> tuple[list[str], int]:
    """The owners written (``TAKEN`` left out) and the counter."""

    def read(conn: Connection) -> tuple[list[str], int]:
        rows = conn.execute(f"SELECT owner FROM {table} ORDER BY owner").fetchall()
        count = conn.execute(f"SELECT n FROM {table}_count").fetchone()
        return [r[0] for r in rows if r[0] != TAKEN], int(count[0])

    return await db.read(read)


async def grouped(db: PgStateDB, writes: list[Callable[[Connection], Any]]) -> list[Any]:
    """Run ``writes`` queued together (one group); their outcomes, exceptions included."""
    assert db.write_groups is not None
    async with writer_held(db):
        tasks = [asyncio.ensure_future(db.write(fn)) for fn in writes]
        await asyncio.sleep(0)
        assert db.write_groups.queued == len(writes)
    return await asyncio.gather(*tasks, return_exceptions=True)


async def test_writes_queued_together_share_one_transaction_and_its_messages(
    opened: tuple[PgStateDB, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db, table = opened
    assert db.write_groups is not None
    sent = Counter[str]()
    execute = psycopg.ClientCursor.execute

    def counted(cursor: psycopg.ClientCursor[Any], query: Any, *args: Any, **kw: Any) -> Any:
        if threading.current_thread().name == "herald-db-writer":
            sent[str(query).split()[0]] += 1
        return execute(cursor, query, *args, **kw)

    names = [f"w{n:02d}" for n in range(10)]
    calls: list[str] = []

    async def write_then_look(name: str) -> tuple[str, bool]:
        """The write's result, and whether the reader's connection sees its row as soon as
        the write returned (nothing is acknowledged before its commit)."""
        result = await db.write(write(table, name, "ok", calls))
        owners, _ = await kept(db, table)
        return result, name in owners

    before = db.write_groups.commits
    monkeypatch.setattr(psycopg.ClientCursor, "execute", counted)
    async with writer_held(db):
        tasks = [asyncio.ensure_future(write_then_look(name)) for name in names]
        await asyncio.sleep(0)
        assert db.write_groups.queued == len(names)
    results = await asyncio.gather(*tasks)
    monkeypatch.undo()
    assert results == [(f"{name} wrote", True) for name in names]
    assert db.write_groups.commits - before == 2  # the held write's, then one for all ten
    assert await kept(db, table) == (names, len(names))
    # Alone, each would be two messages; together each write's queued statement travels
    # with the next one's first, the last one's with the COMMIT: eleven in all.
    assert sent["BEGIN"] == 1, sent
    assert sum(sent.values()) == len(names) + 1, sent


async def test_a_write_that_raises_is_undone_alone(opened: tuple[PgStateDB, str]) -> None:
    db, table = opened
    plan: list[tuple[str, Kind]] = [
        ("a", "ok"),
        ("b", "raise"),
        ("c", "ok"),
        ("d", "raise-unsent"),
        ("e", "ok"),
        ("f", "unbindable"),  # a's, c's and e's queued statements still pending: kept
    ]
    calls: list[str] = []
    outcomes = await grouped(db, [write(table, name, kind, calls) for name, kind in plan])
    assert outcomes[0] == "a wrote"
    assert isinstance(outcomes[1], RefusedError)
    assert outcomes[2] == "c wrote"
    assert isinstance(outcomes[3], RefusedError)
    assert outcomes[4] == "e wrote"
    assert isinstance(outcomes[5], StateError)
    assert calls == ["a", "b", "c", "d", "e", "f"]  # once each: nothing ran again
    assert await kept(db, table) == (["a", "c", "e"], 3)


async def test_a_refused_statement_fails_its_own_write_whichever_message_carried_it(
    opened: tuple[PgStateDB, str],
) -> None:
    db, table = opened
    plan: list[tuple[str, Kind]] = [
        ("a", "ok"),
        ("b", "refuse"),  # its own statement, in its own message
        ("c", "refuse-queued"),  # sent with d's first statement
        ("d", "ok"),
        ("e", "refuse-queued"),  # sent with the COMMIT
    ]
    calls: list[str] = []
    outcomes = await grouped(db, [write(table, name, kind, calls) for name, kind in plan])
    assert outcomes[0] == "a wrote"
    assert isinstance(outcomes[1], RecordConflictError)
    assert isinstance(outcomes[2], RecordConflictError)
    assert outcomes[3] == "d wrote"
    assert isinstance(outcomes[4], RecordConflictError)
    # d's first message failed with c's statement, before d's savepoint: d ran again.
    assert calls == ["a", "b", "c", "d", "d", "e"]
    assert await kept(db, table) == (["a", "d"], 2)


async def skewed_once(db: PgStateDB, url: str, calls: list[str]) -> Callable[[Connection], str]:
    """A write that reads row 1 of a new table ``k`` and writes row 2. The first time it
    runs, another serializable transaction reads row 2 and writes row 1 in between, and
    commits: a write skew PostgreSQL refuses the write's transaction for."""
    await db.write(lambda c: c.execute("CREATE TABLE k (id INTEGER PRIMARY KEY, v INTEGER)"))
    await db.write(lambda c: c.execute("INSERT INTO k VALUES (1, 0), (2, 0)"))
    skewed = False

    def skew(conn: Connection) -> str:
        nonlocal skewed
        calls.append("skew")
        conn.execute("SELECT v FROM k WHERE id = 1").fetchone()
        if not skewed:
            skewed = True
            with psycopg.connect(url, autocommit=True) as other:
                other.execute("BEGIN ISOLATION LEVEL SERIALIZABLE")
                other.execute("SELECT v FROM k WHERE id = 2")
                other.execute("UPDATE k SET v = v + 1 WHERE id = 1")
                other.execute("COMMIT")
        conn.execute("UPDATE k SET v = v + 1 WHERE id = 2")
        return "skew wrote"

    return skew


async def rows_of_k(db: PgStateDB) -> list[tuple[int, int]]:
    rows = await db.read(lambda c: c.execute("SELECT id, v FROM k ORDER BY id").fetchall())
    return [(r[0], r[1]) for r in rows]


async def test_a_serialization_failure_runs_each_write_of_the_group_again_alone(
    opened: tuple[PgStateDB, str], pg_url: str
) -> None:
    db, table = opened
    calls: list[str] = []
    skew = await skewed_once(db, pg_url, calls)
    assert db.write_groups is not None
    before = db.write_groups.commits
    outcomes = await grouped(
        db, [write(table, "a", "ok", calls), skew, write(table, "b", "ok", calls)]
    )
    assert outcomes == ["a wrote", "skew wrote", "b wrote"]
    # The group ran until the conflict, then each write alone in its own transaction.
    assert calls[:2] == ["a", "skew"]
    assert calls[-3:] == ["a", "skew", "b"]
    assert db.write_groups.commits - before == 1 + 3  # the held write's, then one each
    assert db.write_groups.rerun == 3  # counted for /metrics
    assert db.write_conflicts == 0  # none met a conflict alone
    assert await kept(db, table) == (["a", "b"], 2)  # kept once each
    assert await rows_of_k(db) == [(1, 1), (2, 1)]


async def test_a_write_alone_that_meets_a_conflict_runs_again_whole(
    opened: tuple[PgStateDB, str], pg_url: str
) -> None:
    db, _ = opened
    calls: list[str] = []
    skew = await skewed_once(db, pg_url, calls)
    assert await db.write(skew) == "skew wrote"
    assert calls == ["skew", "skew"]  # refused once, then kept
    assert db.write_conflicts == 1  # counted for /metrics
    assert await rows_of_k(db) == [(1, 1), (2, 1)]


async def play(url: str, state_dir: Path, plan: list[Kind]) -> None:
    db, table = await open_db(url, state_dir)
    try:
        names = [f"w{n:02d}" for n in range(len(plan))]
        calls: list[str] = []
        outcomes = await grouped(
            db, [write(table, n, k, calls) for n, k in zip(names, plan, strict=True)]
        )
        for name, kind, outcome in zip(names, plan, outcomes, strict=True):
            if kind == "ok":
                assert outcome == f"{name} wrote"
            elif kind.startswith("raise"):
                assert isinstance(outcome, RefusedError)
                assert str(outcome) == name
            elif kind == "unbindable":
                assert type(outcome) is StateError
            else:
                assert isinstance(outcome, RecordConflictError)
        ok = [n for n, k in zip(names, plan, strict=True) if k == "ok"]
        assert await kept(db, table) == (ok, len(ok))
    finally:
        await db.close()


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    plan=st.lists(
        st.sampled_from(
            ["ok", "ok", "ok", "raise", "raise-unsent", "unbindable", "refuse", "refuse-queued"]
        ),
        min_size=1,
        max_size=16,
    )
)
def test_any_mix_of_writes_keeps_exactly_the_successful_ones(
    pg_url: str, tmp_path: Path, plan: list[Kind]
) -> None:
    asyncio.run(play(pg_url, tmp_path, plan))


async def test_a_full_disk_refusing_one_statement_fails_that_write_alone(
    opened: tuple[PgStateDB, str],
) -> None:
    """The server's disk refuses new rows of one table (SQLSTATE 53100, from a trigger as in
    the fault tests): the write inserting one fails with :class:`DiskFullError`, and the
    writes beside it in the group, which need no new row there, are kept."""
    db, table = opened

    def full_table(conn: Connection) -> None:
        conn.execute(f"CREATE TABLE {table}_full (v TEXT)")
        conn.execute(
            f"CREATE FUNCTION {table}_no_room() RETURNS trigger LANGUAGE plpgsql AS $$"
            " BEGIN RAISE EXCEPTION USING ERRCODE = 'disk_full',"
            " MESSAGE = 'could not extend file: No space left on device'; END $$"
        )
        conn.execute(
            f"CREATE TRIGGER {table}_no_room BEFORE INSERT ON {table}_full"
            f" FOR EACH ROW EXECUTE FUNCTION {table}_no_room()"
        )

    await db.write(full_table)

    def needs_room(conn: Connection) -> str:
        conn.execute(f"INSERT INTO {table}_full VALUES ('x')")
        return "kept"

    calls: list[str] = []
    outcomes = await grouped(
        db,
        [
            write(table, "a", "ok", calls),
            needs_room,
            write(table, "b", "ok", calls),
        ],
    )
    assert outcomes[0] == "a wrote"
    assert isinstance(outcomes[1], DiskFullError)
    assert outcomes[2] == "b wrote"
    assert await kept(db, table) == (["a", "b"], 2)
    assert db.space.refusals == 1
