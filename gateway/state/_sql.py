"""Small SQL helpers shared by the table modules (internal)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Protocol, TypeVar

from gateway.llm import Usage
from gateway.state.connection import Connection, Dialect
from gateway.state.errors import InvalidUpdateError, RecordNotFoundError
from gateway.state.rows import to_column_value

T = TypeVar("T")

#: A turn's usage added to a row's totals (sessions and runs have the same columns), its
#: cost only when one is known; bound by :func:`usage_values`. The cast gives the cost's first
#: mark a type, so PostgreSQL can prepare the statement.
ADD_USAGE_SQL = (
    "usage_input = usage_input + ?, usage_output = usage_output + ?,"
    " usage_cache_read = usage_cache_read + ?, usage_cache_write = usage_cache_write + ?,"
    " cost_usd = CASE WHEN CAST(? AS DOUBLE PRECISION) IS NULL THEN cost_usd"
    " ELSE COALESCE(cost_usd, 0) + ? END"
)


def usage_values(usage: Usage, cost_usd: float | None) -> tuple[Any, ...]:
    """The values :data:`ADD_USAGE_SQL` binds, in order."""
    return (usage.input, usage.output, usage.cache_read, usage.cache_write, cost_usd, cost_usd)


class Database(Protocol):
    """What a table needs of :class:`gateway.state.database.StateDB`."""

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
