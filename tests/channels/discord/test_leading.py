"""The Discord channel in a cluster: logged in (sending over REST) from the start, it holds
the gateway connection only while it holds the leadership, and drops it when the lease is
lost. The leadership here is a lock in memory the test can take away; the gateway's is in
PostgreSQL (tests/gateway/cluster/test_leader.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from pydantic import SecretStr

from channels import Lease, OutboundMessage
from channels.discord import DiscordChannel, DiscordConfig
from tests.channels.discord.conftest import ALICE, BOT_MENTION, GENERAL, GUILD, eventually
from tests.fakes.discord import BOT_ID, WAIT_GUARD, FakeDiscord, user_payload


class _Lease:
    def __init__(self, lost: asyncio.Event) -> None:
        self._lost = lost

    async def lost(self) -> None:
        await self._lost.wait()


class Baton:
    """A :class:`channels.Leadership` in memory: one holder at a time (first come, first
    served), and :meth:`revoke` ends the current lease."""

    def __init__(self) -> None:
        self._lock = asyncio.Lock()
        self._lost = asyncio.Event()
        self.names: list[str] = []

    @asynccontextmanager
    async def hold(self, name: str) -> AsyncIterator[Lease]:
        async with self._lock:
            self.names.append(name)
            self._lost = asyncio.Event()
            yield _Lease(self._lost)

    def revoke(self) -> None:
        self._lost.set()


def clustered(fake: FakeDiscord, baton: Baton) -> DiscordChannel:
    config = DiscordConfig(
        enabled=True,
        token=SecretStr(fake.token),
        api_base_url=fake.api_base_url,
        gateway_url=fake.gateway_url,
    )
    return DiscordChannel(
        config, start_timeout=WAIT_GUARD, guild_ready_timeout=0.01, leadership=baton
    )


async def test_a_standby_sends_then_connects_when_it_leads_and_drops_the_gateway_when_it_loses(
    fake_discord: FakeDiscord,
) -> None:
    baton = Baton()
    inbound: asyncio.Queue[object] = asyncio.Queue()
    elsewhere = baton.hold("discord")  # another replica leads
    await elsewhere.__aenter__()
    channel = clustered(fake_discord, baton)
    try:
        await channel.start(inbound.put)
        assert channel.connection_state == "standby"
        assert not channel.connected
        sent = await channel.send(
            OutboundMessage("discord", "default", GENERAL, None, "sent from the standby")
        )
        assert len(sent.message_ids) == 1
        assert [p["content"] for p in fake_discord.posted[GENERAL]] == ["sent from the standby"]
        assert (fake_discord.connections, fake_discord.identifies) == (0, [])

        await elsewhere.__aexit__(None, None, None)  # the other replica died
        await eventually(lambda: channel.connection_state == "connected")
        assert len(fake_discord.identifies) == 1
        await fake_discord.post_message(
            channel_id=GENERAL,
            guild_id=GUILD,
            author=ALICE,
            content=f"{BOT_MENTION} hi",
            mentions=[user_payload(BOT_ID, "herald", bot=True)],
        )
        async with asyncio.timeout(WAIT_GUARD):
            assert (await inbound.get()) is not None

        # The lease is lost; another replica is first in line for the lock.
        again = baton.hold("discord")
        taken = asyncio.create_task(again.__aenter__())
        await asyncio.sleep(0)  # it queues for the lock before the lease ends
        baton.revoke()
        await taken
        await fake_discord.wait_until(lambda: fake_discord.open_connections == 0)
        await eventually(lambda: channel.connection_state == "standby")
        assert baton.names == ["discord", "discord", "discord"]
        await again.__aexit__(None, None, None)
        await fake_discord.wait_until(lambda: len(fake_discord.identifies) == 2)
        await eventually(lambda: channel.connection_state == "connected")
    finally:
        await channel.stop()
    assert fake_discord.open_connections == 0


async def test_without_a_leadership_the_channel_connects_at_start(
    fake_discord: FakeDiscord,
) -> None:
    config = DiscordConfig(
        enabled=True,
        token=SecretStr(fake_discord.token),
        api_base_url=fake_discord.api_base_url,
        gateway_url=fake_discord.gateway_url,
    )
    channel = DiscordChannel(config, start_timeout=WAIT_GUARD, guild_ready_timeout=0.01)
    try:
        await channel.start(asyncio.Queue[object]().put)
        assert channel.connection_state == "connected"
        assert len(fake_discord.identifies) == 1
    finally:
        await channel.stop()
