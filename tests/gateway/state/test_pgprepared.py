"""The state's statements prepared on PostgreSQL: a text that recurs is parsed and planned
once per connection, and preparing never changes what a read or a write does — a text
PostgreSQL cannot type, a parameter it typed otherwise, a statement the server lost: each
runs plainly and gives the answer its plain text gives."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway.state import StateError
from gateway.state.connection import Connection
from gateway.state.postgres import PgStateDB
from gateway.state.postgres import prepared as pgprepared

pytestmark = pytest.mark.postgres

#: The statements prepared in the asking session, this query's own left out.
PREPARED_NAMES = (
    "SELECT name FROM pg_prepared_statements"
    " WHERE statement NOT LIKE '%pg_prepared_statements%' ORDER BY name"
)


@pytest.fixture
async def db(pg_url: str, tmp_path: Path) -> AsyncIterator[PgStateDB]:
    state = await PgStateDB.connect(pg_url, replica_id="prepared", state_dir=tmp_path)
    try:
        await state.write(lambda c: c.execute("CREATE TABLE t (n INTEGER PRIMARY KEY, s TEXT)"))
        await state.write(lambda c: c.execute("INSERT INTO t VALUES (1, 'one'), (2, 'two')"))
        yield state
    finally:
        await state.close()


async def prepared_here(db: PgStateDB) -> list[str]:
    """The statements prepared on the reader's connection (the session that asks)."""
    rows = await db.read(lambda c: c.execute(PREPARED_NAMES).fetchall())
    return [row[0] for row in rows]


async def value(db: PgStateDB, sql: str, *parameters: Any) -> Any:
    """The first column of the first row ``sql`` reads."""

    def run(conn: Connection) -> Any:
        return conn.execute(sql, parameters).fetchone()[0]

    return await db.read(run)


async def test_a_text_run_again_is_prepared_and_answers_as_before(db: PgStateDB) -> None:
    select = "SELECT s FROM t WHERE n = ?"
    answers = [await value(db, select, n) for n in (1, 2, 1)]
    assert answers == ["one", "two", "one"]
    # Prepared at its second run (the first is not yet a pattern), used at its third.
    assert len(await prepared_here(db)) == 1

    def add(conn: Connection, *, n: int) -> None:
        conn.execute("INSERT INTO t VALUES (?, ?)", (n, f"n{n}"))

    for n in (3, 4, 5):
        await db.write(functools.partial(add, n=n))
    rows = await db.read(lambda c: c.execute("SELECT n, s FROM t ORDER BY n").fetchall())
    assert [tuple(row) for row in rows] == [
        (1, "one"), (2, "two"), (3, "n3"), (4, "n4"), (5, "n5"),
    ]  # fmt: skip


async def test_a_text_postgresql_cannot_type_stays_plain(db: PgStateDB) -> None:
    # PREPARE refuses ``$1 IS NULL`` (no type to tell): the read runs plainly, every time.
    untyped = "SELECT COUNT(*) FROM t WHERE ? IS NULL"
    counts = [await value(db, untyped, v) for v in (None, 1, None)]
    assert counts == [2, 0, 2]
    assert await prepared_here(db) == []


async def test_a_parameter_typed_otherwise_gets_the_plain_answer(db: PgStateDB) -> None:
    select = "SELECT COUNT(*) FROM t WHERE n = ?"
    for n in (1, 2, 3):
        assert await value(db, select, n) == (n < 3)
    # Prepared, ``$1`` is an integer, which 3,000,000,000 is out of range of; the plain text
    # compares it as a bigint and finds no row.
    huge = 3_000_000_000
    assert await value(db, select, huge) == 0
    assert await value(db, select, 1) == 1  # plain now
    # A value neither form can take is refused as the plain text refuses it.
    with pytest.raises(StateError, match="invalid input syntax"):
        await value(db, select, "one")


async def test_a_write_a_prepared_statement_refused_runs_again_whole_and_once(
    db: PgStateDB,
) -> None:
    count = "SELECT COUNT(*) FROM t WHERE n = ?"

    def add_and_count(conn: Connection, n: int, probe: int) -> int:
        conn.execute("INSERT INTO t VALUES (?, ?)", (n, "added"))
        found: int = conn.execute(count, (probe,)).fetchone()[0]
        return found

    assert await db.write(lambda c: add_and_count(c, 10, 1)) == 1
    assert await db.write(lambda c: add_and_count(c, 11, 1)) == 1  # both texts prepared
    # The count's prepared form refuses the huge probe after the insert ran in the same
    # transaction: it is rolled back and the write run again, plainly, its insert once.
    assert await db.write(lambda c: add_and_count(c, 12, 3_000_000_000)) == 0
    rows = await db.read(lambda c: c.execute("SELECT n FROM t WHERE s = 'added'").fetchall())
    assert sorted(row[0] for row in rows) == [10, 11, 12]


async def test_a_statement_the_server_lost_is_run_plainly(db: PgStateDB) -> None:
    select = "SELECT s FROM t WHERE n = ?"
    for n in (1, 2):
        await value(db, select, n)
    assert len(await prepared_here(db)) == 1
    await db.read(lambda c: c.execute("DEALLOCATE ALL"))  # as a pooler or an admin might
    assert await value(db, select, 2) == "two"


async def test_texts_built_per_call_are_prepared_up_to_a_bound(
    db: PgStateDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pgprepared, "PREPARED_MAX", 3)
    for width in range(1, 7):  # IN lists of six lengths: six texts, each run twice
        marks = ", ".join("?" * width)
        select = f"SELECT COUNT(*) FROM t WHERE n IN ({marks})"
        for _ in range(2):
            assert await value(db, select, *range(width)) == min(width - 1, 2)  # 1, 2 in t
    assert len(await prepared_here(db)) == 3


async def test_a_statement_prepared_by_a_write_rolled_back_unsent_is_prepared_again(
    db: PgStateDB,
) -> None:
    insert = "INSERT INTO t VALUES (?, ?)"

    class RefusedError(Exception):
        pass

    def queued_then_refused(conn: Connection) -> None:
        conn.queue(insert, (20, "never"))  # its PREPARE would have gone with the next
        raise RefusedError

    await db.write(lambda c: c.execute(insert, (7, "seen once")))
    with pytest.raises(RefusedError):
        await db.write(queued_then_refused)  # the second sighting: prepared, never sent
    # Its sightings start again: prepared at the next second one. Had the writer taken
    # that PREPARE for sent, these writes would EXECUTE a statement the server never had,
    # fail, and leave the text plain for good.
    await db.write(lambda c: c.execute(insert, (8, "seen once again")))
    await db.write(lambda c: c.execute(insert, (9, "prepared now")))
    names = await db.write(lambda c: [r[0] for r in c.execute(PREPARED_NAMES).fetchall()])
    assert len(names) == 1
    rows = await db.read(lambda c: c.execute("SELECT n FROM t ORDER BY n").fetchall())
    assert [row[0] for row in rows] == [1, 2, 7, 8, 9]
