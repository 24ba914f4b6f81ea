"""Group commit on PostgreSQL: the writes that queue up while one transaction runs share
the next, and their messages too.

:class:`PgGroups` is :class:`~gateway.state._group.WriteGroups`' runner on PostgreSQL. A
write on its own runs as it always did: one serializable transaction, its ``BEGIN`` sent
with its first statement and its ``COMMIT`` with its last. Writes that queued up behind it
share one transaction, each in a savepoint of its own, and their statements share messages:
a write's queued statements and ``RELEASE`` travel with the next write's ``SAVEPOINT`` and
first statement, the last write's with the ``COMMIT``. A spawn (two round trips alone) costs
one round trip in a group, and a group commits once. Each write keeps its own outcome:

- A write that raises with the transaction intact (a child limit, a row not found) is undone
  alone: what it queued is dropped, a ``ROLLBACK TO`` its savepoint queued in its place.
- A statement the server refuses (a duplicate key, a full disk) fails the transaction, and
  its message may hold the previous write's queued statements as well as the current
  write's first: a ``ROLLBACK TO SAVEPOINT`` of the current write's savepoint tells them
  apart (there is no such savepoint when the failure came before it). The write whose
  statement failed gets the error and is undone alone; a write whose statements never ran
  is run again.
- A serialization failure or a deadlock condemns the whole transaction (PostgreSQL cannot
  say which write met the other replica), as do a prepared statement the server refused
  and a transaction that ended by itself: the group is rolled back and every write of it
  is run again alone, each to its own outcome (a conflict alone goes back to the caller's
  retry with backoff). Nothing a condemned group decided is kept, errors included: a
  write that failed because of another write of the group may not fail alone.
- A lost connection or a server shutting down fails every write of the group with that
  error, as it fails a write alone (nothing of the group was kept; the callers' own
  handling decides what is next). So does a full disk refusing the ``COMMIT`` itself; one
  refusing a statement fails that statement's write alone, as a duplicate key does (an
  update that needs no new space still goes through, and a write that would have gone
  through alone is not refused for sharing a transaction with one that did not).

Nothing is settled before its commit, as on SQLite.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, TypeVar

from gateway.state._group import Outcome, Write
from gateway.state.errors import (
    StateClosedError,
    StateUnavailableError,
    WriteConflictError,
)
from gateway.state.postgres.connection import PgConnection
from gateway.state.postgres.prepared import PreparedStatementError, plainly

T = TypeVar("T")

#: Writes per transaction at most on PostgreSQL: a group is condemned whole by one
#: conflict with another replica, so it is kept smaller than SQLite's.
PG_MAX_GROUP: Final = 32
BEGIN: Final = "BEGIN ISOLATION LEVEL SERIALIZABLE"


class _CondemnedError(Exception):
    """The group's transaction cannot be kept: run each write again alone."""


