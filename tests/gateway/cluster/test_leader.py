"""Discord in a cluster: one replica at a time holds the gateway connection (a lock in
PostgreSQL), every replica sends, and a replica whose lock is lost gives the connection up
to another. Two real apps on one database and one state directory, the fake Discord."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import pytest

from channels import OutboundMessage
from tests.channels.discord.conftest import GENERAL, add_test_guild
from tests.fakes.discord import FakeDiscord
from tests.gateway.cluster.replicas import Replica, backends, replica, terminate, until
from tests.gateway.delivery._support import queued_announce

pytestmark = pytest.mark.postgres

ROLE = "leader:discord"


@asynccontextmanager
async def two_replicas(
    tmp_path: Path, pg_url: str, fake: FakeDiscord
) -> AsyncIterator[tuple[Replica, Replica]]:
    discord = {
        "enabled": True,
        "token": fake.token,
        "apiBaseUrl": fake.api_base_url,
        "gatewayUrl": fake.gateway_url,
    }
    async with AsyncExitStack() as stack:
        pair = [
            await stack.enter_async_context(
                replica(tmp_path, name, database_url=pg_url, channels={"discord": discord})
            )
            for name in ("a", "b")
        ]
        yield pair[0], pair[1]


def holder_and_standby(pair: tuple[Replica, Replica]) -> tuple[Replica, Replica] | None:
    states = [r.channel("discord").connection_state for r in pair]
    if states == ["connected", "standby"]:
        return pair
    if states == ["standby", "connected"]:
        return pair[1], pair[0]
    return None


async def test_one_replica_holds_the_gateway_the_other_sends_and_takes_over(
    tmp_path: Path, pg_url: str
) -> None:
    async with FakeDiscord() as fake, two_replicas(tmp_path, pg_url, fake) as pair:
        add_test_guild(fake)
        holder, standby = await until(lambda: holder_and_standby(pair))
        # The standby is in the running for the lock, on its own connection, yet never got it.
        await until(lambda: backends(standby.replica_id, ROLE) == 1 or None)
        assert len(fake.identifies) == 1
        assert fake.open_connections == 1

        # The standby's outbox delivers over REST, once.
        item, run_id = await queued_announce(
            standby.db, channel="discord", chat_id=GENERAL, text="from the standby"
        )
        standby.outbox.kick()
        delivered = await standby.delivered(run_id)
        assert delivered.state == "delivered"
        assert [p["content"] for p in fake.posted[GENERAL]] == ["from the standby"]
        # Its exactly-once lookup works without the gateway too: it finds that message.
        message = OutboundMessage(
            channel="discord",
            account="default",
            chat_id=GENERAL,
            thread_id=None,
            text="from the standby",
            kind="announce",
            run_id=run_id,
            outbox_id=item.id,
        )
        found = await standby.channel("discord").find_delivered(message, time.time() - 60)
        assert (found.outcome, found.message_ids) == ("found", delivered.message_ids)

        # The holder's lock connection dies: it drops Discord, the standby connects.
        assert terminate(holder.replica_id, ROLE) == 1
        await fake.wait_until(lambda: len(fake.identifies) == 2 and fake.open_connections == 1)
        assert await until(lambda: holder_and_standby(pair)) == (standby, holder)
        assert len(fake.identifies) == 2
