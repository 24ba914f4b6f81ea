"""Small SQL helpers shared by the table modules (internal)."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Protocol, TypeVar

from gateway.state.errors import InvalidUpdateError, RecordConflictError, RecordNotFoundError
from gateway.state.rows import to_column_value

T = TypeVar("T")


class Database(Protocol):
    """What a table needs of :class:`gateway.state.db.StateDB`."""

    def read(self, fn: Callable[[sqlite3.Connection], T]) -> Awaitable[T]: ...

    def write(self, fn: Callable[[sqlite3.Connection], T]) -> Awaitable[T]: ...


def column_list(columns: Iterable[str], *, prefix: str = "") -> str:
    return ", ".join(prefix + column for column in columns)


def insert_sql(table: str, columns: Iterable[str]) -> str:
    names = list(columns)
    marks = ", ".join("?" for _ in names)
    return f"INSERT INTO {table} ({column_list(names)}) VALUES ({marks})"


def update_assignments(
    table: str, changes: Mapping[str, Any], allowed: frozenset[str]
) -> tuple[str, list[Any]]:
    """``"a = ?, b = ?"`` and the values for ``changes``; unknown columns are refused.

    Column names come from the caller, so they are checked against the table's known
    columns before they reach SQL text.
    """
    if not changes:
        raise InvalidUpdateError(f"{table}: nothing to update")
    unknown = sorted(set(changes) - allowed)
    if unknown:
        raise InvalidUpdateError(f"{table}: cannot update {', '.join(unknown)}")
    names = list(changes)
    sql = ", ".join(f"{name} = ?" for name in names)
    return sql, [to_column_value(changes[name]) for name in names]


def integrity_error(
    table: str, exc: sqlite3.IntegrityError
) -> RecordConflictError | InvalidUpdateError:
    """A duplicate key is a :class:`RecordConflictError`; a CHECK, NOT NULL or foreign key
    violation is the caller's bad value, an :class:`InvalidUpdateError`."""
    text = str(exc)
    if text.startswith("UNIQUE constraint failed"):
        return RecordConflictError(table, text)
    return InvalidUpdateError(f"{table}: {text}")


def in_clause(values: Iterable[str]) -> tuple[str, list[str]]:
    items = list(values)
    return "(" + ", ".join("?" for _ in items) + ")", items


def skip_locked(conn: sqlite3.Connection) -> str:
    """``FOR UPDATE SKIP LOCKED`` for a claiming subquery on PostgreSQL, where several
    replicas claim at once (each takes rows no other is taking, without waiting); nothing on
    SQLite, whose one writer claims alone."""
    return "" if isinstance(conn, sqlite3.Connection) else " FOR UPDATE SKIP LOCKED"


def returned_row(
    conn: sqlite3.Connection, sql: str, params: Iterable[Any], table: str, key: object
) -> sqlite3.Row:
    """The one row a write ``… RETURNING`` gave (RecordNotFoundError naming ``table`` and
    ``key`` when none): the write reads its result back in the same statement."""
    rows = conn.execute(sql, list(params)).fetchall()
    if len(rows) != 1:
        raise RecordNotFoundError(table, key)
    row: sqlite3.Row = rows[0]
    return row