class _GroupFailedError(Exception):
    """The group's transaction was lost with the connection, or its ``COMMIT`` refused:
    every write of it fails with :attr:`error`."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


class PgGroups:
    """PostgreSQL's :class:`~gateway.state._group.GroupRunner`, on the writer connection
    ``connection()`` gives (opened again if it was lost)."""

    def __init__(self, connection: Callable[[], PgConnection]) -> None:
        self._connection = connection
        self.commits = 0
        self.writes = 0
        self.rerun = 0

    def __call__(self, todo: list[Write], outcomes: list[Outcome]) -> list[Write]:
        if len(todo) > 1:
            try:
                outcomes.extend(self._together(todo))
                return []
            except _GroupFailedError as failed:
                outcomes.extend((write, None, failed.error) for write in todo)
                return []
            except _CondemnedError:
                self.rerun += len(todo)
        for write in todo:
            outcomes.append(self._alone(write))
        return []

    # -- internals --------------------------------------------------------------------------

    def _in_transaction(self, fn: Callable[[PgConnection], T]) -> T:
        """Run ``fn`` in a transaction of its own: committed when it returns, rolled back
        when it raises."""
        conn = self._connection()
        # Sent with fn's first statement, in one message (a round trip less per write).
        conn.begin_with_next(BEGIN)
        try:
            result = fn(conn)
            conn.end("COMMIT")
        except BaseException:
            if not conn.closed:
                conn.end("ROLLBACK")
            raise
        return result

    def _alone(self, write: Write) -> Outcome:
        try:
            result = plainly(lambda: self._in_transaction(write.fn))
        except BaseException as exc:
            return (write, None, exc)
        self.commits += 1
        self.writes += 1
        return (write, result, None)

    def _together(self, todo: list[Write]) -> list[Outcome]:
        """Run ``todo`` in one transaction (see the module docstring); their outcomes once
        it committed. Raises :class:`_CondemnedError` or :class:`_GroupFailedError` (after
        the rollback)."""
        conn = self._connection()
        conn.begin_with_next(BEGIN, grouped=True)
        try:
            outcomes = self._run(conn, todo)
            self._commit(conn, outcomes)
        except BaseException as exc:
            if not conn.closed:
                conn.end("ROLLBACK")
            if isinstance(exc, _CondemnedError | _GroupFailedError):
                raise
            raise _GroupFailedError(exc) from exc
        kept = sum(1 for _, _, error in outcomes if error is None)
        self.commits += 1 if kept else 0
        self.writes += kept
        return outcomes

    def _run(self, conn: PgConnection, todo: list[Write]) -> list[Outcome]:
        outcomes: list[Outcome] = []
        #: The last write that succeeded (its queued statements may still be unsent: they
        #: go with the next write's first); its savepoint is ``w<index>``.
        previous: int | None = None
        index = 0
        while index < len(todo):
            write, name = todo[index], f"w{index}"
            conn.savepoint(name)
            try:
                result = write.fn(conn)
            except Exception as exc:
                _condemning(conn, exc)
                if conn.transaction == "open":  # the write raised itself: undo it alone
                    conn.undo_write(name)
                    outcomes.append((write, None, exc))
                    index += 1
                    continue
                # A statement failed the transaction: this write's, or the previous one's
                # queued before it (then this write's statements never ran).
                if conn.rollback_to(name):
                    outcomes.append((write, None, exc))
                    index += 1
                    continue
                if previous is None or not conn.rollback_to(f"w{previous}"):
                    raise _CondemnedError from exc
                _refuse(outcomes, previous, exc)
                previous = None
                continue  # this write again, from its savepoint
            conn.release(name)
            outcomes.append((write, result, None))
            previous = index
            index += 1
        return outcomes

    def _commit(self, conn: PgConnection, outcomes: list[Outcome]) -> None:
        """Commit; a statement of the last write, sent with the ``COMMIT``, that failed the
        transaction fails that write alone."""
        last = next((i for i in range(len(outcomes) - 1, -1, -1) if outcomes[i][2] is None), -1)
        while True:
            try:
                conn.end("COMMIT")
                return
            except Exception as exc:
                _condemning(conn, exc)
                if last < 0 or conn.transaction != "failed":
                    raise  # the COMMIT itself failed: nothing was kept
                # One outcome per write, in the group's order: its index names its savepoint.
                if not conn.rollback_to(f"w{last}"):
                    raise _CondemnedError from exc
                _refuse(outcomes, last, exc)
                last = -1


def _refuse(outcomes: list[Outcome], position: int, error: BaseException) -> None:
    write = outcomes[position][0]
    outcomes[position] = (write, None, error)


def _condemning(conn: PgConnection, exc: BaseException) -> None:
    """Raise what ``exc`` makes of the whole group, if anything (see the module
    docstring)."""
    if isinstance(exc, WriteConflictError | PreparedStatementError):
        raise _CondemnedError from exc
    if isinstance(exc, StateUnavailableError | StateClosedError) or conn.closed:
        raise _GroupFailedError(exc) from exc
    if conn.transaction == "gone":
        raise _CondemnedError from exc
