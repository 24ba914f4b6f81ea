"""The outbox on several replicas: each item is claimed by one replica and sent once; the
sends a dead replica left cut off are taken over, looked up in the chat, never resent blind;
a replica starting reopens only its own cut-off sends."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from channels import Channel
from channels.slack import SlackChannel, SlackConfig
from gateway.delivery import UNCERTAIN, Outbox
from gateway.state import OutboxRecord
from gateway.state.postgres import PgStateDB
from tests.fakes.slack import APP_TOKEN, BOT_TOKEN, FakeSlack
from tests.gateway.cluster._replicas import eventually, replica, two_replicas
from tests.gateway.delivery._support import queued_announce

pytestmark = pytest.mark.postgres

ITEMS = 200


async def test_items_of_two_replicas_outbox_loops_are_each_sent_exactly_once(
    tmp_path: Path, pg_url: str
) -> None:
    async with two_replicas(tmp_path, pg_url) as (a, b):
        for i in range(ITEMS):
            item = OutboxRecord(
                channel="memory",
                account="default",
                chat_id=f"c{i % 7}",
                text=f"item {i}",
                created_at=time.time(),
            )
            await (a if i % 2 else b).db.outbox.insert(item)
        a.outbox.kick()
        b.outbox.kick()

        async def all_delivered() -> bool:
            return len(await a.db.outbox.list(states=["delivered"])) == ITEMS

        await eventually(all_delivered, f"{ITEMS} items delivered")
    # Stopped: every send either loop began has ended. Counted at the chat.
    sent = a.channel.sent + b.channel.sent
    assert len(sent) == ITEMS
    assert sorted(m.text for m in sent) == sorted(f"item {i}" for i in range(ITEMS))


@pytest.fixture
async def fake_slack() -> AsyncIterator[FakeSlack]:
    fake = FakeSlack()
    await fake.start()
    yield fake
    await fake.close()


def slack(fake: FakeSlack) -> SlackChannel:
    config = SlackConfig.model_validate(
        {
            "enabled": True,
            "mode": "socket",
            "botToken": BOT_TOKEN,
            "appToken": APP_TOKEN,
            "apiBaseUrl": fake.api_base_url,
        }
    )
    return SlackChannel(config)


async def ignore(message: object) -> None:
    return None


async def test_a_send_a_dead_replica_cut_off_is_looked_up_by_a_survivor_not_resent(
    tmp_path: Path, pg_url: str, fake_slack: FakeSlack
) -> None:
    # Replica "ghost" begins the send: Slack stores the post, the answer never comes.
    ghost_db = await PgStateDB.connect(pg_url, replica_id="ghost", state_dir=tmp_path / "state")
    try:
        await ghost_db.replicas.register("ghost", host="h", pid=1, now=time.time())
        item, _run_id = await queued_announce(ghost_db, channel="slack", chat_id="C1", text="hi")
        channel = slack(fake_slack)
        await channel.start(ignore)
        fake_slack.cut_off("chat.postMessage", stored=True)
        ghost = Outbox(ghost_db, {"slack": channel}, replica_id="ghost")
        await ghost.start()
        await fake_slack.wait_for(lambda: len(fake_slack.calls_to("chat.postMessage")) == 1)
        await ghost.close()  # it dies here, mid-send (its heartbeat row still fresh)
        await channel.stop()
        assert item.id is not None
        cut = await ghost_db.outbox.get(item.id)
        assert cut is not None
        assert (cut.state, cut.claimed_by) == ("sending", "ghost")

        survivor_slack: dict[str, Channel] = {"slack": slack(fake_slack)}
        async with replica(tmp_path, pg_url, "survivor", channels=survivor_slack) as survivor:
            assert survivor.cluster is not None
            beats = survivor.cluster.heartbeat.beats
            # Starting, and while "ghost" still beats, the survivor leaves its send alone.

            async def beaten() -> bool:
                return survivor.cluster is not None and survivor.cluster.heartbeat.beats > beats + 2

            await eventually(beaten, "a few heartbeats of the survivor")
            still = await survivor.db.outbox.get(item.id)
            assert still is not None
            assert (still.state, still.claimed_by) == ("sending", "ghost")

            # "ghost" falls silent: dead to the survivor, which asks the chat, finds the post.
            await ghost_db.write(lambda conn: conn.execute("UPDATE replicas SET heartbeat_at = 0"))

            async def settled() -> bool:
                now = await survivor.db.outbox.get(item.id or 0)
                return now is not None and now.state == "delivered"

            await eventually(settled, "the cut-off send recorded as delivered")
        assert [m["text"] for m in fake_slack.visible("C1")] == ["hi"]
        assert len(fake_slack.calls_to("chat.postMessage")) == 1
        assert len(fake_slack.calls_to("conversations.history")) == 1
    finally:
        await ghost_db.close()


async def test_a_replica_starting_reopens_its_own_cut_off_sends_only(
    tmp_path: Path, pg_url: str
) -> None:
    async with replica(tmp_path, pg_url, "alive") as alive:
        # Both queued "sending" (never pending, which alive's loop would take): "r2" by its
        # previous life, "alive" now (it still runs).
        mine, _ = await queued_announce(alive.db, text="mine", state="sending", claimed_by="r2")
        theirs, _ = await queued_announce(
            alive.db, text="theirs", state="sending", claimed_by="alive"
        )
        assert mine.id is not None
        assert theirs.id is not None
        async with replica(tmp_path, pg_url, "r2") as r2:
            reopened = await r2.db.outbox.get(mine.id)
            untouched = await r2.db.outbox.get(theirs.id)
        assert reopened is not None
        assert untouched is not None
        # Its own: looked up before any resend (the memory chat cannot tell: at most once).
        assert (reopened.state, reopened.last_error) == ("failed", UNCERTAIN)
        assert (untouched.state, untouched.claimed_by) == ("sending", "alive")
