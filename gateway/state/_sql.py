"""Small SQL helpers shared by the table modules (internal)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Protocol, TypeVar

from gateway.state.connection import Connection, Dialect
from gateway.state.errors import InvalidUpdateError, RecordNotFoundError
from gateway.state.rows import to_column_value

T = TypeVar("T")

#: Usage totals' cost: ``cost_usd`` plus the bound cost when one is known (the same value bound
#: twice). The cast gives the first mark a type, so PostgreSQL can prepare the statement.
ADD_COST_SQL = (
    "cost_usd = CASE WHEN CAST(? AS DOUBLE PRECISION) IS NULL THEN cost_usd"
    " ELSE COALESCE(cost_usd, 0) + ? END"
)


class Database(Protocol):
    """What a table needs of :class:`gateway.state.db.StateDB`."""

    @property
    def dialect(self) -> Dialect: ...

    def read(self, fn: Callable[[Connection], T]) -> Awaitable[T]: ...

    def write(self, fn: Callable[[Connection], T]) -> Awaitable[T]: ...


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


def in_clause(values: Iterable[str]) -> tuple[str, list[str]]:
    items = list(values)
    return "(" + ", ".join("?" for _ in items) + ")", items


def returned_row(conn: Connection, sql: str, params: Iterable[Any], table: str, key: object) -> Any:
    """The one row a write ``… RETURNING`` gave (RecordNotFoundError naming ``table`` and
    ``key`` when none): the write reads its result back in the same statement."""
    rows = conn.execute(sql, list(params)).fetchall()
    if len(rows) != 1:
        raise RecordNotFoundError(table, key)
    return rows[0]
