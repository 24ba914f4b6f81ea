"""Fixtures: a fake Discord on loopback and running Discord channels pointed at it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

import pytest
from pydantic import SecretStr

from channels.base import InboundMessage
from channels.cursors import ChatCursors
from channels.discord import DiscordChannel, DiscordConfig
from channels.replay import SeenKeys
from tests.fakes.discord import (
    BOT_ID,
    WAIT_GUARD,
    FakeDiscord,
    text_channel_payload,
    thread_payload,
    user_payload,
)

GUILD = "1300000000000000001"
GENERAL = "1300000000000000002"
THREAD = "1300000000000000003"
UNCACHED_CHANNEL = "1300000000000000004"
BOT_ROLE = "1300000000000000005"
DM_CHANNEL = "1300000000000000010"
ALICE = user_payload("1400000000000000001", "alice")
OTHER_BOT = user_payload("1400000000000000002", "otherbot", bot=True)
BOT_MENTION = f"<@{BOT_ID}>"


@dataclass
class Running:
    """A started channel and the inbound messages its handler received, in order."""

    channel: DiscordChannel
    inbound: asyncio.Queue[InboundMessage] = field(default_factory=asyncio.Queue)

    async def next(self) -> InboundMessage:
        """The next inbound message (a guard timeout, not a timing assertion)."""
        async with asyncio.timeout(WAIT_GUARD):
            return await self.inbound.get()


MakeChannel = Callable[..., Awaitable[Running]]


async def eventually(check: Callable[[], bool]) -> None:
    """Wait until ``check()`` holds, for state the fake cannot see (the channel's own).

    Polls: the channel offers no event for its state, and tests should not add one.
    """
    async with asyncio.timeout(WAIT_GUARD):
        while not check():  # noqa: ASYNC110
            await asyncio.sleep(0.005)


def add_test_guild(fake: FakeDiscord) -> None:
    """A guild with #general and a thread in it, plus the bot's managed role."""
    fake.add_guild(
        GUILD,
        "test guild",
        [text_channel_payload(GENERAL, GUILD, "general")],
        [thread_payload(THREAD, GUILD, GENERAL, "a thread")],
    )
    fake.guilds[-1]["roles"] = [
        {
            "id": BOT_ROLE,
            "name": "herald",
            "permissions": "0",
            "position": 1,
            "color": 0,
            "hoist": False,
            "managed": True,
            "mentionable": True,
            "tags": {"bot_id": BOT_ID},
        }
    ]


@pytest.fixture
async def fake_discord() -> AsyncIterator[FakeDiscord]:
    async with FakeDiscord() as fake:
        add_test_guild(fake)
        yield fake


@pytest.fixture
async def make_channel(fake_discord: FakeDiscord) -> AsyncIterator[MakeChannel]:
    """Factory: a ``DiscordChannel`` on the fake, started unless ``start=False``; all stopped."""
    made: list[DiscordChannel] = []

    async def make(
        *,
        token: str | None = None,
        require_mention: bool = True,
        api_base_url: str | None = None,
        gateway_url: str | None = None,
        start: bool = True,
        start_timeout: float = WAIT_GUARD,
        seen: SeenKeys | None = None,
        cursors: ChatCursors | None = None,
        streaming: Literal["edit", "off"] = "edit",
    ) -> Running:
        config = DiscordConfig(
            streaming=streaming,
            enabled=True,
            token=SecretStr(token if token is not None else fake_discord.token),
            require_mention=require_mention,
            api_base_url=api_base_url or fake_discord.api_base_url,
            gateway_url=gateway_url or fake_discord.gateway_url,
        )
        # A short guild burst wait: the fake sends every GUILD_CREATE right after READY.
        channel = DiscordChannel(
            config,
            start_timeout=start_timeout,
            guild_ready_timeout=0.01,
            seen=seen,
            cursors=cursors,
        )
        made.append(channel)
        running = Running(channel)
        if start:
            await channel.start(running.inbound.put)
        return running

    yield make
    for channel in made:
        await channel.stop()
