"""The ``batches`` table: ``sessions_yield`` batches and their follow-ups, each write one
transaction. A run's own end and its result's way on are ``gateway.state.runends``."""

from __future__ import annotations

import builtins
from typing import Any

from gateway.state._sql import (
    Database,
    column_list,
    in_clause,
    insert_sql,
    returned_row,
    update_assignments,
)
from gateway.state.connection import Connection
from gateway.state.errors import RecordNotFoundError
from gateway.state.rows import (
    BATCH_COLUMNS,
    FINISHED_STATUSES,
    OUTBOX_COLUMNS,
    BatchRecord,
    Delivery,
    OutboxRecord,
    batch_from_row,
    to_column_value,
)
from gateway.state.runends import insert_item, move, select_runs
from gateway.state.runrows import RUN_COLUMNS, RunRecord, run_from_row

_COLUMNS = column_list(BATCH_COLUMNS)
_SELECT = f"SELECT {_COLUMNS} FROM batches"
_RUN_COLUMNS = column_list(RUN_COLUMNS)
_RUN_SELECT = f"SELECT {_RUN_COLUMNS} FROM runs"
_UPDATABLE = frozenset(BATCH_COLUMNS) - {"batch_id"}
_OUTBOX_INSERT = tuple(c for c in OUTBOX_COLUMNS if c != "id")
_FINAL_MARKS, _FINISHED = in_clause(sorted(FINISHED_STATUSES))


class BatchesTable:
    """Data access for ``batches``."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def form(self, batch: BatchRecord) -> BatchRecord | None:
        """Record ``batch`` over every live run ``batch.session_key`` spawned that is in no
        batch yet (``batch.run_ids`` is ignored: the runs are chosen in the transaction);
        None when there is none (nothing pending)."""
        select = (
            "SELECT run_id, created_at FROM runs WHERE parent_session_key = ?"
            f" AND status NOT IN {_FINAL_MARKS} AND batch_id IS NULL"
            " ORDER BY created_at, run_id"
        )

        def run(conn: Connection) -> BatchRecord | None:
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

        def run(conn: Connection) -> builtins.list[BatchRecord]:
            rows = conn.execute(f"{_SELECT} WHERE state != 'done' ORDER BY created_at")
            return [batch_from_row(row) for row in rows]

        return await self._db.read(run)

    async def update(self, batch_id: str, /, **changes: Any) -> BatchRecord:
        assignments, values = update_assignments("batches", changes, _UPDATABLE)

        sql = f"UPDATE batches SET {assignments} WHERE batch_id = ? RETURNING {_COLUMNS}"

        def run(conn: Connection) -> BatchRecord:
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

        def run(conn: Connection) -> tuple[BatchRecord, builtins.list[str]] | None:
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

        def run(conn: Connection) -> BatchRecord:
            batch = _get(conn, batch_id)
            if batch.state == "done":
                return batch
            if item is not None:
                insert_item(conn, item)
            marks, ids = in_clause(batch.run_ids)
            batched = select_runs(
                conn,
                f"run_id IN {marks} AND batch_id = ? AND delivery = 'batched'",
                [*ids, batch_id],
            )
            move(conn, batched, Delivery.CONSUMED)
            return _returned(
                conn,
                "UPDATE batches SET state = 'done', reply_text = ?, ended_at = ?"
                f" WHERE batch_id = ? RETURNING {_COLUMNS}",
                [reply_text, ended_at, batch_id],
                batch_id,
            )

        return await self._db.write(run)

    async def mark_stopped(self, session_key: str, now: float) -> int:
        """A ``/stop`` (or ``subagents cancel all``) in ``session_key``: its waiting batches
        were stopped by that answer; returns how many."""

        def run(conn: Connection) -> int:
            cursor = conn.last(
                "UPDATE batches SET stopped_at = ? WHERE session_key = ? AND state = 'waiting'"
                " AND stopped_at IS NULL",
                (now, session_key),
            )
            return int(cursor.rowcount)

        return await self._db.write(run)

    async def open_for_run(self, run_id: str) -> BatchRecord | None:
        """The batch sub-agent run ``run_id`` yielded to and whose follow-up it has not
        finished, if any."""

        def run(conn: Connection) -> BatchRecord | None:
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

        def run(conn: Connection) -> builtins.list[RunRecord]:
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
            batched = select_runs(conn, f"run_id IN {marks} AND delivery = 'batched'", ids)
            return move(conn, batched, Delivery.PENDING)

        return await self._db.write(run)

    async def runs_of(self, batch: BatchRecord) -> builtins.list[RunRecord]:
        """The batch's runs, in spawn order."""
        marks, ids = in_clause(batch.run_ids)

        def run(conn: Connection) -> builtins.list[RunRecord]:
            rows = conn.execute(f"{_RUN_SELECT} WHERE run_id IN {marks}", ids).fetchall()
            by_id = {r.run_id: r for r in map(run_from_row, rows)}
            return [by_id[i] for i in batch.run_ids if i in by_id]

        return await self._db.read(run)


def _find(conn: Connection, batch_id: str) -> BatchRecord | None:
    row = conn.execute(f"{_SELECT} WHERE batch_id = ?", (batch_id,)).fetchone()
    return batch_from_row(row) if row is not None else None


def _get(conn: Connection, batch_id: str) -> BatchRecord:
    batch = _find(conn, batch_id)
    if batch is None:
        raise RecordNotFoundError("batches", batch_id)
    return batch


def _returned(conn: Connection, sql: str, params: builtins.list[Any], batch_id: str) -> BatchRecord:
    """The batch row a write ``… RETURNING`` gave (RecordNotFoundError when none)."""
    return batch_from_row(returned_row(conn, sql, params, "batches", batch_id))
