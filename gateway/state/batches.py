"""The ``batches`` table and the run-side writes of orchestration, each one transaction.

Who gets a finished run's result is decided inside the write that makes the run final
(:meth:`BatchesTable.finish_run`), so a ``sessions_yield`` forming a batch, a
``subagents wait`` holding a run and the run's own end can never both claim it: SQLite runs
one write at a time, and each reads the run's row inside its own transaction.
"""

from __future__ import annotations

import builtins
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from gateway.state._sql import (
    Database,
    column_list,
    in_clause,
    insert_sql,
    integrity_error,
    returned_row,
    update_assignments,
)
from gateway.state.errors import RecordConflictError, RecordNotFoundError
from gateway.state.rows import (
    BATCH_COLUMNS,
    FINISHED_STATUSES,
    OUTBOX_COLUMNS,
    RUN_COLUMNS,
    BatchRecord,
    OutboxRecord,
    RunRecord,
    batch_from_row,
    run_from_row,
    to_column_value,
)
from gateway.state.runs import count_live, is_live, returned_run

_COLUMNS = column_list(BATCH_COLUMNS)
_SELECT = f"SELECT {_COLUMNS} FROM batches"
_RUN_COLUMNS = column_list(RUN_COLUMNS)
_RUN_SELECT = f"SELECT {_RUN_COLUMNS} FROM runs"
_UPDATABLE = frozenset(BATCH_COLUMNS) - {"batch_id"}
_OUTBOX_INSERT = tuple(c for c in OUTBOX_COLUMNS if c != "id")
_FINAL_MARKS, _FINISHED = in_clause(sorted(FINISHED_STATUSES))


