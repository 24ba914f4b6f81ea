"""Who takes up the orchestration work a stop or a crash left in flight.

Three kinds of work outlive the turn or run that began them, each recorded with the replica
that owns it (migration 9):

- a ``subagents wait``'s hold on runs (``runs.held_by``): released when the wait returns;
- a final run's completion being handed on to its requester (``runs.completion_by``):
  ``pending`` until written into the requester's conversation;
- a batch's follow-up (``batches.claimed_by``): ``following`` until its reply is queued.

Each ``take_*`` claims such work for the replica ``by`` in one write (``UPDATE …
RETURNING``), so two replicas never both take the same piece: at start-up its own (from its
previous life, and what was recorded before owners were: no owner), after a heartbeat what
replicas dead at ``cutoff`` owned, and in one process (``alone``) everything.
"""

from __future__ import annotations

import builtins
from typing import Any

from gateway.state._sql import Database, column_list
from gateway.state.connection import Connection
from gateway.state.replicas import LIVE_REPLICAS_SQL
from gateway.state.rows import BATCH_COLUMNS, BatchRecord, batch_from_row
from gateway.state.runrows import RUN_COLUMNS, RunRecord, run_from_row

#: What a ``wait`` holds: live runs, and final ones whose result it may take.
_HELD = "delivery = 'held'"
#: Completions on their way to a conversation (no batch and no wait takes them instead).
_PENDING = "delivery = 'pending'"


def _owners(
    column: str, by: str, *, cutoff: float | None, alone: bool
) -> tuple[str, builtins.list[Any]]:
    """The ``AND …`` choosing whose work ``by`` takes, and its parameters."""
    if alone:
        return "", []
    if cutoff is not None:
        return f" AND {column} IS NOT NULL AND {column} NOT IN ({LIVE_REPLICAS_SQL})", [cutoff]
    return f" AND ({column} = ? OR {column} IS NULL)", [by]


class ClaimsTable:
    """Taking up holds, completions and follow-ups (see the module docstring)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def _any(self, table: str, where: str, params: builtins.list[Any]) -> bool:
        """Whether some row matches: a takeover runs after every heartbeat and almost always
        finds nothing, so it looks with a read before it takes the writer."""

        def run(conn: Connection) -> bool:
            sql = f"SELECT 1 FROM {table} WHERE {where} LIMIT 1"
            return conn.execute(sql, params).fetchone() is not None

        return await self._db.read(run)

    async def take_holds(
        self, by: str, *, cutoff: float | None = None, alone: bool = False
    ) -> builtins.list[str]:
        """The runs whose holds ``by`` now owns (to release them: nothing of theirs waits)."""
        which, params = _owners("held_by", by, cutoff=cutoff, alone=alone)
        if cutoff is not None and not await self._any("runs", f"{_HELD}{which}", params):
            return []

        def run(conn: Connection) -> builtins.list[str]:
            rows = conn.execute(
                f"UPDATE runs SET held_by = ? WHERE {_HELD}{which} RETURNING run_id",
                [by, *params],
            ).fetchall()
            return sorted(str(row[0]) for row in rows)

        return await self._db.write(run)

    async def take_completions(
        self, by: str, *, cutoff: float | None = None, alone: bool = False
    ) -> builtins.list[RunRecord]:
        """The final runs whose pending completions ``by`` now hands on, oldest end first."""
        which, params = _owners("completion_by", by, cutoff=cutoff, alone=alone)
        if cutoff is not None and not await self._any("runs", f"{_PENDING}{which}", params):
            return []

        def run(conn: Connection) -> builtins.list[RunRecord]:
            rows = conn.execute(
                f"UPDATE runs SET completion_by = ? WHERE {_PENDING}{which}"
                f" RETURNING {column_list(RUN_COLUMNS)}",
                [by, *params],
            ).fetchall()
            runs = [run_from_row(row) for row in rows]
            return sorted(runs, key=lambda r: (r.progress.ended_at or 0.0, r.run_id))

        return await self._db.write(run)

    async def own_completion(self, run_id: str, by: str) -> bool:
        """``by`` hands ``run_id``'s pending completion on from now (a forward, a release);
        False when it is no longer pending there."""

        def run(conn: Connection) -> bool:
            cursor = conn.last(
                f"UPDATE runs SET completion_by = ? WHERE run_id = ? AND {_PENDING}",
                (by, run_id),
            )
            return cursor.rowcount == 1

        return await self._db.write(run)

    async def take_followups(
        self, by: str, *, cutoff: float | None = None, alone: bool = False
    ) -> builtins.list[BatchRecord]:
        """The ``following`` batches whose follow-up ``by`` now runs, oldest first."""
        which, params = _owners("claimed_by", by, cutoff=cutoff, alone=alone)
        following = f"state = 'following'{which}"
        if cutoff is not None and not await self._any("batches", following, params):
            return []

        def run(conn: Connection) -> builtins.list[BatchRecord]:
            rows = conn.execute(
                f"UPDATE batches SET claimed_by = ? WHERE {following}"
                f" RETURNING {column_list(BATCH_COLUMNS)}",
                [by, *params],
            ).fetchall()
            batches = [batch_from_row(row) for row in rows]
            return sorted(batches, key=lambda b: (b.created_at, b.batch_id))

        return await self._db.write(run)
