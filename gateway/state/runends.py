"""A run's end and its result's way on: the writes that move ``runs.delivery``.

Who gets a finished run's result is decided inside the write that makes the run final
(:meth:`RunEndsTable.finish_run`, asking :func:`gateway.state.lifecycle.destination` about the
row as the transaction reads it), so a ``sessions_yield`` forming a batch, a ``subagents
wait`` holding a run and the run's own end can never both claim it: each reads the run's row
inside its own transaction. Every change of a run's delivery goes through :func:`move`, which
checks it against the transition table and raises on an illegal one.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from gateway.state._sql import (
    ADD_USAGE_SQL,
    Database,
    column_list,
    in_clause,
    insert_sql,
    update_assignments,
    usage_values,
)
from gateway.state.connection import Connection
from gateway.state.errors import RecordConflictError, RecordNotFoundError
from gateway.state.lifecycle import (
    ITEM_STATES,
    announce_item,
    announce_state_for,
    check_transition,
    delivery_for,
    destination,
)
from gateway.state.rows import (
    FINISHED_STATUSES,
    OUTBOX_COLUMNS,
    Delivery,
    OutboxRecord,
    to_column_value,
)
from gateway.state.runrows import RUN_COLUMNS, RunRecord, Spent, run_from_row
from gateway.state.runs import count_live, is_live, returned_run
from gateway.state.sessions import session_usage_sql

_RUN_COLUMNS = column_list(RUN_COLUMNS)
_RUN_SELECT = f"SELECT {_RUN_COLUMNS} FROM runs"
_OUTBOX_INSERT = tuple(c for c in OUTBOX_COLUMNS if c != "id")
_FINAL_MARKS, _FINISHED = in_clause(sorted(FINISHED_STATUSES))
_FINISH_ALLOWED = frozenset(RUN_COLUMNS) - {"run_id"}


def move(
    conn: Connection,
    runs: Sequence[RunRecord],
    new: Delivery,
    *,
    last: bool = False,
    **also: Any,
) -> builtins.list[RunRecord]:
    """Move each of ``runs`` (as this transaction read them) to delivery ``new``, with the
    columns ``also`` set in the same statement; the rows as written. Raises
    :class:`~gateway.state.lifecycle.IllegalTransitionError` before writing anything when
    one of the moves is not in the table. ``last``: the write's last statement (sent with
    its COMMIT on PostgreSQL)."""
    if not runs:
        return []
    for run in runs:
        check_transition(run.run_id, run.delivery.state, new)
    assignments, values = update_assignments(
        "runs", {"delivery": new, **also}, frozenset(RUN_COLUMNS)
    )
    marks, ids = in_clause([run.run_id for run in runs])
    sql = f"UPDATE runs SET {assignments} WHERE run_id IN {marks} RETURNING {_RUN_COLUMNS}"
    rows = (conn.last if last else conn.execute)(sql, [*values, *ids]).fetchall()
    by_id = {r.run_id: r for r in map(run_from_row, rows)}
    return [by_id[run.run_id] for run in runs if run.run_id in by_id]


def select_runs(conn: Connection, where: str, params: Sequence[Any]) -> list[RunRecord]:
    """The runs matching ``where``, in the caller's transaction."""
    return [run_from_row(row) for row in conn.execute(f"{_RUN_SELECT} WHERE {where}", params)]


def insert_item(conn: Connection, item: OutboxRecord) -> None:
    """Queue ``item`` in the outbox inside the caller's transaction."""
    conn.queue(
        insert_sql("outbox", _OUTBOX_INSERT),
        [to_column_value(getattr(item, name)) for name in _OUTBOX_INSERT],
    )


