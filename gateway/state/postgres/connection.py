"""The PostgreSQL side of the state tables' connection: psycopg 3 as a
:class:`~gateway.state.connection.Connection`, its errors as Herald's typed errors.

The tables' statements are PostgreSQL's too (see :mod:`gateway.state.connection` for the
habits that keep a text portable); what :class:`PgConnection` does to one is the
dialect's parameter mark alone: ``?`` is sent as psycopg's ``%s``, and a literal ``%`` as
``%%`` (the state's SQL binds every value, so neither ever stands inside a quoted literal).
Parameters are bound on the client (``ClientCursor``: a NULL parameter needs no type, as
in SQLite, and a transaction's ``BEGIN`` can travel in one message with its first
statement); integers PostgreSQL sums come back as ``int``, never a ``Decimal``.

Errors are mapped by SQLSTATE, the driver's own classification (:func:`state_error`): a
unique violation is a :class:`RecordConflictError`, another broken constraint a
:class:`ConstraintError`, a serialization failure or a deadlock a
:class:`WriteConflictError`, ``disk_full`` a :class:`DiskFullError`, a lost connection or a
server shutting down :class:`StateUnavailableError`.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Final, Literal

import psycopg
from psycopg import errors as pg_errors
from psycopg.adapt import Buffer, Loader
from psycopg.rows import RowMaker

from gateway.state.connection import Dialect
from gateway.state.errors import (
    ConstraintError,
    DiskFullError,
    ReadOnlyStateError,
    RecordConflictError,
    StateError,
    StateUnavailableError,
    WriteConflictError,
)
from gateway.state.postgres.prepared import PreparedStatementError, PreparedStatements

#: PostgreSQL's SQL where it differs (see :class:`~gateway.state.connection.Dialect`).
POSTGRESQL: Final = Dialect("postgresql", "%s", " FOR UPDATE SKIP LOCKED", "GREATEST")

#: SQLSTATEs of a transaction PostgreSQL failed for meeting another: run it again.
CONFLICT_SQLSTATES: Final = frozenset({"40001", "40P01"})
#: The server could not write for want of disk space (``disk_full``).
DISK_FULL_SQLSTATE: Final = "53100"
#: SQLSTATE classes of a server that cannot be used now: 08 connection exceptions, 57
#: operator intervention (a shutdown, an admin's cancel), 53 resources other than disk.
_UNAVAILABLE_CLASSES: Final = ("08", "57", "53")


class Row(Sequence[Any]):
    """A result row read by position or by column name."""

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
    # The column names straight from the result: psycopg's ``description`` builds a Column
    # object per column each time it is read, most of a statement's CPU for a run's row.
    result = cursor.pgresult
    count = result.nfields if result is not None else 0
    index = _name_index(tuple(result.fname(n) for n in range(count)) if count else ())

    def make(values: Sequence[Any]) -> Row:
        return Row(tuple(values), index)

    return make


@functools.lru_cache(maxsize=512)
def _name_index(names: tuple[bytes | None, ...]) -> dict[str, int]:
    """Each column's position by name (the first, where names repeat); shared by every row
    of every result with these columns, never changed."""
    index: dict[str, int] = {}
    for position, name in enumerate(names):
        if name is not None:
            index.setdefault(name.decode(), position)
    return index


class _IntegralNumeric(Loader):
    """``numeric`` as an ``int`` when integral (``SUM`` of integers), else a ``float`` —
    never a ``Decimal``, which neither orjson nor the records expect."""

    def load(self, data: Buffer) -> int | float:
        text = bytes(data).decode()
        if any(c in text for c in ".eEN"):  # a fraction, an exponent, NaN
            return float(text)
        return int(text)


@functools.lru_cache(maxsize=2048)
def driver_sql(sql: str) -> str:
    """``sql`` with psycopg's parameter marks (see the module docstring)."""
    return sql.replace("%", "%%").replace("?", "%s")


def state_error(exc: psycopg.Error) -> StateError:
    """The typed error for what psycopg reported (see the module docstring)."""
    sqlstate = exc.sqlstate or ""
    text = " ".join(str(exc).split())  # libpq's messages run over several lines
    if isinstance(exc, pg_errors.UniqueViolation):
        return RecordConflictError(exc.diag.table_name or "?", text)
    if isinstance(exc, pg_errors.CheckViolation):
        return ConstraintError("CHECK", text)
    if isinstance(exc, pg_errors.NotNullViolation):
        return ConstraintError("NOT NULL", text)
    if isinstance(exc, pg_errors.ForeignKeyViolation):
        return ConstraintError("FOREIGN KEY", text)
    if sqlstate in CONFLICT_SQLSTATES:
        return WriteConflictError(text)
    if sqlstate == DISK_FULL_SQLSTATE:
        return DiskFullError(text)
    if isinstance(exc, pg_errors.ReadOnlySqlTransaction):
        return ReadOnlyStateError(text)
    if (
        sqlstate[:2] in _UNAVAILABLE_CLASSES
        or isinstance(exc, psycopg.InterfaceError)
        or (isinstance(exc, psycopg.OperationalError) and not sqlstate)
    ):
        return StateUnavailableError(text)
    return StateError(f"postgresql: {text}")


