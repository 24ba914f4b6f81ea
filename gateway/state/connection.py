"""What the state tables use of a database connection, and where the two databases differ.

The tables run functions of a :class:`Connection`: ``execute`` and ``executemany`` with
``?`` parameters, rows read by position or by column name, a cursor's ``rowcount``. Each
backend implements it over its own driver — :class:`gateway.state.sqlite.SqliteConnection`
over :mod:`sqlite3`, :class:`gateway.state.postgres.PgConnection` over psycopg — and raises
Herald's typed errors (:mod:`gateway.state.errors`) for its driver's: a duplicate key is a
:class:`~gateway.state.errors.RecordConflictError`, a broken CHECK, NOT NULL or foreign key a
:class:`~gateway.state.errors.ConstraintError`, a write that met a concurrent one a
:class:`~gateway.state.errors.WriteConflictError`, a full disk a
:class:`~gateway.state.errors.DiskFullError`.

Most statements are one text for both databases: SQLite ≥ 3.35 (Debian bookworm has 3.40,
trixie 3.46) speaks ``RETURNING``, ``ON CONFLICT (…) DO UPDATE``/``DO NOTHING``, ``NULLS
FIRST``/``NULLS LAST`` and ``WITH RECURSIVE`` as PostgreSQL does. Habits that keep a text
portable, which every table follows:

- In an upsert's ``DO UPDATE SET``, the existing row's columns are qualified with the table's
  name (``live = live_runs.live + excluded.live``): bare, PostgreSQL finds them ambiguous.
- ``ORDER BY`` a column that may be NULL says ``NULLS FIRST`` or ``NULLS LAST``: the two
  databases put NULLs at opposite ends by default.
- Booleans are written ``1``/``0`` (the columns are integers on both).
- ``LIKE`` is never used: SQLite's ignores ASCII case, PostgreSQL's does not.

The rest differs, and each backend says it once, in its :class:`Dialect` (``SQLITE`` in
:mod:`gateway.state.sqlite.connection`, ``POSTGRESQL`` in
:mod:`gateway.state.postgres.connection`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol


@dataclass(frozen=True, slots=True)
class Dialect:
    """What a backend's SQL says differently (one instance per backend)."""

    name: Literal["sqlite", "postgresql"]
    #: The parameter mark of the driver. Tables write ``?``; the PostgreSQL connection
    #: sends ``%s`` for it (psycopg's mark) and ``%%`` for a literal ``%``.
    placeholder: str
    #: Appended to a claiming subquery (``… ORDER BY id LIMIT ?``): on PostgreSQL several
    #: replicas claim at once, each taking rows no other is taking, without waiting; SQLite's
    #: one writer claims alone, so nothing.
    skip_locked: str
    #: The scalar larger-of-two function: SQLite's ``max(a, b)``, PostgreSQL's
    #: ``GREATEST(a, b)``.
    greatest: str

    def larger(self, a: str, b: str) -> str:
        """SQL for the larger of ``a`` and ``b``, both never NULL: with a NULL, SQLite's
        ``max`` gives NULL and PostgreSQL's ``GREATEST`` the other value (every caller's
        operands are NOT NULL columns or bound numbers)."""
        return f"{self.greatest}({a}, {b})"


class Row(Protocol):
    """A result row, read by position or by column name (``sqlite3.Row`` is one)."""

    def __getitem__(self, key: int | str, /) -> Any: ...

    def __len__(self) -> int: ...


class Cursor(Protocol):
    """The outcome of one statement."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Connection(Protocol):
    """What the state tables use of a connection (see the module docstring)."""

    @property
    def dialect(self) -> Dialect: ...

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> Cursor:
        """Run one statement with ``?`` parameters."""
        ...

    def executemany(self, sql: str, parameters: Iterable[Sequence[Any]], /) -> Cursor:
        """Run one statement per parameter set; ``rowcount`` is their sum."""
        ...

    def last(self, sql: str, parameters: Sequence[Any] = (), /) -> Cursor:
        """Run the write's last statement: nothing of the write follows it. PostgreSQL sends
        it in one message with the ``COMMIT``, so what the function raises after it no
        longer undoes the write there: use it where such a raise only reports that nothing
        matched (an ``UPDATE … RETURNING`` of a row that is not there)."""
        ...

    def queue(self, sql: str, parameters: Sequence[Any] = (), /) -> None:
        """Run one statement in this write, in order, its result never read. SQLite runs
        it now; PostgreSQL sends it in one message with the next statement or the
        ``COMMIT`` (one round trip for all), so an error of it is raised by that call."""
        ...
