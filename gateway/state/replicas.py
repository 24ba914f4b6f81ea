"""The ``replicas`` table: each gateway process on a shared database and its heartbeat.

A replica writes its row when it starts and moves ``heartbeat_at`` every few seconds while it
runs; a clean stop sets ``stopped_at``. A replica whose heartbeat is older than the cut-off
its peers use (or that stopped) is dead to them: the outbox items and archives it claimed
are taken over. Times are epoch seconds from each replica's own clock, so the cut-off must
leave room for clock skew between hosts (NTP keeps it well under a second).
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass

from gateway.state._sql import Database
from gateway.state.connection import Connection

#: The ``IN (…)`` of replicas alive at a cut-off (one parameter: the cut-off). Claims by a
#: replica outside it (dead, stopped, or never registered) may be taken over.
LIVE_REPLICAS_SQL = "SELECT replica_id FROM replicas WHERE stopped_at IS NULL AND heartbeat_at >= ?"


@dataclass(frozen=True, slots=True)
class ReplicaRecord:
    """One replica's row."""

    replica_id: str
    host: str
    pid: int
    started_at: float
    heartbeat_at: float
    stopped_at: float | None = None

    def alive(self, cutoff: float) -> bool:
        """Whether it beat at or after ``cutoff`` and has not stopped."""
        return self.stopped_at is None and self.heartbeat_at >= cutoff


class ReplicasTable:
    """Data access for ``replicas``."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def register(self, replica_id: str, *, host: str, pid: int, now: float) -> None:
        """This replica starts: its row, new or again (a restart under the same id)."""

        def run(conn: Connection) -> None:
            conn.queue(
                "INSERT INTO replicas (replica_id, host, pid, started_at, heartbeat_at)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT (replica_id) DO UPDATE SET"
                " host = excluded.host, pid = excluded.pid, started_at = excluded.started_at,"
                " heartbeat_at = excluded.heartbeat_at, stopped_at = NULL",
                (replica_id, host, pid, now, now),
            )

        await self._db.write(run)

    async def beat(self, replica_id: str, now: float) -> bool:
        """Move the heartbeat to ``now``; False when the row is gone or marked stopped
        (then the replica registers again)."""

        def run(conn: Connection) -> bool:
            cursor = conn.last(
                "UPDATE replicas SET heartbeat_at = ? WHERE replica_id = ? AND stopped_at IS NULL",
                (now, replica_id),
            )
            return cursor.rowcount == 1

        return await self._db.write(run)

    async def stop(self, replica_id: str, now: float) -> None:
        """A clean stop: peers take over what it claimed at once, without waiting."""

        def run(conn: Connection) -> None:
            conn.queue("UPDATE replicas SET stopped_at = ? WHERE replica_id = ?", (now, replica_id))

        await self._db.write(run)

    async def list(self) -> builtins.list[ReplicaRecord]:
        """Every replica ever registered, most recent heartbeat first."""

        def run(conn: Connection) -> builtins.list[ReplicaRecord]:
            rows = conn.execute(
                "SELECT replica_id, host, pid, started_at, heartbeat_at, stopped_at"
                " FROM replicas ORDER BY heartbeat_at DESC, replica_id"
            )
            return [ReplicaRecord(*tuple(row)) for row in rows]

        return await self._db.read(run)
