"""The ``inbound`` table: chat messages taken from a channel whose turn has not run yet.

A channel acknowledges a message to its chat (Slack's 200, a Socket Mode ack) before the
turn runs, and remembers it as seen, so the chat never sends it again: from the moment the
message passed its replay check until its turn wrote it to the transcript, this row is its
only copy. The row goes once the turn ended; rows left by a process killed in between are
run again at the next start, or, in a cluster, by a survivor once their replica is dead.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from channels import InboundMessage
from gateway.state._sql import Database
from gateway.state.connection import Connection
from gateway.state.replicas import LIVE_REPLICAS_SQL


@dataclass(frozen=True, slots=True)
class InboundRecord:
    """One message recorded and not yet handled."""

    inbound_id: str
    message: InboundMessage
    claimed_by: str | None


def _encode(message: InboundMessage) -> str:
    return json.dumps(asdict(message), separators=(",", ":"))


def _decode(inbound_id: str, text: str, claimed_by: str | None) -> InboundRecord:
    fields: dict[str, Any] = json.loads(text)
    return InboundRecord(inbound_id, InboundMessage(**fields), claimed_by)


class InboundTable:
    """Data access for ``inbound``."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def record(self, message: InboundMessage, *, replica_id: str | None = None) -> str:
        """Keep ``message`` until :meth:`handled`; its id. One small insert: group commit
        batches it with the other writes of the moment."""
        inbound_id = uuid.uuid4().hex
        payload = _encode(message)

        def run(conn: Connection) -> None:
            conn.queue(
                "INSERT INTO inbound (inbound_id, message, received_at, claimed_by)"
                " VALUES (?, ?, ?, ?)",
                (inbound_id, payload, time.time(), replica_id),
            )

        await self._db.write(run)
        return inbound_id

    async def handled(self, inbound_id: str) -> None:
        """The message's turn ended: it is in the transcript (or was answered)."""

        def run(conn: Connection) -> None:
            conn.queue("DELETE FROM inbound WHERE inbound_id = ?", (inbound_id,))

        await self._db.write(run)

    async def claim_left(self, replica_id: str | None, cutoff: float | None) -> list[InboundRecord]:
        """Claim the messages left unhandled, oldest first, for ``replica_id``: with no
        ``cutoff`` (one process) every row; else this replica's own (a restart under the same
        id) and those of replicas dead at ``cutoff``."""

        def run(conn: Connection) -> list[InboundRecord]:
            params: tuple[str | None, float] | tuple[()]
            if cutoff is None:
                where, params = "", ()
            else:
                where = (
                    " WHERE claimed_by IS NULL OR claimed_by = ? OR claimed_by NOT IN"
                    f" ({LIVE_REPLICAS_SQL})"
                )
                params = (replica_id, cutoff)
            rows = conn.execute(
                f"SELECT inbound_id, message FROM inbound{where} ORDER BY received_at", params
            ).fetchall()
            for inbound_id, _ in rows:
                conn.execute(
                    "UPDATE inbound SET claimed_by = ? WHERE inbound_id = ?",
                    (replica_id, inbound_id),
                )
            return [_decode(str(i), str(text), replica_id) for i, text in rows]

        return await self._db.write(run)

    async def take_over(self, replica_id: str, cutoff: float) -> list[InboundRecord]:
        """Claim the unhandled messages of replicas dead at ``cutoff`` (not this one's)."""

        def run(conn: Connection) -> list[InboundRecord]:
            rows = conn.execute(
                "SELECT inbound_id, message FROM inbound WHERE claimed_by IS NOT NULL"
                f" AND claimed_by != ? AND claimed_by NOT IN ({LIVE_REPLICAS_SQL})"
                " ORDER BY received_at",
                (replica_id, cutoff),
            ).fetchall()
            for inbound_id, _ in rows:
                conn.execute(
                    "UPDATE inbound SET claimed_by = ? WHERE inbound_id = ?",
                    (replica_id, inbound_id),
                )
            return [_decode(str(i), str(text), replica_id) for i, text in rows]

        return await self._db.write(run)

    async def pending(self) -> list[InboundRecord]:
        """Every message not yet handled, oldest first."""

        def run(conn: Connection) -> list[InboundRecord]:
            rows = conn.execute(
                "SELECT inbound_id, message, claimed_by FROM inbound ORDER BY received_at"
            ).fetchall()
            return [_decode(str(i), str(t), c) for i, t, c in rows]

        return await self._db.read(run)
