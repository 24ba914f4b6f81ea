"""The ``outbox`` table: messages (announces) waiting for delivery, at most one per run.

Rows are :class:`gateway.state.rows.OutboxRecord`; the delivery loop and its retry policy
live in the sub-agent layer. ``update`` takes column names as keyword arguments.

Claims: a delivery loop takes due items with :meth:`OutboxTable.claim_due`, which writes its
replica's name into ``claimed_by``; other replicas leave an item claimed by a live replica
alone, and only the claimant moves it to ``sending`` (:meth:`OutboxTable.start_send`). An
item goes back to nobody's when it is retried later, and when its claimant is dead
(:meth:`OutboxTable.reopen_dead`): one left ``sending`` then becomes ``in_doubt``, so its
chat is asked before any second send, as after a restart.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable
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
from gateway.state.replicas import LIVE_REPLICAS_SQL
from gateway.state.rows import OUTBOX_COLUMNS, OutboxRecord, outbox_from_row, to_column_value
from gateway.state.runrows import RUN_COLUMNS

_COLUMNS = column_list(OUTBOX_COLUMNS)
_SELECT = f"SELECT {_COLUMNS} FROM outbox"
_INSERT_COLUMNS = tuple(c for c in OUTBOX_COLUMNS if c != "id")
#: The new row read back in the same statement (on PostgreSQL also no ``lastval()``).
_INSERT_RETURNING = f"{insert_sql('outbox', _INSERT_COLUMNS)} RETURNING {_COLUMNS}"
_UPDATABLE = frozenset(_INSERT_COLUMNS)
_RUN_UPDATABLE = frozenset(RUN_COLUMNS) - {"run_id"}


class OutboxTable:
    """Data access for ``outbox``."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def insert(self, item: OutboxRecord) -> OutboxRecord:
        """Insert ``item`` (its ``id`` is ignored); returns it with the new id. A second
        item for the same ``run_id`` raises :class:`RecordConflictError`."""
        values = [to_column_value(getattr(item, name)) for name in _INSERT_COLUMNS]

        def run(conn: Connection) -> OutboxRecord:
            return _returned(conn, _INSERT_RETURNING, values, "new item")

        return await self._db.write(run)

    async def insert_for_run(self, item: OutboxRecord, run_changes: dict[str, Any]) -> OutboxRecord:
        """Insert ``item`` for ``item.run_id`` and update that run, in one transaction.

        The announce is queued and the run's final status applied together, so a crash never
        leaves a finished run without its announce or an announce for an unfinished run.
        """
        if item.run_id is None:
            raise ValueError("insert_for_run needs an item with a run_id")
        values = [to_column_value(getattr(item, name)) for name in _INSERT_COLUMNS]
        assignments, run_values = update_assignments("runs", run_changes, _RUN_UPDATABLE)
        run_sql = f"UPDATE runs SET {assignments} WHERE run_id = ?"

        def run(conn: Connection) -> OutboxRecord:
            inserted = _returned(conn, _INSERT_RETURNING, values, "new item")
            if conn.execute(run_sql, [*run_values, item.run_id]).rowcount != 1:
                raise RecordNotFoundError("runs", item.run_id)
            return inserted

        return await self._db.write(run)

    async def settle(
        self, item_id: int, changes: dict[str, Any], run_changes: dict[str, Any]
    ) -> OutboxRecord:
        """Update an item and, when it belongs to a run, that run — in one transaction, so a
        crash cannot leave a delivered announce with its run still marked queued."""
        assignments, values = update_assignments("outbox", changes, _UPDATABLE)
        run_assignments, run_values = update_assignments("runs", run_changes, _RUN_UPDATABLE)

        sql = f"UPDATE outbox SET {assignments} WHERE id = ? RETURNING {_COLUMNS}"

        def run(conn: Connection) -> OutboxRecord:
            # The run first (found through the item, unchanged by this write), the item last:
            # on PostgreSQL both go with the COMMIT, one round trip.
            conn.queue(
                f"UPDATE runs SET {run_assignments}"
                " WHERE run_id = (SELECT run_id FROM outbox WHERE id = ?)",
                [*run_values, item_id],
            )
            rows = conn.last(sql, [*values, item_id]).fetchall()
            if len(rows) != 1:  # no such item: the run's update matched nothing either
                raise RecordNotFoundError("outbox", item_id)
            return outbox_from_row(rows[0])

        return await self._db.write(run)

    async def reconcile_runs(self) -> int:
        """Runs still ``announce_state = 'queued'`` whose item has settled: copy its state
        (left by a crash between two separate writes in an older version); returns how many."""

        def run(conn: Connection) -> int:
            return conn.execute(
                "UPDATE runs SET"
                " announce_state = (SELECT o.state FROM outbox o WHERE o.run_id = runs.run_id),"
                " announce_error = (SELECT o.last_error FROM outbox o WHERE o.run_id = runs.run_id)"
                " WHERE announce_state = 'queued' AND EXISTS (SELECT 1 FROM outbox o"
                " WHERE o.run_id = runs.run_id AND o.state IN ('delivered', 'failed'))"
            ).rowcount

        return await self._db.write(run)

    async def reopen_interrupted_sends(self, replica_id: str | None = None) -> int:
        """Items left ``sending`` by a crash: back to ``pending``, due now, marked
        ``in_doubt`` so that the chat is asked before any second send; returns how many.

        With ``replica_id`` (several replicas share the database) only the items that
        replica claimed (or nobody did) are reopened, and its other claims released: a live
        replica's sends are its own. Without it, every item (one process)."""
        mine = "" if replica_id is None else " AND (claimed_by = ? OR claimed_by IS NULL)"
        params = () if replica_id is None else (replica_id,)

        def run(conn: Connection) -> int:
            reopened = conn.execute(
                "UPDATE outbox SET state = 'pending', in_doubt = 1, next_attempt_at = NULL,"
                f" claimed_by = NULL WHERE state = 'sending'{mine}",
                params,
            ).rowcount
            conn.execute(
                f"UPDATE outbox SET claimed_by = NULL WHERE state = 'pending'{mine}", params
            )
            return reopened

        return await self._db.write(run)

    async def reopen_dead(self, cutoff: float) -> int:
        """Take back what replicas dead at ``cutoff`` (no heartbeat since, or stopped)
        claimed: their ``sending`` items become ``pending`` and ``in_doubt`` (asked for in
        their chat before any resend), their other claims are released. Returns how many
        sends were reopened."""

        def run(conn: Connection) -> int:
            dead = f"claimed_by IS NOT NULL AND claimed_by NOT IN ({LIVE_REPLICAS_SQL})"
            reopened = conn.execute(
                "UPDATE outbox SET state = 'pending', in_doubt = 1, next_attempt_at = NULL,"
                f" claimed_by = NULL WHERE state = 'sending' AND {dead}",
                (cutoff,),
            ).rowcount
            conn.execute(
                f"UPDATE outbox SET claimed_by = NULL WHERE state = 'pending' AND {dead}",
                (cutoff,),
            )
            return reopened

        return await self._db.write(run)

    async def claim_due(
        self, now: float, replica_id: str, *, limit: int = 100
    ) -> builtins.list[OutboxRecord]:
        """Claim for ``replica_id`` the pending items due at ``now`` that nobody else
        claimed, oldest first (at most ``limit``), and return them. On PostgreSQL rows
        another replica is claiming at this moment are skipped, not waited for."""

        def run(conn: Connection) -> builtins.list[OutboxRecord]:
            rows = conn.last(
                f"UPDATE outbox SET claimed_by = ? WHERE id IN (SELECT id FROM outbox"
                " WHERE state = 'pending' AND (next_attempt_at IS NULL OR next_attempt_at <= ?)"
                " AND (claimed_by IS NULL OR claimed_by = ?) ORDER BY id LIMIT ?"
                f"{conn.dialect.skip_locked}) RETURNING {column_list(OUTBOX_COLUMNS)}",
                (replica_id, now, replica_id, limit),
            ).fetchall()
            return sorted((outbox_from_row(row) for row in rows), key=lambda item: item.id or 0)

        return await self._db.write(run)

    async def start_send(
        self, item_id: int, replica_id: str, **changes: Any
    ) -> OutboxRecord | None:
        """Mark a claimed item ``sending`` (with ``changes``) before its send; None when
        ``replica_id`` no longer holds the claim (taken over as dead meanwhile): then it
        must not send."""
        assignments, values = update_assignments("outbox", changes, _UPDATABLE)
        sql = (
            f"UPDATE outbox SET state = 'sending', {assignments}"
            f" WHERE id = ? AND state = 'pending' AND claimed_by = ? RETURNING {_COLUMNS}"
        )

        def run(conn: Connection) -> OutboxRecord | None:
            rows = conn.last(sql, [*values, item_id, replica_id]).fetchall()
            return outbox_from_row(rows[0]) if rows else None

        return await self._db.write(run)

    async def release_claims(self, replica_id: str) -> int:
        """Give up ``replica_id``'s claims on items it has not begun to send (a stop)."""

        def run(conn: Connection) -> int:
            return conn.last(
                "UPDATE outbox SET claimed_by = NULL WHERE state = 'pending' AND claimed_by = ?",
                (replica_id,),
            ).rowcount

        return await self._db.write(run)

    async def next_due_at(self, replica_id: str | None = None) -> float | None:
        """When the earliest pending item is next due (None: nothing pending); with
        ``replica_id``, among the items nobody else has claimed."""
        mine = "" if replica_id is None else " AND (claimed_by IS NULL OR claimed_by = ?)"
        params = () if replica_id is None else (replica_id,)

        def run(conn: Connection) -> float | None:
            row = conn.execute(
                "SELECT MIN(COALESCE(next_attempt_at, 0)) FROM outbox"
                f" WHERE state = 'pending'{mine}",
                params,
            ).fetchone()
            return None if row is None or row[0] is None else float(row[0])

        return await self._db.read(run)

    async def get(self, item_id: int) -> OutboxRecord | None:
        """The item with ``item_id``, or None."""
        return await self._db.read(lambda conn: _find(conn, "id", item_id))

    async def get_by_run(self, run_id: str) -> OutboxRecord | None:
        """The item for ``run_id``, or None."""
        return await self._db.read(lambda conn: _find(conn, "run_id", run_id))

    async def update(self, item_id: int, /, **changes: Any) -> OutboxRecord:
        """Set columns of one item; return the updated row (or raise RecordNotFoundError)."""
        assignments, values = update_assignments("outbox", changes, _UPDATABLE)
        sql = f"UPDATE outbox SET {assignments} WHERE id = ? RETURNING {_COLUMNS}"

        def run(conn: Connection) -> OutboxRecord:
            return _returned(conn, sql, [*values, item_id], item_id)

        return await self._db.write(run)

    async def due(self, now: float, *, limit: int = 100) -> builtins.list[OutboxRecord]:
        """Pending items whose next attempt is due (or unset), oldest first."""
        sql = (
            f"{_SELECT} WHERE state = 'pending'"
            " AND (next_attempt_at IS NULL OR next_attempt_at <= ?) ORDER BY id LIMIT ?"
        )

        def run(conn: Connection) -> builtins.list[OutboxRecord]:
            return [outbox_from_row(row) for row in conn.execute(sql, (now, limit))]

        return await self._db.read(run)

    async def list(
        self, *, states: Iterable[str] | None = None, limit: int | None = None
    ) -> builtins.list[OutboxRecord]:
        """Items in the given states (all when None), oldest first."""
        params: builtins.list[Any] = []
        sql = _SELECT
        if states is not None:
            clause, items = in_clause(states)
            sql += f" WHERE state IN {clause}"
            params.extend(items)
        sql += " ORDER BY id"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(max(0, limit))

        def run(conn: Connection) -> builtins.list[OutboxRecord]:
            return [outbox_from_row(row) for row in conn.execute(sql, params)]

        return await self._db.read(run)


def _find(conn: Connection, column: str, value: object) -> OutboxRecord | None:
    row = conn.execute(f"{_SELECT} WHERE {column} = ?", (value,)).fetchone()
    return outbox_from_row(row) if row is not None else None


def _returned(conn: Connection, sql: str, params: builtins.list[Any], key: object) -> OutboxRecord:
    """The one row a write ``… RETURNING`` gave (RecordNotFoundError when none)."""
    return outbox_from_row(returned_row(conn, sql, params, "outbox", key))
