"""The PostgreSQL side of the state tables' connection: psycopg 3 as a
:class:`~gateway.state.connection.Connection`, its errors as Herald's typed errors.

The tables' statements are PostgreSQL's too (see :mod:`gateway.state.connection` for the
habits that keep a text portable); what :class:`PgConnection` does to one is the
dialect's parameter mark alone: ``?`` is sent as psycopg's ``%s``, and a literal ``%`` as
``%%`` (the state's SQL binds every value, so neither ever stands inside a quoted literal).
Parameters are bound on the server, and a statement is prepared at its second execution
on a connection (:data:`PREPARE_THRESHOLD`): parsing and planning was most of what a
statement cost the server. A write runs in psycopg's pipeline mode, entered at the first
write and kept, so its ``BEGIN`` travels with its first statement, queued statements with
the next one or the ``COMMIT``: each round trip is one sync of the pipeline
(:attr:`PgConnection.round_trips` counts them). Integers PostgreSQL sums come back as
``int``, never a ``Decimal``.

Errors are mapped by SQLSTATE, the driver's own classification (:func:`state_error`): a
unique violation is a :class:`RecordConflictError`, another broken constraint a
:class:`ConstraintError`, a serialization failure or a deadlock a
:class:`WriteConflictError`, ``disk_full`` a :class:`DiskFullError`, a lost connection or a
server shutting down :class:`StateUnavailableError`.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Final

import psycopg
from psycopg import errors as pg_errors
from psycopg.adapt import Buffer, Loader
from psycopg.rows import RowFactory, RowMaker, tuple_row

from gateway.state.connection import POSTGRESQL, Dialect
from gateway.state.errors import (
    ConstraintError,
    DiskFullError,
    ReadOnlyStateError,
    RecordConflictError,
    StateError,
    StateUnavailableError,
    WriteConflictError,
)

#: A statement is prepared on the server (parsed and planned once per connection) at its
#: second execution: most of a statement's cost to the server is that parse and plan.
PREPARE_THRESHOLD: Final = 1
#: Statements prepared per connection (the state's texts are a few hundred).
PREPARED_MAX: Final = 1024
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


def _column_index(cursor: psycopg.Cursor[Any]) -> dict[str, int]:
    """Each column's position by its name (the first of a repeated name), read from the
    result itself: ``cursor.description`` would make an object of each column."""
    result = cursor.pgresult
    index: dict[str, int] = {}
    for position in range(result.nfields if result is not None else 0):
        name = result.fname(position) if result is not None else None
        if name is not None:
            index.setdefault(name.decode(), position)
    return index


@functools.lru_cache(maxsize=2048)
def _rows_of(sql: str) -> RowFactory[Row]:
    """The row factory of statement ``sql``, which names its columns at its first result
    only: a statement's columns are the same each time it runs."""
    index: dict[str, int] | None = None

    def factory(cursor: Any) -> RowMaker[Row]:
        nonlocal index
        if index is None:
            index = _column_index(cursor)
        columns = index

        def make(values: Sequence[Any]) -> Row:
            return Row(tuple(values), columns)

        return make

    return factory


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

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.raw = conn
        #: Messages sent and waited for (tests and benchmarks count them).
        self.round_trips = 0
        #: The connection's pipeline, entered at its first write and kept (leaving it
        #: would cost a round trip per write).
        self._pipeline: psycopg.Pipeline | None = None
        self._pipeline_block: contextlib.AbstractContextManager[psycopg.Pipeline] | None = None
        #: The write's ``BEGIN``, until it goes out with the write's first statement.
        self._begin: str | None = None
        #: Statements of the write in the pipeline whose results were not waited for.
        self._unsynced = 0
        #: A write's transaction is open (between begin_with_next and end).
        self._writing = False
        #: psycopg's record of the statements it prepared on this connection, and those of
        #: them known to exist on the server (see :meth:`_forget_prepared`).
        names = getattr(getattr(conn, "_prepared", None), "_names", None)
        self._prepared_names: dict[Any, bytes] | None = names if isinstance(names, dict) else None
        self._prepared_known: dict[Any, bytes] = {}
        #: The write's last statement went out with its COMMIT: nothing may follow it.
        self._finished = False

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
            prepare_threshold=PREPARE_THRESHOLD,
            # A result never read (a queued statement's) is made into rows cheaply; those
            # read are made by their statement's own factory (:func:`_rows_of`).
            row_factory=tuple_row,
            **options,
        )
        conn.prepared_max = PREPARED_MAX
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
        self._leave_pipeline()
        self.raw.close()

    def begin_with_next(self, begin: str) -> None:
        """Open a transaction with ``begin`` (no parameters), sent in one message with the
        next statement: a round trip less per transaction. :meth:`end` commits or rolls
        back."""
        self._begin = begin
        self._unsynced = 0
        self._writing = True
        self._finished = False

    def end(self, finish: str) -> None:
        """``COMMIT`` or ``ROLLBACK`` the transaction :meth:`begin_with_next` opened: a
        ``COMMIT`` goes with the statements queued since the last round trip (nothing goes
        when no statement ran: its ``BEGIN`` was never sent), a ``ROLLBACK`` after them."""
        began, finished = self._begin is None, self._finished
        self._begin, self._writing, self._finished = None, False, False
        if not began or (finish == "COMMIT" and finished):
            return  # nothing was sent, or the COMMIT went with the last statement
        try:
            if finish == "COMMIT":
                pipeline = self._in_pipeline()
                self.raw.execute(finish, prepare=False)
                self._sync(pipeline)
                return
            if self._pipeline is not None and self._unsynced:
                # The queued statements go first: the server skips what follows a failed
                # one up to the round trip's end, so the ROLLBACK goes after them.
                with contextlib.suppress(psycopg.Error):
                    self._sync(self._pipeline)
            # Outside the pipeline (leaving it reads every result it still owes), so the
            # connection is as new for the next write, whatever failed.
            self._leave_pipeline()
            self.raw.execute(finish, prepare=False)
            self.round_trips += 1
        except psycopg.Error as exc:
            raise self._failed(exc) from exc

    def queue(self, sql: str, parameters: Sequence[Any] = (), /) -> None:
        """Send ``sql`` with the next statement or the ``COMMIT`` (see
        :class:`~gateway.state.connection.Connection`); outside a write, at once."""
        if not self._writing:
            self.execute(sql, parameters)
            return
        self._check_unfinished()
        try:
            self._in_pipeline()
            self.raw.execute(driver_sql(sql), parameters)
        except psycopg.Error as exc:
            raise self._failed(exc) from exc
        self._unsynced += 1

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> PgCursor:
        """Run one statement with ``?`` parameters."""
        self._check_unfinished()
        return self._send(driver_sql(sql), parameters)

    def last(self, sql: str, parameters: Sequence[Any] = (), /) -> PgCursor:
        """Run the write's last statement in one message with its ``COMMIT`` (see
        :class:`~gateway.state.connection.Connection`); outside a write, as ``execute``."""
        if not self._writing:
            return self.execute(sql, parameters)
        self._check_unfinished()
        self._finished = True
        return self._send(driver_sql(sql), parameters, then="COMMIT")

    def executemany(self, sql: str, parameters: Iterable[Sequence[Any]], /) -> PgCursor:
        """Run one statement per parameter set; ``rowcount`` is their sum. In a write they
        go in one round trip."""
        if not self._writing:
            total = 0
            for values in parameters:
                total += max(0, self.execute(sql, values).rowcount)
            return PgCursor([], total)
        self._check_unfinished()
        query = driver_sql(sql)
        cursors = []
        try:
            pipeline = self._in_pipeline()
            for values in parameters:
                cursor = self.raw.cursor()
                cursors.append(cursor)
                cursor.execute(query, values)
                self._unsynced += 1
            self._sync(pipeline)
            return PgCursor([], sum(max(0, cursor.rowcount) for cursor in cursors))
        except psycopg.Error as exc:
            raise self._failed(exc) from exc
        finally:
            for cursor in cursors:
                cursor.close()

    def execute_native(self, sql: str, parameters: Sequence[Any] | None = None) -> list[Row]:
        """Run PostgreSQL's own SQL (``%s`` marks; several statements when there are no
        parameters), outside a write, as the backend itself needs (migrations)."""
        try:
            with psycopg.ClientCursor(self.raw) as cursor:
                cursor.execute(sql, parameters)
                self.round_trips += 1
                return cursor.fetchall() if cursor.description is not None else []
        except psycopg.Error as exc:
            raise state_error(exc) from exc

    def _check_unfinished(self) -> None:
        if self._finished:
            raise StateError("a statement after the write's last one (its COMMIT was sent)")

    def _in_pipeline(self) -> psycopg.Pipeline:
        """The pipeline, entered if it was not, with the write's ``BEGIN`` sent into it."""
        pipeline = self._pipeline
        if pipeline is None:
            # Held: the context manager's collection would leave pipeline mode.
            self._pipeline_block = self.raw.pipeline()
            pipeline = self._pipeline = self._pipeline_block.__enter__()
        if self._begin is not None:
            self.raw.execute(self._begin, prepare=False)
            self._begin = None
            self._unsynced += 1
        return pipeline

    def _leave_pipeline(self) -> None:
        """Leave pipeline mode, reading every result the pipeline still owes (errors and
        all: they were raised already, or belong to a write being rolled back)."""
        block, self._pipeline_block, self._pipeline = self._pipeline_block, None, None
        self._unsynced = 0
        if block is not None and not self.closed:
            with contextlib.suppress(psycopg.Error):
                block.__exit__(None, None, None)

    def _failed(self, exc: psycopg.Error) -> StateError:
        """The typed error for ``exc``, raised in pipeline mode: psycopg stops reading a
        round trip's results at its first error, and what it leaves would be taken for
        the next round trip's (and its record of prepared statements with them), so the
        pipeline is left first."""
        if self._pipeline is not None:
            self._leave_pipeline()
            self._forget_prepared()
        return state_error(exc)

    def _forget_prepared(self) -> None:
        """After an error in the pipeline: psycopg (3.3) records a statement as prepared as
        it sends the statement's Parse, and does not take that back when an error earlier
        in the round trip made the server skip the Parse; the next execution would name a
        statement the server never made. So the statements recorded since the last round
        trip that succeeded are forgotten (prepared again when next run); the others stay
        prepared. Should psycopg keep its record elsewhere one day, the connection is
        closed instead (the state layer opens a new one: no prepared statement at all)."""
        names = self._prepared_names
        if names is None:  # pragma: no cover - the psycopg of uv.lock has it
            self.raw.close()
            return
        known = self._prepared_known  # by name too: a statement prepared again has a new one
        for key in [key for key, name in names.items() if known.get(key) != name]:
            del names[key]

    def _sync(self, pipeline: psycopg.Pipeline) -> None:
        """Send what the pipeline holds and wait for all of its results: one round trip."""
        self._unsynced = 0
        self.round_trips += 1
        pipeline.sync()
        if self._prepared_names is not None:  # each of them now exists on the server
            self._prepared_known = dict(self._prepared_names)

    def _send(self, sql: str, parameters: Sequence[Any], *, then: str | None = None) -> PgCursor:
        """Execute ``sql``, after the write's statements not sent yet and before ``then``,
        in one round trip; its rows and count."""
        cursor = self.raw.cursor(row_factory=_rows_of(sql))
        try:
            if not self._writing and self._pipeline is None:
                cursor.execute(sql, parameters)
                self.round_trips += 1
                return PgCursor.of(cursor)
            pipeline = self._pipeline if not self._writing else self._in_pipeline()
            assert pipeline is not None
            cursor.execute(sql, parameters)
            if then is not None:
                self.raw.execute(then, prepare=False)
            self._sync(pipeline)
            return PgCursor.of(cursor)
        except psycopg.Error as exc:
            raise self._failed(exc) from exc
        finally:
            cursor.close()
