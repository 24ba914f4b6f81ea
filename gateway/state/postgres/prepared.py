"""The tables' statements prepared on a PostgreSQL connection: parsed and planned once.

PostgreSQL spends more of its CPU parsing and planning the state's short statements than
running them (an ``UPDATE`` of a run by its key: ~260 µs sent as text, ~140 µs as an
``EXECUTE`` of the same statement prepared). Statements still travel as simple queries, so
a transaction's ``BEGIN``, queued statements and ``COMMIT`` keep sharing a message with
them (:class:`~gateway.state.postgres.connection.PgConnection`): a text the connection has run
:data:`PREPARE_AFTER` times is sent the next time as ``PREPARE hN AS …; EXECUTE hN(…)``
and as ``EXECUTE hN(…)`` from then on, its parameters bound on the client as before.

PostgreSQL decides a prepared statement's parameter types from their context (``run_id = $1``
is text); a text whose types it cannot tell (``$1 IS NULL``) is refused at ``PREPARE`` and
stays plain. What makes this safe to do behind the tables' back:

- A name is recorded only once the message that prepared it succeeded (``PREPARE`` is not
  transactional: one a failed message ran may survive it, under a name never used again).
- A message with a prepared statement that fails with an error the plain text might not
  have raised — a parameter PostgreSQL typed otherwise, a plan a migration changed the
  result of, a statement the server lost — marks every text of the message plain on this
  connection and raises :class:`PreparedStatementError`; the state database runs the
  operation again (a write's transaction is rolled back first), plainly.
- Texts built per call (``IN`` lists of every length) are prepared at most
  :data:`PREPARED_MAX` times per connection; past that, the rest run plain.

Prepared statements live and die with their connection: a new connection starts empty.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final, TypeVar

from gateway.state.errors import StateError

log = logging.getLogger(__name__)

T = TypeVar("T")

#: A text is prepared when it runs for this time on a connection (once is not a pattern).
PREPARE_AFTER: Final = 2
#: Prepared statements per connection at most.
PREPARED_MAX: Final = 512
#: Texts whose runs are counted at most (the count starts over when full).
SIGHTINGS_MAX: Final = 4096
#: SQLSTATE classes and codes a prepared statement can raise where its text would not:
#: 42 (a parameter typed otherwise, …), 22 (a value its inferred type refuses), 26000 (no
#: such prepared statement), 0A000 (a cached plan whose result a migration changed).
PLAIN_AGAIN_CLASSES: Final = ("42", "22")
PLAIN_AGAIN_CODES: Final = frozenset({"26000", "0A000"})
#: Times an operation is run again because a prepared statement refused it (each time with
#: fewer texts prepared).
PLAIN_AGAIN_TIMES: Final = 8


class PreparedStatementError(StateError):
    """A message with prepared statements failed where their plain texts might not: run the
    operation again (its texts now run plain on this connection)."""


def plain_again(sqlstate: str | None) -> bool:
    """Whether an error with ``sqlstate`` of a message with prepared statements is worth
    running again plainly."""
    code = sqlstate or ""
    return code[:2] in PLAIN_AGAIN_CLASSES or code in PLAIN_AGAIN_CODES


def plainly(operation: Callable[[], T]) -> T:
    """Run ``operation``; again while a prepared statement fails it where the plain text
    might not (:class:`PreparedStatementError`): each time, its texts run plain."""
    for _ in range(PLAIN_AGAIN_TIMES):
        try:
            return operation()
        except PreparedStatementError as exc:
            log.debug("state database: prepared statement refused (%s); plainly now", exc)
    return operation()


def numbered(sql: str) -> str:
    """``sql`` with its ``?`` marks numbered ``$1``, ``$2``… (the state's SQL never has a
    ``?`` inside a quoted literal)."""
    parts = sql.split("?")
    out = [parts[0]]
    for n, part in enumerate(parts[1:], start=1):
        out.append(f"${n}{part}")
    return "".join(out)


class PreparedStatements:
    """One connection's prepared statements and the message being built.

    :meth:`pieces` says what to send for a table's text; :meth:`sent` and :meth:`failed`
    close each message (see the module docstring)."""

    def __init__(self) -> None:
        #: Table text → its statement's name and parameter count.
        self._names: dict[str, tuple[str, int]] = {}
        self._seen: dict[str, int] = {}
        self._refused: set[str] = set()
        self._counter = 0
        #: Prepared by the message being built, recorded once it succeeds.
        self._preparing: dict[str, tuple[str, int]] = {}
        #: Texts of the message being built that run prepared (now or from this message).
        self._involved: list[str] = []

    def __len__(self) -> int:
        return len(self._names)

    def pieces(self, sql: str, count: int) -> tuple[str | None, str | None]:
        """For a table's ``sql`` with ``count`` parameters: a ``PREPARE`` to send before it
        (or None) and the ``EXECUTE`` to send for it with ``%s`` marks (None: send ``sql``
        itself)."""
        name = self._names.get(sql) or self._preparing.get(sql)
        if name is not None:
            if name[1] != count:
                return None, None  # not the statement it was prepared as: plain
            self._involved.append(sql)
            return None, _execute(name[0], count)
        if sql in self._refused or len(self._names) + len(self._preparing) >= PREPARED_MAX:
            return None, None
        seen = self._seen.get(sql, 0) + 1
        if seen < PREPARE_AFTER:
            if len(self._seen) >= SIGHTINGS_MAX:
                self._seen.clear()
            self._seen[sql] = seen
            return None, None
        self._seen.pop(sql, None)
        self._counter += 1
        statement = f"h{self._counter}"
        self._preparing[sql] = (statement, count)
        self._involved.append(sql)
        return f"PREPARE {statement} AS {numbered(sql)}", _execute(statement, count)

    def sent(self) -> None:
        """The message went through: what it prepared is prepared."""
        self._names.update(self._preparing)
        self._preparing.clear()
        self._involved.clear()

    def dropped(self) -> None:
        """The message being built was never sent (a write rolled back before it)."""
        self._preparing.clear()
        self._involved.clear()

    def failed(self, sqlstate: str | None) -> bool:
        """The message failed with ``sqlstate``. True when its prepared texts are now plain
        and the operation should run again (:class:`PreparedStatementError`)."""
        involved, self._involved = self._involved, []
        preparing, self._preparing = list(self._preparing), {}
        if not involved or not plain_again(sqlstate):
            return False
        # The texts it began to prepare are the likelier cause (a type PostgreSQL could not
        # tell): only they go plain, unless there were none.
        for sql in preparing or involved:
            self._names.pop(sql, None)
            self._refused.add(sql)
        return True


def _execute(name: str, count: int) -> str:
    marks = ", ".join(["%s"] * count)
    return f"EXECUTE {name}({marks})" if count else f"EXECUTE {name}"