class RunEndsTable:
    """Run finalisation, waits' holds and completions (see the module docstring)."""

    def __init__(
        self, db: Database, *, session_changed: Callable[[str], None] = lambda key: None
    ) -> None:
        self._db = db
        #: Told the key of a session row a write here changed (the sessions cache drops it).
        self._session_changed = session_changed

    async def finish_run(
        self,
        run_id: str,
        changes: dict[str, Any],
        *,
        now: float,
        by: str | None = None,
        archive_due_at: float | None = None,
        spent: Spent | None = None,
        also: Callable[[Connection, RunRecord], None] | None = None,
    ) -> RunRecord:
        """Make a run final: apply ``changes`` (its status, announce text, …) and move its
        delivery as :func:`~gateway.state.lifecycle.destination` says for the row as read
        here; when the result goes to the chat, its announce (``changes["announce_text"]``)
        is queued in the outbox in the same write. The completion is handed on ``by`` this
        replica. With ``archive_due_at``, the run's child session (unless archived) is due
        for archiving then, in the same write. With ``spent`` (the announce turn's), it
        is added to the run's totals and its child session's in the same write too. ``also``
        writes in the same transaction, given the run as written (a scheduled job's count of
        its runs); what it raises rolls everything back."""
        if spent is not None and spent.empty:
            spent = None  # nothing to add
        session_usage = session_usage_sql(self._db.dialect) if spent is not None else ""

        def run(conn: Connection) -> RunRecord:
            current = _run(conn, run_id)
            if (
                current.progress.finished
            ):  # a final run never changes; a second completion is refused
                raise RecordConflictError(
                    "runs", f"run {run_id} is already {current.progress.status}"
                )
            where = destination(current)
            update: dict[str, Any] = {
                "completion_by": by,
                "announce_state": announce_state_for(where, current),
                **changes,
            }
            text = changes.get("announce_text")
            item = announce_item(current, text, now) if where.announces and text else None
            queued_before = current.delivery.announce_state in ITEM_STATES  # never a second item
            if item is not None and "announce_state" not in changes and not queued_before:
                insert_item(conn, item)
            new = delivery_for(where)
            if new != current.delivery.state:
                check_transition(run_id, current.delivery.state, new)
                update["delivery"] = new
            assignments, values = update_assignments("runs", update, _FINISH_ALLOWED)
            if spent is not None:
                assignments = f"{assignments}, {ADD_USAGE_SQL}"
                values = [*values, *usage_values(*spent)]
            sql = f"UPDATE runs SET {assignments} WHERE run_id = ? RETURNING {_RUN_COLUMNS}"
            after = returned_run(conn, sql, [*values, run_id], run_id)
            count_live(
                conn, after.request.parent_session_key, is_live(after.progress.status) - 1
            )  # was live
            if spent is not None:
                marks = (*usage_values(*spent), now, after.child_session_key)
                conn.queue(session_usage, marks)
            if archive_due_at is not None:
                conn.queue(
                    "UPDATE sessions SET archive_due_at = ? WHERE key = ? AND archived_at IS NULL",
                    (archive_due_at, after.child_session_key),
                )
            if also is not None:
                also(conn, after)
            return after

        final = await self._db.write(run)
        if archive_due_at is not None or spent is not None:
            self._session_changed(final.child_session_key)
        return final

    async def hold(self, run_ids: Sequence[str], *, by: str | None = None) -> None:
        """A ``wait`` on replica ``by`` began: its live runs are held for it."""
        marks, ids = in_clause(run_ids)

        def run(conn: Connection) -> None:
            live = select_runs(
                conn,
                f"run_id IN {marks} AND delivery = 'live' AND status NOT IN {_FINAL_MARKS}",
                [*ids, *_FINISHED],
            )
            move(conn, live, Delivery.HELD, held_by=by)

        await self._db.write(run)

    async def consume(self, run_ids: Iterable[str]) -> builtins.list[RunRecord]:
        """Take the results of ``run_ids`` that a wait may have (a ``wait`` returns them):
        pending completions, and final runs it held. They are never written into history
        later, and a held announce is dropped with them."""
        marks, ids = in_clause(run_ids)

        def run(conn: Connection) -> builtins.list[RunRecord]:
            pending = select_runs(conn, f"run_id IN {marks} AND delivery = 'pending'", ids)
            held = select_runs(
                conn,
                f"run_id IN {marks} AND delivery = 'held' AND status IN {_FINAL_MARKS}",
                [*ids, *_FINISHED],
            )
            taken = [
                *move(conn, pending, Delivery.CONSUMED),
                *move(conn, held, Delivery.CONSUMED, announce_state="consumed"),
            ]
            order = {run_id: n for n, run_id in enumerate(ids)}
            return sorted(taken, key=lambda r: order[r.run_id])

        return await self._db.write(run)

    async def release(
        self, run_ids: Iterable[str], *, by: str | None = None
    ) -> builtins.list[RunRecord]:
        """A wait ended: its live runs are free again; the final ones it held and did not
        take are returned, still held, for the caller (replica ``by``, which hands their
        completions on from now) to let go with :meth:`release_final`."""
        marks, ids = in_clause(run_ids)

        def run(conn: Connection) -> builtins.list[RunRecord]:
            held = select_runs(conn, f"run_id IN {marks} AND delivery = 'held'", ids)
            move(conn, [r for r in held if not r.progress.finished], Delivery.LIVE, held_by=None)
            final = [r for r in held if r.progress.finished]
            if final:
                marks2, ids2 = in_clause([r.run_id for r in final])
                conn.execute(
                    f"UPDATE runs SET completion_by = ? WHERE run_id IN {marks2}", [by, *ids2]
                )
            return final

        return await self._db.write(run)

    async def release_final(
        self, run_id: str, announce_state: str, item: OutboxRecord | None
    ) -> RunRecord | None:
        """Let go of a final run a wait held and did not take: its completion is pending
        from now, and its announce (``item``) is queued with it. None when it is no longer
        held (a wait took it meanwhile)."""

        def run(conn: Connection) -> RunRecord | None:
            current = _run(conn, run_id)
            if current.delivery.state != Delivery.HELD or not current.progress.finished:
                return None
            if item is not None:
                insert_item(conn, item)
            (after,) = move(
                conn, [current], Delivery.PENDING, announce_state=announce_state, held_by=None
            )
            return after

        return await self._db.write(run)

    async def mark_delivered(self, run_id: str) -> bool:
        """The completion was written into the requester's history; False if it had been
        taken (consumed) or delivered meanwhile, or a batch or a wait has it instead."""

        def run(conn: Connection) -> bool:
            pending = select_runs(conn, "run_id = ? AND delivery = 'pending'", [run_id])
            return bool(move(conn, pending, Delivery.DELIVERED, last=True))

        return await self._db.write(run)

    async def routed_completions(self, session_key: str) -> builtins.list[RunRecord]:
        """Pending completions whose nearest requester still live is ``session_key``: those of
        the runs it spawned, and of the runs below them whose own requester run is final
        (a result is never dropped because its requester ended). Oldest end first."""
        marks, statuses = in_clause(sorted(FINISHED_STATUSES))
        sql = (
            "WITH RECURSIVE routed(run_id, status) AS ("
            " SELECT run_id, status FROM runs WHERE parent_session_key = ?"
            " UNION SELECT r.run_id, r.status FROM runs r"
            f" JOIN routed p ON r.parent_run_id = p.run_id WHERE p.status IN {marks})"
            f" {_RUN_SELECT} WHERE run_id IN (SELECT run_id FROM routed)"
            " AND delivery = 'pending' ORDER BY ended_at NULLS FIRST, run_id"
        )

        def run(conn: Connection) -> builtins.list[RunRecord]:
            return [run_from_row(row) for row in conn.execute(sql, [session_key, *statuses])]

        return await self._db.read(run)


def _run(conn: Connection, run_id: str) -> RunRecord:
    row = conn.execute(f"{_RUN_SELECT} WHERE run_id = ?", (run_id,)).fetchone()
    if row is None:
        raise RecordNotFoundError("runs", run_id)
    return run_from_row(row)
