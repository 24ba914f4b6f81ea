"""A psycopg connection that the state tables use as they use a :class:`sqlite3.Connection`.

The tables run ``fn(conn)`` with SQLite's SQL and SQLite's habits: ``conn.execute(sql,
params)`` and ``executemany``, rows read by index and by column name, ``cursor.rowcount``,
``cursor.lastrowid``, :class:`sqlite3.IntegrityError` for a broken constraint (its text
saying ``UNIQUE constraint failed`` for a duplicate key), and SQLite's ``SQLITE_FULL`` for
a server whose disk is full (SQLSTATE ``53100``). :class:`PgConnection` offers
exactly that over psycopg 3: each statement is rewritten by :mod:`gateway.state.pgsql`,
parameters are bound on the client (``ClientCursor``: a NULL parameter needs no type, as in
SQLite), integers summed by PostgreSQL come back as ``int`` (not ``Decimal``), and
PostgreSQL's errors are raised as the :mod:`sqlite3` exceptions the tables already catch.

Left as PostgreSQL's own, for the caller above to handle: serialization failures and
deadlocks (the write is retried whole) and a lost connection (the database is unavailable).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Final

import psycopg
from psycopg import errors as pg_errors
from psycopg.adapt import Buffer, Loader
from psycopg.rows import RowMaker

from gateway.state.pgsql import translate

#: SQLSTATE classes left to the caller: 08 connection exceptions, 40 transaction rollbacks
#: (serialization failure, deadlock), 57 operator intervention (a server shutting down).
PASS_THROUGH: Final = ("08", "40", "57")
#: The server could not write for want of disk space (``disk_full``).
DISK_FULL_SQLSTATE: Final = "53100"


class Row(Sequence[Any]):
    """A result row read by position or by column name, like :class:`sqlite3.Row`."""

    __slots__ = ("_index", "_values")

    def __init__(self, values: tuple[Any, ...], index: dict[str, int]) -> None:
        self._values = values
        self._index = index

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return self._values[self._index[key]]
        return self._values[key]

    def __len__(self) -> int:
        return len(self._values)

    def keys(self) -> list[str]:
        return list(self._index)

    def __repr__(self) -> str:
        return f"<Row {self._values!r}>"


def _row_factory(cursor: Any) -> RowMaker[Row]:
    index: dict[str, int] = {}
    for position, column in enumerate(cursor.description or ()):
        index.setdefault(column.name, position)

    def make(values: Sequence[Any]) -> Row:
        return Row(tuple(values), index)

    return make


class _IntegralNumeric(Loader):
    """``numeric`` as SQLite would give it: ``int`` when integral (``SUM`` of integers),
    else ``float`` — never a ``Decimal``, which neither orjson nor the records expect."""

    def load(self, data: Buffer) -> int | float:
        text = bytes(data).decode()
        if any(c in text for c in ".eEN"):  # a fraction, an exponent, NaN
            return float(text)
        return int(text)


class PgCursor:
    """The outcome of one statement: rows, ``rowcount`` and ``lastrowid``."""

    def __init__(self, conn: PgConnection, cursor: psycopg.Cursor[Row] | None) -> None:
        self._conn = conn
        self._cursor = cursor
        self._rowcount = cursor.rowcount if cursor is not None else -1

    @property
    def rowcount(self) -> int:
        return self._rowcount

    @property
    def lastrowid(self) -> int | None:
        """The identity value the last INSERT of this connection generated (None if none)."""
        return self._conn.last_identity()

    def fetchone(self) -> Row | None:
        if self._cursor is None or self._cursor.description is None:
            return None
        return self._cursor.fetchone()

    def fetchall(self) -> list[Row]:
        if self._cursor is None or self._cursor.description is None:
            return []
        return self._cursor.fetchall()

    def __iter__(self) -> Iterator[Row]:
        return iter(self.fetchall())


class PgConnection:
    """The subset of :class:`sqlite3.Connection` the state tables use, on PostgreSQL."""

    def __init__(self, conn: psycopg.Connection[Row]) -> None:
        self.raw = conn
        #: The statement opening a transaction, sent with the next statement (see
        #: :meth:`begin_with_next`); None when nothing waits to be sent.
        self._begin: str | None = None

    @classmethod
    def connect(cls, url: str, *, application_name: str, readonly: bool) -> PgConnection:
        """Open an autocommit connection to ``url`` (transactions are explicit, as with the
        SQLite backend); a ``readonly`` one refuses writes in the server."""
        conninfo = psycopg.conninfo.conninfo_to_dict(url)
        options: dict[str, Any] = {"application_name": application_name}
        if "connect_timeout" not in conninfo:
            options["connect_timeout"] = 10  # libpq would otherwise wait for the OS
        conn = psycopg.connect(
            url,
            autocommit=True,
            cursor_factory=psycopg.ClientCursor,
            row_factory=_row_factory,
            **options,
        )
        conn.adapters.register_loader("numeric", _IntegralNumeric)
        if readonly:
            conn.execute("SET default_transaction_read_only = on")
        return cls(conn)

    @property
    def closed(self) -> bool:
        return self.raw.closed or self.raw.broken

    def close(self) -> None:
        self.raw.close()

    def begin_with_next(self, begin: str) -> None:
        """Open a transaction with ``begin`` (PostgreSQL's SQL, no parameters) sent in one
        message with the next statement: a round trip less per transaction. Parameters
        are bound on the client, so the pair goes as one simple query, whose explicit
        ``BEGIN`` keeps the transaction open after it. :meth:`end` commits or rolls back."""
        self._begin = begin

    def end(self, finish: str) -> None:
        """``COMMIT`` or ``ROLLBACK`` the transaction :meth:`begin_with_next` opened; nothing
        to send when no statement ran in it (its ``BEGIN`` was never sent)."""
        if self._begin is not None:
            self._begin = None
            return
        if self.raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            self.execute_native(finish)

    def execute(self, sql: str, parameters: Iterable[Any] = ()) -> PgCursor:
        """Run one SQLite statement (rewritten for PostgreSQL) with ``?`` parameters."""
        cursor = self.raw.cursor()
        try:
            self._send(cursor, translate(sql), list(parameters))
        except psycopg.Error as exc:
            raise as_sqlite_error(exc) from exc
        return PgCursor(self, cursor)

    def _send(self, cursor: psycopg.Cursor[Row], sql: str, parameters: Sequence[Any]) -> None:
        """Execute ``sql``, after the pending ``BEGIN`` in the same message if there is one
        (its result is skipped: the cursor shows the statement's)."""
        begin, self._begin = self._begin, None
        if begin is None:
            cursor.execute(sql, parameters)
            return
        cursor.execute(f"{begin}; {sql}", parameters)
        cursor.nextset()

    def executemany(self, sql: str, seq_of_parameters: Iterable[Iterable[Any]]) -> PgCursor:
        """Run one statement per parameter set; ``rowcount`` is their sum, as in sqlite3."""
        total = 0
        for parameters in seq_of_parameters:
            total += max(0, self.execute(sql, parameters).rowcount)
        cursor = PgCursor(self, None)
        cursor._rowcount = total
        return cursor

    def execute_native(self, sql: str, parameters: Sequence[Any] = ()) -> list[Row]:
        """Run PostgreSQL's own SQL (``%s`` placeholders), as the backend itself needs."""
        with self.raw.cursor() as cursor:
            self._send(cursor, sql, list(parameters))
            return cursor.fetchall() if cursor.description is not None else []

    def last_identity(self) -> int | None:
        # lastval() fails when this session has generated none; inside a write that would
        # abort the transaction, so it is asked under a savepoint.
        if self._begin is not None:  # no statement ran yet: nothing was generated either
            return None
        in_transaction = self.raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE
        try:
            if in_transaction:
                self.raw.execute("SAVEPOINT herald_lastval")
            row = self.raw.execute("SELECT lastval()").fetchone()
            if in_transaction:
                self.raw.execute("RELEASE SAVEPOINT herald_lastval")
        except pg_errors.ObjectNotInPrerequisiteState:
            if in_transaction:
                self.raw.execute("ROLLBACK TO SAVEPOINT herald_lastval")
            return None
        return None if row is None else int(row[0])


def as_sqlite_error(exc: psycopg.Error) -> Exception:
    """``exc`` as the :mod:`sqlite3` exception SQLite raises for the same failure, worded as
    SQLite words it where callers read the text; connection and transaction-rollback errors
    (see :data:`PASS_THROUGH`) are returned unchanged."""
    sqlstate = exc.sqlstate or ""
    if sqlstate[:2] in PASS_THROUGH or isinstance(exc, psycopg.InterfaceError):
        return exc
    diag = exc.diag
    table = diag.table_name or "?"
    if isinstance(exc, pg_errors.UniqueViolation):
        return sqlite3.IntegrityError(
            f"UNIQUE constraint failed: {table} ({diag.constraint_name or 'key'})"
        )
    if isinstance(exc, pg_errors.NotNullViolation):
        return sqlite3.IntegrityError(f"NOT NULL constraint failed: {table}.{diag.column_name}")
    if isinstance(exc, pg_errors.CheckViolation):
        return sqlite3.IntegrityError(f"CHECK constraint failed: {diag.constraint_name}")
    if isinstance(exc, pg_errors.ForeignKeyViolation):
        return sqlite3.IntegrityError("FOREIGN KEY constraint failed")
    if isinstance(exc, psycopg.IntegrityError):
        return sqlite3.IntegrityError(diag.message_primary or str(exc))
    error = sqlite3.OperationalError(diag.message_primary or str(exc))
    if sqlstate == DISK_FULL_SQLSTATE:
        # As SQLite reports a full disk, so the state database's disk-full handling (and
        # anything that tells SQLITE_FULL apart) takes it as one.
        error.sqlite_errorcode = sqlite3.SQLITE_FULL
        error.sqlite_errorname = "SQLITE_FULL"
    return error
