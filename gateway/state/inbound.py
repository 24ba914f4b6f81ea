"""The ``inbound`` table: chat messages taken from a channel whose turn has not run yet.

A channel acknowledges a message to its chat (Slack's 200, a Socket Mode ack) before the
turn runs, and remembers it as seen, so the chat never sends it again: from the moment the
message passed its replay check until its turn wrote it to the transcript, this row is its
only copy. The row goes once the turn ended; rows left by a process killed in between are
run again at the next start, or, in a cluster, by a survivor once their replica is dead.
While the turn's reply is streamed the row also keeps the chat message it is shown in
(``streamed``), so the turn run again edits that message instead of posting another.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from channels import InboundMessage, StreamedMessage
from gateway.state._sql import Database
from gateway.state.connection import Connection
from gateway.state.replicas import LIVE_REPLICAS_SQL


@dataclass(frozen=True, slots=True)
class InboundRecord:
    """One message recorded and not yet handled."""

    inbound_id: str
    message: InboundMessage
    claimed_by: str | None
    #: The message its reply was being streamed in when the gateway stopped, if any.
    streamed: StreamedMessage | None = None


def _encode(message: InboundMessage) -> str:
    return json.dumps(asdict(message), separators=(",", ":"))


def _decode(
    inbound_id: str, text: str, claimed_by: str | None, streamed: str | None
) -> InboundRecord:
    fields: dict[str, Any] = json.loads(text)
    return InboundRecord(
        inbound_id, InboundMessage(**fields), claimed_by, _decode_streamed(streamed)
    )


def _decode_streamed(text: str | None) -> StreamedMessage | None:
    """The recorded streamed message; None for none, or one this version cannot read (the
    re-run then posts a new reply: never worse than without the record)."""
    if text is None:
        return None
    try:
        fields = json.loads(text)
        return StreamedMessage(
            chat_id=str(fields["chat"]),
            thread_id=None if fields.get("thread") is None else str(fields["thread"]),
            message_ids=tuple(str(i) for i in fields["ids"]),
        )
    except (ValueError, KeyError, TypeError):
        return None


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

    async def streamed(self, inbound_id: str, shown: StreamedMessage) -> None:
        """The reply to message ``inbound_id`` is being streamed in ``shown`` (written when
        first posted, again when a part is added): what a re-run after a crash edits."""
        payload = json.dumps(
            {"chat": shown.chat_id, "thread": shown.thread_id, "ids": list(shown.message_ids)},
            separators=(",", ":"),
        )

        def run(conn: Connection) -> None:
            conn.execute(
                "UPDATE inbound SET streamed = ? WHERE inbound_id = ?", (payload, inbound_id)
            )

        await self._db.write(run)

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
                f"SELECT inbound_id, message, streamed FROM inbound{where} ORDER BY received_at",
                params,
            ).fetchall()
            for inbound_id, _, _ in rows:
                conn.execute(
                    "UPDATE inbound SET claimed_by = ? WHERE inbound_id = ?",
                    (replica_id, inbound_id),
                )
            return [_decode(str(i), str(text), replica_id, s) for i, text, s in rows]

        return await self._db.write(run)

    async def take_over(self, replica_id: str, cutoff: float) -> list[InboundRecord]:
        """Claim the unhandled messages of replicas dead at ``cutoff`` (not this one's)."""

        def run(conn: Connection) -> list[InboundRecord]:
            rows = conn.execute(
                "SELECT inbound_id, message, streamed FROM inbound WHERE claimed_by IS NOT NULL"
                f" AND claimed_by != ? AND claimed_by NOT IN ({LIVE_REPLICAS_SQL})"
                " ORDER BY received_at",
                (replica_id, cutoff),
            ).fetchall()
            for inbound_id, _, _ in rows:
                conn.execute(
                    "UPDATE inbound SET claimed_by = ? WHERE inbound_id = ?",
                    (replica_id, inbound_id),
                )
            return [_decode(str(i), str(text), replica_id, s) for i, text, s in rows]

        return await self._db.write(run)

    async def pending(self) -> list[InboundRecord]:
        """Every message not yet handled, oldest first."""

        def run(conn: Connection) -> list[InboundRecord]:
            rows = conn.execute(
                "SELECT inbound_id, message, claimed_by, streamed FROM inbound ORDER BY received_at"
            ).fetchall()
            return [_decode(str(i), str(t), c, s) for i, t, c, s in rows]

        return await self._db.read(run)
