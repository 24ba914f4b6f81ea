"""The gateway with the real Discord channel against the fake Discord: a thread's spawn is
announced in that thread, and DMs get their own session."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from channels.discord import DiscordChannel, DiscordConfig
from tests.channels.discord.conftest import (
    ALICE,
    BOT_MENTION,
    DM_CHANNEL,
    GENERAL,
    GUILD,
    THREAD,
    add_test_guild,
)
from tests.fakes.discord import BOT_ID, WAIT_GUARD, FakeDiscord, user_payload
from tests.gateway.harness import Harness, running_gateway


@asynccontextmanager
async def discord_gateway(tmp_path: Path) -> AsyncIterator[tuple[Harness, FakeDiscord]]:
    async with FakeDiscord() as fake, running_gateway(tmp_path) as gw:
        add_test_guild(fake)
        config = DiscordConfig(
            enabled=True,
            token=SecretStr(fake.token),
            api_base_url=fake.api_base_url,
            gateway_url=fake.gateway_url,
        )
        channel = DiscordChannel(config, start_timeout=WAIT_GUARD, guild_ready_timeout=0.01)
        gw.channels["discord"] = channel
        await channel.start(gw.router.handle_inbound)
        try:
            yield gw, fake
        finally:
            await channel.stop()


async def posts(fake: FakeDiscord, channel_id: str, count: int) -> list[dict[str, Any]]:
    await fake.wait_until(lambda: len(fake.posted.get(channel_id, [])) >= count)
    return fake.posted[channel_id]


def mine(fake: FakeDiscord, channel_id: str) -> list[dict[str, Any]]:
    """The bot's messages in the chat, as they stand now."""
    return [m for m in fake.messages.get(channel_id, []) if m["author"]["id"] == BOT_ID]


async def shown(fake: FakeDiscord, channel_id: str, index: int, done: Callable[[str], bool]) -> str:
    """The content of the chat's ``index``-th message once ``done`` accepts it (a streamed
    reply is posted at its first words and edited to the whole reply)."""

    def ready() -> bool:
        held = mine(fake, channel_id)
        return len(held) > index and done(str(held[index]["content"]))

    await fake.wait_until(ready)
    return str(mine(fake, channel_id)[index]["content"])


def mention() -> list[dict[str, Any]]:
    return [user_payload(BOT_ID, "herald", bot=True)]


async def test_a_spawn_in_a_thread_is_announced_in_that_thread(tmp_path: Path) -> None:
    async with discord_gateway(tmp_path) as (gw, fake):
        gate = asyncio.Event()
        blocker = gw.lanes.subagent.submit(gate.wait)
        await fake.post_message(
            channel_id=THREAD,
            guild_id=GUILD,
            author=ALICE,
            content=f"{BOT_MENTION} bg task: threads",
            mentions=mention(),
        )
        accepted = await shown(fake, THREAD, 0, lambda text: text.startswith("accepted "))
        run_id = accepted.split()[-1]
        # The conversation moves to the parent channel meanwhile.
        await fake.post_message(
            channel_id=GENERAL,
            guild_id=GUILD,
            author=ALICE,
            content=f"{BOT_MENTION} hello",
            mentions=mention(),
        )
        assert await shown(fake, GENERAL, 0, lambda text: text == "hi there")
        (hello,) = await posts(fake, GENERAL, 1)  # one message: posted, then edited
        assert hello["allowed_mentions"]["parse"] == []
        gate.set()
        await blocker
        await gw.finished(run_id)
        assert (await gw.delivery(run_id)).state == "delivered"
        announce = (await posts(fake, THREAD, 2))[1]
        assert announce["content"].startswith("ANNOUNCE: done: threads")
        assert len(fake.posted[GENERAL]) == 1


async def test_dms_have_their_own_session_and_commands(tmp_path: Path) -> None:
    async with discord_gateway(tmp_path) as (gw, fake):
        await fake.post_message(channel_id=DM_CHANNEL, author=ALICE, content="/spawn task: dm")
        (started,) = await posts(fake, DM_CHANNEL, 1)
        assert started["content"].startswith("Started sub-agent run ")
        (run,) = await gw.db.runs.list()
        assert run.request.parent_session_key == f"agent:main:discord:dm:{ALICE['id']}"
        await gw.finished(run.run_id)
        announce = (await posts(fake, DM_CHANNEL, 2))[1]
        assert announce["content"].startswith("ANNOUNCE: done: dm")
