"""Slack in a cluster: each event is handled once, whichever replicas Slack (or a load
balancer) hands it to — in HTTP mode and in Socket Mode with every replica connected. Two
real apps on one database and one state directory, the fake Slack."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import pytest

from channels.reconnecting import Reconnecting
from channels.slack import SlackChannel
from tests.fakes.slack import APP_TOKEN, BOT_TOKEN, BOT_USER_ID, SIGNING_SECRET, FakeSlack
from tests.gateway.cluster.replicas import Replica, replica, until

pytestmark = pytest.mark.postgres

MENTION = f"<@{BOT_USER_ID}>"
#: Where the conversations of channel C1 are (each mention starts a thread of its own).
SESSIONS = "agent:main:slack:channel:c1"
JSON = {"Content-Type": "application/json"}


@asynccontextmanager
async def two_replicas(
    tmp_path: Path, pg_url: str, mode: Literal["http", "socket"]
) -> AsyncIterator[tuple[FakeSlack, Replica, Replica]]:
    fake = FakeSlack()
    await fake.start()
    slack = {
        "enabled": True,
        "mode": mode,
        "botToken": BOT_TOKEN,
        "appToken": APP_TOKEN,
        "signingSecret": SIGNING_SECRET,
        "apiBaseUrl": fake.api_base_url,
        "streaming": "off",  # replies are counted as whole posts; streaming has its own tests
    }
    try:
        async with AsyncExitStack() as stack:
            pair = [
                await stack.enter_async_context(
                    replica(tmp_path, name, database_url=pg_url, channels={"slack": slack})
                )
                for name in ("a", "b")
            ]
            if mode == "socket":  # every replica connected
                await until(lambda: fake.open_sockets == 2 or None)
            yield fake, pair[0], pair[1]
    finally:
        await fake.close()


async def post(gateway: Replica, fake: FakeSlack, body: dict[str, Any]) -> None:
    """An Events API request to ``gateway``, signed now (as Slack signs each retry)."""
    raw = json.dumps(body).encode()
    response = await gateway.client.post(
        "/slack/events", data=raw, headers={**JSON, **FakeSlack.sign(raw)}
    )
    assert response.status == 200, await response.text()


async def settled(fake: FakeSlack, replicas: tuple[Replica, ...], posts: int) -> list[str]:
    """Once ``posts`` replies are posted and no replica has an event or turn in hand: the
    person's messages in the channel's conversations."""
    await fake.wait_posts(posts)
    for gateway in replicas:
        wrapper = gateway.channel("slack")
        assert isinstance(wrapper, Reconnecting)
        slack = wrapper.inner
        assert isinstance(slack, SlackChannel)
        await until(lambda slack=slack: slack.pending == 0 or None)  # type: ignore[misc]
        await gateway.lanes.session.join()
    said: list[str] = []
    for session in await replicas[0].store.list():
        if session.key.startswith(SESSIONS):
            history = await replicas[0].store.history(session.key)
            said += [m["content"] for m in history if m["role"] == "user"]
    return said


def mention(fake: FakeSlack, text: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A message mentioning the bot and its ``app_mention`` twin (Slack sends both, each
    with its own event id)."""
    message = fake.message(f"{MENTION} {text}", channel="C1")
    twin = {**message, "type": "app_mention"}
    del twin["channel_type"]
    return message, twin


async def test_http_one_event_posted_to_both_replicas_at_once_is_handled_once(
    tmp_path: Path, pg_url: str
) -> None:
    async with two_replicas(tmp_path, pg_url, "http") as (fake, a, b):
        message, _ = mention(fake, "say one")
        body = fake.event_callback(message, event_id="EvSAME")
        await asyncio.gather(post(a, fake, body), post(b, fake, body))
        later, _ = mention(fake, "say two")
        await post(b, fake, fake.event_callback(later))
        assert sorted(await settled(fake, (a, b), 2)) == ["say one", "say two"]
        assert sorted(p.text for p in fake.posts) == ["said one", "said two"]


async def test_http_a_message_and_its_mention_twin_on_two_replicas_are_handled_once(
    tmp_path: Path, pg_url: str
) -> None:
    async with two_replicas(tmp_path, pg_url, "http") as (fake, a, b):
        message, twin = mention(fake, "say one")
        await asyncio.gather(
            post(a, fake, fake.event_callback(message)), post(b, fake, fake.event_callback(twin))
        )
        later, _ = mention(fake, "say two")
        await post(a, fake, fake.event_callback(later))
        assert sorted(await settled(fake, (a, b), 2)) == ["say one", "say two"]
        assert sorted(p.text for p in fake.posts) == ["said one", "said two"]


async def test_socket_mode_an_event_its_retry_and_its_twin_on_every_connection_once(
    tmp_path: Path, pg_url: str
) -> None:
    async with two_replicas(tmp_path, pg_url, "socket") as (fake, a, b):
        message, twin = mention(fake, "say one")
        await fake.wait_ack(await fake.push_event(message, event_id="EvONE", connection=0))
        # Slack retries an event whose ack it missed, maybe on another connection, and
        # sends the mention's twin wherever it likes.
        retry = await fake.push_event(
            message, event_id="EvONE", retry_attempt=1, retry_reason="timeout", connection=1
        )
        await fake.wait_ack(retry)
        await fake.wait_ack(await fake.push_event(twin, event_id="EvTWIN", connection=1))
        later, _ = mention(fake, "say two")
        await fake.wait_ack(await fake.push_event(later, connection=0))
        assert sorted(await settled(fake, (a, b), 2)) == ["say one", "say two"]
        assert sorted(p.text for p in fake.posts) == ["said one", "said two"]
