"""Helpers of the outbox's tests: a queued announce in a real state database, and a
listener that waits for items to settle."""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.state import OutboxRecord, StateDB
from tests.gateway.state.records import child_session, run_record

#: Guard against a hung test; never an assertion about speed.
HANG_GUARD_SECONDS = 10


async def queued_announce(
    db: StateDB,
    *,
    channel: str = "memory",
    chat_id: str = "c1",
    text: str = "the announce",
    **fields: Any,
) -> tuple[OutboxRecord, str]:
    """A finished run whose announce is queued, as the announce step leaves it; the item
    and the run's id."""
    child = await child_session(db, None)
    run = await db.runs.insert(run_record(child, status="announcing", outcome="done"))
    item = OutboxRecord(
        channel=channel,
        account="default",
        chat_id=chat_id,
        text=text,
        created_at=1.0,
        run_id=run.run_id,
        **fields,
    )
    stored = await db.outbox.insert_for_run(
        item, {"status": "done", "announce_state": "queued", "announce_text": text}
    )
    return stored, run.run_id


class Settled:
    """An outbox listener: the items delivered or failed for good, in order."""

    def __init__(self) -> None:
        self.items: list[OutboxRecord] = []
        self._changed = asyncio.Event()

    def __call__(self, item: OutboxRecord) -> None:
        self.items.append(item)
        self._changed.set()

    async def wait(self, count: int = 1) -> list[OutboxRecord]:
        async with asyncio.timeout(HANG_GUARD_SECONDS):
            while len(self.items) < count:
                self._changed.clear()
                await self._changed.wait()
        return self.items
