"""Running again the chat messages a dead gateway took but never turned.

Each message that makes a turn has a row in ``inbound`` from before its channel's ack until
its turn ended (:class:`gateway.runtime.Router`). Rows left behind belong to a process killed
in between: at start the gateway runs their turns as if the messages had just come, and in a
cluster a survivor does the same for a dead replica's rows after each heartbeat. A message
the transcript already holds (written, the kill came before its row was cleared) is not
written again: its turn is finished from the transcript instead (or nothing, when its
reply is there), so each message gets one turn.
"""

from __future__ import annotations

import logging

from gateway.runtime.router import Router
from gateway.runtime.turns import INBOUND_META
from gateway.sessions import SessionError, SessionStore
from gateway.state import InboundRecord, InboundTable

logger = logging.getLogger(__name__)


class InboundReplay:
    """Runs the turns of recorded, unhandled messages: :meth:`recover`, :meth:`take_over`."""

    def __init__(
        self,
        *,
        journal: InboundTable,
        router: Router,
        store: SessionStore,
        replica_id: str | None,
    ) -> None:
        self._journal = journal
        self._router = router
        self._store = store
        self._replica_id = replica_id

    def __repr__(self) -> str:
        return f"<InboundReplay replica={self._replica_id}>"

    async def recover(self, cutoff: float | None) -> int:
        """At start: run the messages left unhandled (in a cluster, this replica's own and
        those of replicas dead at ``cutoff``); how many."""
        records = await self._journal.claim_left(self._replica_id, cutoff)
        await self._run(records)
        return len(records)

    async def take_over(self, cutoff: float) -> int:
        """In a cluster: run the messages of replicas dead at ``cutoff``; how many."""
        assert self._replica_id is not None
        records = await self._journal.take_over(self._replica_id, cutoff)
        await self._run(records)
        return len(records)

    async def _run(self, records: list[InboundRecord]) -> None:
        if records:
            logger.warning(
                "running again chat messages a stopped gateway left unanswered",
                extra={"messages": len(records)},
            )
        for record in records:
            written = await self._in_transcript(record)
            await self._router.route(
                record.message, record.inbound_id, resume=written, streamed=record.streamed
            )

    async def _in_transcript(self, record: InboundRecord) -> bool:
        """Whether the message's turn wrote it to its session's transcript already."""
        try:
            key = self._router.session_key(record.message)
        except SessionError:
            return False
        if await self._store.get(str(key)) is None:
            return False
        contents = await self._store.read(str(key))
        return any(
            isinstance(meta := entry.get("meta"), dict)
            and meta.get(INBOUND_META) == record.inbound_id
            for entry in contents.records
        )
