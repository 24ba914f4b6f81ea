"""The SQLite side of the state tables' connection: :mod:`sqlite3` as a
:class:`~gateway.state.connection.Connection`, its errors as Herald's typed errors.

SQLite runs the tables' SQL as written (``?`` is its own parameter mark), so
:class:`SqliteConnection` passes each statement through and only turns the driver's
exceptions into :mod:`gateway.state.errors`' by their result codes (Python 3.11's
``sqlite_errorcode`` is the extended code, so a duplicate key and a broken CHECK are told
apart without reading the message); the message itself is kept as the error's detail.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any, Final

from gateway.state.connection import Cursor, Dialect
from gateway.state.errors import (
    ConstraintError,
    ConstraintKind,
    DiskFullError,
    ReadOnlyStateError,
    RecordConflictError,
    StateError,
    WriteConflictError,
)

#: SQLite's SQL where it differs (see :class:`~gateway.state.connection.Dialect`).
SQLITE: Final = Dialect("sqlite", "?", "", "max")

#: Extended result codes of the constraints other than uniqueness.
_CONSTRAINTS: Final[dict[int, ConstraintKind]] = {
    sqlite3.SQLITE_CONSTRAINT_CHECK: "CHECK",
    sqlite3.SQLITE_CONSTRAINT_NOTNULL: "NOT NULL",
    sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY: "FOREIGN KEY",
}
_UNIQUE: Final = frozenset({sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY})
#: Primary codes of a write that met another: the database is locked by another connection.
_CONFLICT: Final = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})


def state_error(exc: sqlite3.Error) -> StateError:
    """The typed error for what SQLite reported (see the module docstring)."""
    code = getattr(exc, "sqlite_errorcode", None)
    text = str(exc)
    if code is None:  # raised by the module itself (a closed connection, a misuse)
        return StateError(f"sqlite3: {text}")
    if code in _UNIQUE:
        # "UNIQUE constraint failed: <table>.<column>[, …]": the table is the first name's.
        names = text.partition(": ")[2]
        return RecordConflictError(names.partition(".")[0] or "?", text)
    if code in _CONSTRAINTS:
        return ConstraintError(_CONSTRAINTS[code], text)
    primary = code & 0xFF
    if primary == sqlite3.SQLITE_FULL:
        return DiskFullError(text)
    if primary in _CONFLICT:
        return WriteConflictError(text)
    if primary == sqlite3.SQLITE_READONLY:
        return ReadOnlyStateError(text)
    if primary == sqlite3.SQLITE_CONSTRAINT:
        return ConstraintError("CHECK", text)
    return StateError(f"sqlite3: {text}")


class SqliteConnection:
    """A :class:`sqlite3.Connection` as the tables use it (``raw`` is the connection)."""

    __slots__ = ("raw",)

    def __init__(self, raw: sqlite3.Connection) -> None:
        self.raw = raw

    @property
    def dialect(self) -> Dialect:
        return SQLITE

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> Cursor:
        try:
            return self.raw.execute(sql, parameters)
        except sqlite3.Error as exc:
            raise state_error(exc) from exc

    def executemany(self, sql: str, parameters: Iterable[Sequence[Any]], /) -> Cursor:
        try:
            return self.raw.executemany(sql, parameters)
        except sqlite3.Error as exc:
            raise state_error(exc) from exc

    def last(self, sql: str, parameters: Sequence[Any] = (), /) -> Cursor:
        return self.execute(sql, parameters)  # the group commits after the whole write

    def queue(self, sql: str, parameters: Sequence[Any] = (), /) -> None:
        self.execute(sql, parameters)  # in-process: nothing to save by waiting