class PgCursor:
    """The outcome of one statement: its rows (read at once: psycopg holds the whole result
    already) and ``rowcount``."""

    __slots__ = ("_rows", "rowcount")

    def __init__(self, rows: list[Row], rowcount: int) -> None:
        self._rows = rows
        self.rowcount = rowcount

    @classmethod
    def of(cls, cursor: psycopg.Cursor[Row]) -> PgCursor:
        result = cursor.pgresult
        returned = result is not None and result.status == psycopg.pq.ExecStatus.TUPLES_OK
        return cls(cursor.fetchall() if returned else [], cursor.rowcount)

    def fetchone(self) -> Row | None:
        return self._rows[0] if self._rows else None

    def fetchall(self) -> list[Row]:
        return self._rows

    def __iter__(self) -> Iterator[Row]:
        return iter(self._rows)


class PgConnection:
    """A psycopg connection as the tables use it (``raw`` is the connection)."""

    def __init__(self, conn: psycopg.Connection[Row]) -> None:
        self.raw = conn
        #: Binds queued statements' parameters on the client, as ``execute`` does.
        self._binder = psycopg.ClientCursor(conn)
        #: Statements (bound, PostgreSQL's SQL) waiting to go with the next one: the
        #: transaction's ``BEGIN`` (:meth:`begin_with_next`) and :meth:`queue`'s.
        self._pending: list[str] = []
        #: The transaction's BEGIN is still among them (no statement went out yet).
        self._begin_unsent = False
        #: A write's transaction is open (between begin_with_next and end).
        self._writing = False
        #: The write's last statement went out with its COMMIT: nothing may follow it.
        self._finished = False
        #: The transaction holds a group of writes (:mod:`gateway.state.postgres.groups`): a write's
        #: last statement cannot take the COMMIT with it.
        self._grouped = False
        #: Where the group's current write begins in ``_pending`` while its ``SAVEPOINT``
        #: has not been sent (None once it has).
        self._mark: int | None = None
        #: The tables' texts prepared on this connection (:mod:`gateway.state.postgres.prepared`).
        self.prepared = PreparedStatements()

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
    def dialect(self) -> Dialect:
        return POSTGRESQL

    @property
    def closed(self) -> bool:
        return self.raw.closed or self.raw.broken

    def close(self) -> None:
        self.raw.close()

    def begin_with_next(self, begin: str, *, grouped: bool = False) -> None:
        """Open a transaction with ``begin`` (no parameters) sent in one message with the
        next statement: a round trip less per transaction. Parameters are bound on the
        client, so the pair goes as one simple query, whose explicit ``BEGIN`` keeps the
        transaction open after it. :meth:`end` commits or rolls back. A ``grouped``
        transaction runs several writes, each between :meth:`savepoint` and
        :meth:`release`."""
        self._pending = [begin]
        self._begin_unsent = True
        self._writing = True
        self._finished = False
        self._grouped = grouped
        self._mark = None

    # -- a group's writes (gateway.state.pggroup) --------------------------------------------

    def savepoint(self, name: str) -> None:
        """Begin a write of the group: its ``SAVEPOINT`` goes with its first statement (and
        the previous write's queued ones)."""
        self._mark = len(self._pending)
        self._pending.append(f"SAVEPOINT {name}")

    def release(self, name: str) -> None:
        """End the write begun by ``savepoint(name)``: its ``RELEASE`` goes with the next
        message."""
        self._pending.append(f"RELEASE {name}")

    def undo_write(self, name: str) -> None:
        """Undo the current write, which raised with the transaction intact: what it queued
        is dropped and, once its savepoint was sent, a rollback to it queued in its place."""
        if self._mark is not None:  # nothing of it went out: drop it, savepoint included
            del self._pending[self._mark :]
        else:  # only its own statements are pending: the previous write's went before
            self._pending = [f"ROLLBACK TO SAVEPOINT {name}", f"RELEASE {name}"]
        self._mark = None
        self.prepared.dropped()

    def rollback_to(self, name: str) -> bool:
        """After a message failed the transaction: roll back to savepoint ``name`` now, and
        release it. False when the transaction has no such savepoint (the statement that
        failed came before it); the transaction stays failed then."""
        with self.raw.cursor() as cursor:
            try:
                cursor.execute(f"ROLLBACK TO SAVEPOINT {name}; RELEASE {name}")
            except pg_errors.InvalidSavepointSpecification:
                return False
            except psycopg.Error as exc:
                raise state_error(exc) from exc
        return True

    @property
    def transaction(self) -> Literal["open", "failed", "gone"]:
        """The write transaction's state: ``failed`` once a statement failed it (only a
        rollback may follow), ``gone`` when it ended (or the connection did)."""
        if self.closed:
            return "gone"
        status = self.raw.info.transaction_status
        if status == psycopg.pq.TransactionStatus.INERROR:
            return "failed"
        if status == psycopg.pq.TransactionStatus.INTRANS or self._begin_unsent:
            return "open"
        return "gone"

    def end(self, finish: str) -> None:
        """``COMMIT`` or ``ROLLBACK`` the transaction :meth:`begin_with_next` opened: a
        ``COMMIT`` goes with the statements queued since the last one sent (nothing goes
        when no statement ran: its ``BEGIN`` was never sent); a ``ROLLBACK`` drops them."""
        pending, unsent = self._pending, self._begin_unsent
        self._pending, self._begin_unsent, self._writing = [], False, False
        self._finished = self._grouped = False
        self._mark = None
        if finish == "COMMIT" and pending[1 if unsent else 0 :]:
            self._pending = pending
            self.execute_native(finish)
            return
        self.prepared.dropped()
        if unsent:
            return
        if self.raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            self.execute_native(finish)

    def queue(self, sql: str, parameters: Sequence[Any] = (), /) -> None:
        """Send ``sql`` with the next statement or the ``COMMIT`` (see
        :class:`~gateway.state.connection.Connection`); outside a write, at once."""
        if not self._writing:
            self.execute(sql, parameters)
            return
        self._check_unfinished()
        prepare, execute = self.prepared.pieces(sql, len(parameters))
        if prepare is not None:
            self._pending.append(prepare)
        self._pending.append(self._binder.mogrify(execute or driver_sql(sql), parameters))

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> PgCursor:
        """Run one statement with ``?`` parameters."""
        self._check_unfinished()
        with self.raw.cursor() as cursor:
            self._send_table(cursor, sql, parameters)
            return PgCursor.of(cursor)

    def last(self, sql: str, parameters: Sequence[Any] = (), /) -> PgCursor:
        """Run the write's last statement in one message with its ``COMMIT`` (see
        :class:`~gateway.state.connection.Connection`); outside a write, as ``execute``."""
        if not self._writing or self._grouped:  # in a group, later writes follow it
            return self.execute(sql, parameters)
        self._check_unfinished()
        self._finished = True
        with self.raw.cursor() as cursor:
            self._send_table(cursor, sql, parameters, then="COMMIT")
            return PgCursor.of(cursor)

    def executemany(self, sql: str, parameters: Iterable[Sequence[Any]], /) -> PgCursor:
        """Run one statement per parameter set; ``rowcount`` is their sum."""
        total = 0
        for values in parameters:
            total += max(0, self.execute(sql, values).rowcount)
        return PgCursor([], total)

    def execute_native(self, sql: str, parameters: Sequence[Any] | None = None) -> list[Row]:
        """Run PostgreSQL's own SQL (``%s`` marks), as the backend itself needs."""
        with self.raw.cursor() as cursor:
            self._send(cursor, sql, parameters)
            return cursor.fetchall() if cursor.description is not None else []

    def _check_unfinished(self) -> None:
        if self._finished:
            raise StateError("a statement after the write's last one (its COMMIT was sent)")

    def _send_table(
        self,
        cursor: psycopg.Cursor[Row],
        sql: str,
        parameters: Sequence[Any],
        *,
        then: str | None = None,
    ) -> None:
        """:meth:`_send` for a table's ``sql`` (``?`` marks), prepared once it recurs."""
        prepare, execute = self.prepared.pieces(sql, len(parameters))
        if prepare is not None:
            self._pending.append(prepare)
        self._send(cursor, execute or driver_sql(sql), parameters, then=then)

    def _send(
        self,
        cursor: psycopg.Cursor[Row],
        sql: str,
        parameters: Sequence[Any] | None,
        *,
        then: str | None = None,
    ) -> None:
        """Execute ``sql``, after the pending statements in the same message if there are
        any, and before ``then`` (their results are skipped: the cursor shows the
        statement's)."""
        if parameters is not None and (self._pending or then is not None):
            # Bound before the pending statements are taken: a value the driver cannot bind
            # fails this statement alone, and what is pending stays for the next.
            try:
                sql, parameters = self._binder.mogrify(sql, parameters), None
            except psycopg.Error as exc:
                raise state_error(exc) from exc
        pending, self._pending = self._pending, []
        self._begin_unsent = False
        self._mark = None
        try:
            if not pending and then is None:
                cursor.execute(sql, parameters)
                return
            # All bound already: sent as it is, with no parameter marks to read.
            after = [then] if then is not None else []
            cursor.execute("; ".join([*pending, sql, *after]))
            for _ in pending:
                cursor.nextset()
        except psycopg.Error as exc:
            if self.prepared.failed(exc.sqlstate):
                raise PreparedStatementError(" ".join(str(exc).split())) from exc
            raise state_error(exc) from exc
        self.prepared.sent()
