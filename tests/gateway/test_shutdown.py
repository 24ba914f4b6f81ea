"""A clean stop delivers before it disconnects: a run that ends during the drain has its
announce sent while the chat is still connected, and nothing is left pending."""

from __future__ import annotations

import asyncio
from pathlib import Path

from channels import ChannelSendError, OutboundMessage, SentMessage
from channels.memory import MemoryChannel
from gateway.state import Origin, SqliteStateDB
from gateway.subagents import SpawnRequest
from tests.gateway.harness import HANG_GUARD_SECONDS, TEST_SCRIPT, running_gateway


class RealisticChannel(MemoryChannel):
    """Refuses to send once stopped, as Slack's and Discord's clients do."""

    async def send(self, message: OutboundMessage) -> SentMessage:
        if not self.connected:
            raise ChannelSendError(f"{self.name} is not started", retryable=True)
        return await super().send(message)


async def test_a_run_ending_during_the_drain_is_announced_before_the_chat_closes(
    tmp_path: Path,
) -> None:
    script = {
        **TEST_SCRIPT,
        "rules": [
            {"match": r"^task-brief: (.+)$", "reply": "brief $1", "delaySeconds": 0.5},
            *TEST_SCRIPT["rules"],
        ],
    }
    chat = RealisticChannel("chat")
    config = {"gateway": {"shutdownDrainSeconds": 10}}
    async with running_gateway(
        tmp_path, config=config, script=script, channels={"chat": chat}
    ) as gw:
        origin = Origin("chat", "default", "room", None, "channel")
        session = await gw.store.ensure("agent:main:chat:channel:room", origin=origin)
        ctx = gw.contexts.for_session(session)
        run_id = (await gw.spawn(ctx, SpawnRequest(task="task-brief: x")))["runId"]
        async with asyncio.timeout(HANG_GUARD_SECONDS):
            await chat.wait_update(run_id, "running")
    # The gateway has stopped (drained, then closed): the announce went out before that.
    announces = [m for m in chat.sent if m.kind == "announce"]
    assert len(announces) == 1
    assert announces[0].text.startswith("ANNOUNCE: brief x")
    db = await SqliteStateDB.open(tmp_path / "state" / "herald.db", readonly=True)
    try:
        run = await db.runs.get(run_id)
        item = await db.outbox.get_by_run(run_id)
    finally:
        await db.close()
    assert run is not None
    assert run.progress.status == "done"
    assert item is not None
    assert item.state == "delivered"