class BatchesTable:
    """Data access for ``batches`` and the orchestration writes on ``runs``."""

    def __init__(
        self, db: Database, *, session_changed: Callable[[str], None] = lambda key: None
    ) -> None:
        self._db = db
        #: Told the key of a session row a write here changed (the sessions cache drops it).
        self._session_changed = session_changed

    async def form(self, batch: BatchRecord) -> BatchRecord | None:
        """Record ``batch`` over every live run ``batch.session_key`` spawned that is in no
        batch yet (``batch.run_ids`` is ignored: the runs are chosen in the transaction);
        None when there is none (nothing pending)."""
        select = (
            "SELECT run_id, created_at FROM runs WHERE parent_session_key = ?"
            f" AND status NOT IN {_FINAL_MARKS} AND batch_id IS NULL"
            " ORDER BY created_at, run_id"
        )

        def run(conn: sqlite3.Connection) -> BatchRecord | None:
            rows = conn.execute(select, [batch.session_key, *_FINISHED]).fetchall()
            if not rows:
                return None
            run_ids = tuple(str(row[0]) for row in rows)
            values = {
                **{name: getattr(batch, name) for name in BATCH_COLUMNS},
                "run_ids": run_ids,
                "first_spawn_at": min(float(row[1]) for row in rows),
            }
            (row,) = conn.execute(
                f"{insert_sql('batches', BATCH_COLUMNS)} RETURNING {_COLUMNS}",
                [to_column_value(values[name]) for name in BATCH_COLUMNS],
            ).fetchall()
            marks, ids = in_clause(run_ids)
            conn.execute(
                f"UPDATE runs SET batch_id = ? WHERE run_id IN {marks}", [batch.batch_id, *ids]
            )
            return batch_from_row(row)

        return await self._db.write(run)

    async def get(self, batch_id: str) -> BatchRecord | None:
        return await self._db.read(lambda conn: _find(conn, batch_id))

    async def open_batches(self) -> builtins.list[BatchRecord]:
        """Batches whose follow-up has not been posted, oldest first."""

        def run(conn: sqlite3.Connection) -> builtins.list[BatchRecord]:
            rows = conn.execute(f"{_SELECT} WHERE state != 'done' ORDER BY created_at")
            return [batch_from_row(row) for row in rows]

        return await self._db.read(run)

    async def update(self, batch_id: str, /, **changes: Any) -> BatchRecord:
        assignments, values = update_assignments("batches", changes, _UPDATABLE)

        sql = f"UPDATE batches SET {assignments} WHERE batch_id = ? RETURNING {_COLUMNS}"

        def run(conn: sqlite3.Connection) -> BatchRecord:
            return _returned(conn, sql, [*values, batch_id], batch_id)

        return await self._db.write(run)

    async def claim(
        self, batch_id: str, now: float, *, timed_out: bool, by: str | None = None
    ) -> tuple[BatchRecord, builtins.list[str]] | None:
        """Start the batch's follow-up if it is ``waiting`` and every run of it is final — or,
        ``timed_out``, whatever its runs' state (the live ones leave the batch): the batch
        becomes ``following``, claimed ``by`` the replica that runs the follow-up, and is
        returned with the runs that left it. None when it is not due, or another caller
        claimed it first. One transaction: the check and the claim cannot be split by a run
        ending or a second caller."""

        def run(conn: sqlite3.Connection) -> tuple[BatchRecord, builtins.list[str]] | None:
            batch = _find(conn, batch_id)
            if batch is None or batch.state != "waiting":
                return None
            marks, ids = in_clause(batch.run_ids)
            live = [
                str(row[0])
                for row in conn.execute(
                    f"SELECT run_id FROM runs WHERE run_id IN {marks} AND batch_id = ?"
                    f" AND status NOT IN {_FINAL_MARKS}",
                    [*ids, batch_id, *_FINISHED],
                )
            ]
            if live and not timed_out:
                return None
            if live:
                live_marks, live_ids = in_clause(live)
                conn.execute(
                    f"UPDATE runs SET batch_id = NULL WHERE run_id IN {live_marks}", live_ids
                )
            claimed = _returned(
                conn,
                "UPDATE batches SET state = 'following', followup_started_at = ?,"
                f" claimed_by = ? WHERE batch_id = ? RETURNING {_COLUMNS}",
                [now, by, batch_id],
                batch_id,
            )
            return claimed, live

        return await self._db.write(run)

    async def finish(
        self, batch_id: str, reply_text: str, ended_at: float, item: OutboxRecord | None
    ) -> BatchRecord:
        """The follow-up is done: queue its reply (``item``, when it has a chat), consume the
        batch's completions and close the batch — one transaction, so the follow-up is posted
        exactly once whatever stops the gateway."""

        def run(conn: sqlite3.Connection) -> BatchRecord:
            batch = _get(conn, batch_id)
            if batch.state == "done":
                return batch
            if item is not None:
                _insert_item(conn, item)
            marks, ids = in_clause(batch.run_ids)
            conn.execute(
                f"UPDATE runs SET completion = 'consumed' WHERE run_id IN {marks}"
                f" AND status IN {_FINAL_MARKS}",
                [*ids, *_FINISHED],
            )
            return _returned(
                conn,
                "UPDATE batches SET state = 'done', reply_text = ?, ended_at = ?"
                f" WHERE batch_id = ? RETURNING {_COLUMNS}",
                [reply_text, ended_at, batch_id],
                batch_id,
            )

        return await self._db.write(run)

    async def finish_run(
        self,
        run_id: str,
        changes: dict[str, Any],
        item: OutboxRecord | None,
        *,
        by: str | None = None,
        archive_due_at: float | None = None,
    ) -> RunRecord:
        """Make a run final: apply ``changes`` (its status and announce text), mark its
        completion pending (handed on ``by`` this replica), and queue ``item`` — unless the
        run belongs to a batch (its announce is ``consumed``: the batch's follow-up speaks
        for it) or a ``wait`` holds it (``held``: the waiter takes it, or releases it with
        :meth:`release`). With ``archive_due_at``, the run's child session (unless
        archived) is due for archiving then, in the same write."""
        allowed = frozenset(RUN_COLUMNS) - {"run_id"}

        def run(conn: sqlite3.Connection) -> RunRecord:
            current = _run(conn, run_id)
            if current.finished:  # a final run never changes; a second completion is refused
                raise RecordConflictError("runs", f"run {run_id} is already {current.status}")
            update = {**changes, "completion": "pending", "completion_by": by}
            if current.batch_id is not None:
                update["announce_state"] = "consumed"
            elif current.held:
                update["announce_state"] = "held"
            elif item is not None:
                update["announce_state"] = "queued"
                _insert_item(conn, item)
            assignments, values = update_assignments("runs", update, allowed)
            sql = f"UPDATE runs SET {assignments} WHERE run_id = ? RETURNING {_RUN_COLUMNS}"
            after = returned_run(conn, sql, [*values, run_id], run_id)
            count_live(conn, after.parent_session_key, is_live(after.status) - 1)  # was live
            if archive_due_at is not None:
                conn.execute(
                    "UPDATE sessions SET archive_due_at = ? WHERE key = ? AND archived_at IS NULL",
                    (archive_due_at, after.child_session_key),
                )
            return after

        final = await self._db.write(run)
        if archive_due_at is not None:
            self._session_changed(final.child_session_key)
        return final

    async def hold(self, run_ids: Sequence[str], *, by: str | None = None) -> None:
        """Mark live runs as waited for (a ``wait`` began on replica ``by``)."""
        marks, ids = in_clause(run_ids)

        def run(conn: sqlite3.Connection) -> None:
            conn.execute(
                f"UPDATE runs SET held = 1, held_by = ? WHERE run_id IN {marks}"
                f" AND status NOT IN {_FINAL_MARKS}",
                [by, *ids, *_FINISHED],
            )

        await self._db.write(run)

    async def consume(self, run_ids: Iterable[str]) -> builtins.list[RunRecord]:
        """Take the pending completions of ``run_ids`` (a ``wait`` returns them): they are
        never written into history later, and a held announce is dropped with them."""
        marks, ids = in_clause(run_ids)

        def run(conn: sqlite3.Connection) -> builtins.list[RunRecord]:
            rows = conn.execute(
                f"{_RUN_SELECT} WHERE run_id IN {marks} AND completion = 'pending'"
                " AND batch_id IS NULL",
                ids,
            ).fetchall()
            taken = [str(row["run_id"]) for row in rows]
            if not taken:
                return []
            marks2, ids2 = in_clause(taken)
            updated = conn.execute(
                "UPDATE runs SET completion = 'consumed', held = 0, announce_state ="
                " CASE WHEN announce_state = 'held' THEN 'consumed' ELSE announce_state END"
                f" WHERE run_id IN {marks2} RETURNING {_RUN_COLUMNS}",
                ids2,
            ).fetchall()
            by_id = {r.run_id: r for r in map(run_from_row, updated)}
            return [by_id[run_id] for run_id in taken]

        return await self._db.write(run)

    async def release(
        self, run_ids: Iterable[str], *, by: str | None = None
    ) -> builtins.list[RunRecord]:
        """A wait ended: clear ``held``; runs whose announce it held and did not take are
        returned (their announce is queued now by the caller, replica ``by``, which hands
        their completions on too)."""
        marks, ids = in_clause(run_ids)

        def run(conn: sqlite3.Connection) -> builtins.list[RunRecord]:
            rows = conn.execute(
                f"{_RUN_SELECT} WHERE run_id IN {marks} AND announce_state = 'held'", ids
            ).fetchall()
            conn.execute(
                "UPDATE runs SET held = 0, completion_by = CASE WHEN completion = 'pending'"
                f" THEN ? ELSE completion_by END WHERE run_id IN {marks}",
                [by, *ids],
            )
            return [run_from_row(row) for row in rows]

        return await self._db.write(run)

    async def queue_held(self, run_id: str, item: OutboxRecord) -> None:
        """Queue the announce a wait held and released."""

        def run(conn: sqlite3.Connection) -> None:
            current = _run(conn, run_id)
            if current.announce_state != "held":
                return
            _insert_item(conn, item)
            conn.execute(
                "UPDATE runs SET announce_state = 'queued', held = 0 WHERE run_id = ?", (run_id,)
            )

        await self._db.write(run)

    async def mark_delivered(self, run_id: str) -> bool:
        """The completion was written into the requester's history; False if it had been
        taken (consumed), delivered meanwhile, or belongs to a batch or a wait instead."""

        def run(conn: sqlite3.Connection) -> bool:
            sql = (
                "UPDATE runs SET completion = 'delivered' WHERE run_id = ?"
                " AND completion = 'pending' AND batch_id IS NULL AND held = 0"
            )
            return conn.execute(sql, (run_id,)).rowcount == 1

        return await self._db.write(run)

    async def routed_completions(self, session_key: str) -> builtins.list[RunRecord]:
        """Pending completions whose nearest requester still live is ``session_key``: those of
        the runs it spawned, and of the runs below them whose own requester run is final
        (a result is never dropped because its requester ended). Outside any batch and any
        wait; oldest end first."""
        marks, statuses = in_clause(sorted(FINISHED_STATUSES))
        sql = (
            "WITH RECURSIVE routed(run_id, status) AS ("
            " SELECT run_id, status FROM runs WHERE parent_session_key = ?"
            " UNION SELECT r.run_id, r.status FROM runs r"
            f" JOIN routed p ON r.parent_run_id = p.run_id WHERE p.status IN {marks})"
            f" {_RUN_SELECT} WHERE run_id IN (SELECT run_id FROM routed)"
            " AND completion = 'pending' AND batch_id IS NULL AND held = 0"
            " ORDER BY ended_at, run_id"
        )

        def run(conn: sqlite3.Connection) -> builtins.list[RunRecord]:
            return [run_from_row(row) for row in conn.execute(sql, [session_key, *statuses])]

        return await self._db.read(run)

    async def open_for_run(self, run_id: str) -> BatchRecord | None:
        """The batch sub-agent run ``run_id`` yielded to and whose follow-up it has not
        finished, if any."""

        def run(conn: sqlite3.Connection) -> BatchRecord | None:
            row = conn.execute(
                f"{_SELECT} WHERE run_id = ? AND state != 'done' ORDER BY created_at DESC",
                (run_id,),
            ).fetchone()
            return batch_from_row(row) if row is not None else None

        return await self._db.read(run)

    async def dissolve(self, batch_id: str, ended_at: float) -> builtins.list[RunRecord]:
        """Close a batch whose yielding run ended before its follow-up: its runs leave it,
        so their results go up the chain as completions of their own. Returns the runs
        that are final (their completions are due now); the others complete later."""

        def run(conn: sqlite3.Connection) -> builtins.list[RunRecord]:
            batch = _get(conn, batch_id)
            if batch.state == "done":
                return []
            marks, ids = in_clause(batch.run_ids)
            conn.execute(
                f"UPDATE runs SET batch_id = NULL WHERE run_id IN {marks} AND batch_id = ?",
                [*ids, batch_id],
            )
            conn.execute(
                "UPDATE batches SET state = 'done', ended_at = ? WHERE batch_id = ?",
                (ended_at, batch_id),
            )
            rows = conn.execute(
                f"{_RUN_SELECT} WHERE run_id IN {marks} AND status IN {_FINAL_MARKS}"
                " AND completion = 'pending'",
                [*ids, *_FINISHED],
            ).fetchall()
            return [run_from_row(row) for row in rows]

        return await self._db.write(run)

    async def runs_of(self, batch: BatchRecord) -> builtins.list[RunRecord]:
        """The batch's runs, in spawn order."""
        marks, ids = in_clause(batch.run_ids)

        def run(conn: sqlite3.Connection) -> builtins.list[RunRecord]:
            rows = conn.execute(f"{_RUN_SELECT} WHERE run_id IN {marks}", ids).fetchall()
            by_id = {r.run_id: r for r in map(run_from_row, rows)}
            return [by_id[i] for i in batch.run_ids if i in by_id]

        return await self._db.read(run)


