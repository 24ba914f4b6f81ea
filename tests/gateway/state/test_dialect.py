"""One dialect, two databases: the SQLite SQL the tables write gives the same answers on
PostgreSQL (through :mod:`gateway.state.pgsql` and :mod:`gateway.state.pgconn`)."""

from __future__ import annotations

import sqlite3

import pytest

from gateway.state import RecordConflictError, SessionRecord, StateDB


async def _table(db: StateDB) -> None:
    await db.write(
        lambda c: c.execute(
            "CREATE TABLE t (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT UNIQUE,"
            " at REAL, n INTEGER NOT NULL DEFAULT 0)"
        )
    )


async def test_nulls_sort_first_ascending_and_last_descending(db: StateDB) -> None:
    await _table(db)
    rows = [("a", 2.0), ("b", None), ("c", 1.0)]
    await db.write(lambda c: c.executemany("INSERT INTO t (name, at) VALUES (?, ?)", rows))
    up = await db.read(lambda c: [r[0] for r in c.execute("SELECT name FROM t ORDER BY at")])
    down = await db.read(
        lambda c: [r["name"] for r in c.execute("SELECT name FROM t ORDER BY at DESC, name")]
    )
    assert (up, down) == (["b", "c", "a"], ["a", "c", "b"])


async def test_text_compares_byte_by_byte_and_like_ignores_ascii_case(db: StateDB) -> None:
    await _table(db)
    names = [("b",), ("B",), ("a",), ("_x",)]
    await db.write(lambda c: c.executemany("INSERT INTO t (name) VALUES (?)", names))
    ordered = await db.read(lambda c: [r[0] for r in c.execute("SELECT name FROM t ORDER BY name")])
    assert ordered == ["B", "_x", "a", "b"]  # bytes, not a locale's dictionary order
    liked = await db.read(lambda c: c.execute("SELECT COUNT(*) FROM t WHERE name LIKE 'b'"))
    assert liked.fetchone()[0] == 2


async def test_numbers_come_back_as_sqlite_gives_them(db: StateDB) -> None:
    await _table(db)
    await db.write(
        lambda c: c.executemany(
            "INSERT INTO t (name, at, n) VALUES (?, ?, ?)", [("a", 0.1, 2), ("b", 1e9 + 0.5, 3)]
        )
    )
    total, at = await db.read(lambda c: c.execute("SELECT SUM(n), SUM(at) FROM t").fetchone())
    biggest = await db.read(
        lambda c: c.execute("SELECT MAX(n, 10) FROM t WHERE name = 'b'").fetchone()[0]
    )
    assert (total, type(total)) == (5, int)  # not a Decimal
    assert at == 0.1 + 1e9 + 0.5  # 8-byte floats: an epoch timestamp keeps its fraction
    assert biggest == 10  # scalar max of two values


async def test_ids_rowcounts_and_conflicts(db: StateDB) -> None:
    await _table(db)

    def insert(conn: sqlite3.Connection) -> tuple[int | None, int | None]:
        first = conn.execute("INSERT INTO t (name) VALUES (?)", ("a",)).lastrowid
        second = conn.execute("INSERT INTO t (name) VALUES (?)", ("b",)).lastrowid
        return first, second

    assert await db.write(insert) == (1, 2)
    ignored = await db.write(
        lambda c: c.execute("INSERT OR IGNORE INTO t (name) VALUES (?)", ("a",)).rowcount
    )
    assert ignored == 0
    changed = await db.write(
        lambda c: c.executemany("UPDATE t SET n = n + 1 WHERE name = ?", [("a",), ("b",), ("z",)])
    )
    assert changed.rowcount == 2
    with pytest.raises(sqlite3.IntegrityError, match="UNIQUE constraint failed"):
        await db.write(lambda c: c.execute("INSERT INTO t (name) VALUES ('a')"))
    with pytest.raises(sqlite3.IntegrityError, match="NOT NULL constraint failed"):
        await db.write(lambda c: c.execute("INSERT INTO t (name, n) VALUES ('c', NULL)"))


async def test_a_duplicate_session_id_is_a_record_conflict(db: StateDB) -> None:
    first = SessionRecord(
        key="agent:main:main", session_id="s1", agent_id="main", kind="main",
        created_at=1.0, updated_at=1.0,
    )  # fmt: skip
    await db.sessions.create(first)
    other = SessionRecord(
        key="agent:main:other", session_id="s1", agent_id="main", kind="chat",
        created_at=1.0, updated_at=1.0,
    )  # fmt: skip
    with pytest.raises(RecordConflictError):
        await db.sessions.create(other)
    # A failed write left nothing behind and the next one works.
    assert [s.key for s in await db.sessions.list()] == ["agent:main:main"]
