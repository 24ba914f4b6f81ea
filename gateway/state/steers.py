"""The ``steers`` table: messages for running runs, kept until their turn wrote them.

A steer is accepted only while its run is ``running`` (checked in the insert's transaction),
at most ``limit`` waiting per run. The run's turn reads them before its next model call, on
whichever process executes it; a row is deleted once its message is in the run's transcript
(:meth:`SteersTable.delete`), so a stop or a crash in between leaves it for the run's resumed
turn, which skips those its transcript already holds. A steer its run never read before it
ended is deleted with :meth:`SteersTable.drop`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from gateway.state._sql import Database
from gateway.state.connection import Connection


@dataclass(frozen=True, slots=True)
class SteerRecord:
    """One steer waiting for its run."""

    steer_id: int
    run_id: str
    message: str
    created_at: float


#: Why :meth:`SteersTable.add` refused: the run is not running, or too many steers wait.
Refusal = Literal["not_running", "full"]


class SteersTable:
    """Data access for ``steers``."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def add(
        self, run_id: str, message: str, *, now: float, limit: int
    ) -> SteerRecord | Refusal:
        """Keep ``message`` for ``run_id`` if it is running and fewer than ``limit`` of its
        steers wait; the record, or why not."""

        def run(conn: Connection) -> SteerRecord | Refusal:
            row = conn.execute("SELECT status FROM runs WHERE run_id = ?", (run_id,)).fetchone()
            if row is None or row[0] != "running":
                return "not_running"
            waiting = conn.execute(
                "SELECT COUNT(*) FROM steers WHERE run_id = ?", (run_id,)
            ).fetchone()
            if int(waiting[0]) >= limit:
                return "full"
            added = conn.execute(
                "INSERT INTO steers (run_id, message, created_at) VALUES (?, ?, ?)"
                " RETURNING steer_id",
                (run_id, message, now),
            ).fetchone()
            return SteerRecord(int(added[0]), run_id, message, now)

        return await self._db.write(run)

    async def waiting(self, run_id: str) -> list[SteerRecord]:
        """The steers of ``run_id`` not yet written into its conversation, oldest first."""

        def run(conn: Connection) -> list[SteerRecord]:
            rows = conn.execute(
                "SELECT steer_id, run_id, message, created_at FROM steers WHERE run_id = ?"
                " ORDER BY steer_id",
                (run_id,),
            ).fetchall()
            return [SteerRecord(int(r[0]), str(r[1]), str(r[2]), float(r[3])) for r in rows]

        return await self._db.read(run)

    async def delete(self, steer_ids: Sequence[int]) -> None:
        """Forget steers written into their run's conversation."""
        if not steer_ids:
            return
        values = list(steer_ids)
        marks = "(" + ", ".join("?" for _ in values) + ")"

        def run(conn: Connection) -> None:
            conn.queue(f"DELETE FROM steers WHERE steer_id IN {marks}", values)

        await self._db.write(run)

    async def drop(self, run_id: str) -> int:
        """Forget the steers of ``run_id`` (it ended without reading them); how many.

        Called once the run is no longer ``running``, so no steer can be added meanwhile:
        a read first spares the usual run, which left none, a write transaction."""

        def count(conn: Connection) -> int:
            row = conn.execute("SELECT COUNT(*) FROM steers WHERE run_id = ?", (run_id,))
            return int(row.fetchone()[0])

        def run(conn: Connection) -> int:
            return int(conn.last("DELETE FROM steers WHERE run_id = ?", (run_id,)).rowcount)

        if not await self._db.read(count):
            return 0
        return await self._db.write(run)