def _insert_item(conn: sqlite3.Connection, item: OutboxRecord) -> None:
    """Queue ``item`` in the outbox inside the caller's transaction."""
    try:
        conn.execute(
            insert_sql("outbox", _OUTBOX_INSERT),
            [to_column_value(getattr(item, name)) for name in _OUTBOX_INSERT],
        )
    except sqlite3.IntegrityError as exc:
        raise integrity_error("outbox", exc) from exc


def _find(conn: sqlite3.Connection, batch_id: str) -> BatchRecord | None:
    row = conn.execute(f"{_SELECT} WHERE batch_id = ?", (batch_id,)).fetchone()
    return batch_from_row(row) if row is not None else None


def _get(conn: sqlite3.Connection, batch_id: str) -> BatchRecord:
    batch = _find(conn, batch_id)
    if batch is None:
        raise RecordNotFoundError("batches", batch_id)
    return batch


def _returned(
    conn: sqlite3.Connection, sql: str, params: builtins.list[Any], batch_id: str
) -> BatchRecord:
    """The batch row a write ``… RETURNING`` gave (RecordNotFoundError when none)."""
    return batch_from_row(returned_row(conn, sql, params, "batches", batch_id))


def _run(conn: sqlite3.Connection, run_id: str) -> RunRecord:
    row = conn.execute(f"{_RUN_SELECT} WHERE run_id = ?", (run_id,)).fetchone()
    if row is None:
        raise RecordNotFoundError("runs", run_id)
    return run_from_row(row)
