"""Exactly once across a crash mid-send: the outbox with the real Slack, Discord and web chat
channels, against the fakes, which record what really reached the chat.

A crash is played as SIGKILL leaves it: the first outbox's send is under way when the chat
has (``stored``) or has not yet taken the post, the request never gets its answer, and the
worker is cancelled there, so the state database still says ``sending``. A second outbox
and a fresh channel (a new process knows nothing of the first) then start on the same
database; the chat must end with exactly one copy of the announce and the item delivered.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from pydantic import SecretStr

from channels import Channel, OutboundMessage
from channels.discord import DiscordChannel, DiscordConfig
from channels.slack import SlackChannel, SlackConfig
from channels.slack.constants import ANNOUNCE_EVENT_TYPE, CHUNK_LIMIT
from channels.webchat import WebchatChannel, WebchatConfig
from gateway.delivery import UNCERTAIN, Outbox
from gateway.state import OutboxRecord, StateDB
from tests.fakes.discord import WAIT_GUARD, FakeDiscord, text_channel_payload
from tests.fakes.slack import APP_TOKEN, BOT_TOKEN, FakeSlack
from tests.gateway.delivery._support import HANG_GUARD_SECONDS, Settled, queued_announce

GUILD = "1300000000000000001"
GENERAL = "1300000000000000002"
CLIENT = "exactly-once-client"
#: Two Slack chunks: two paragraphs that do not fit one chunk together.
LONG_TEXT = "a" * (CHUNK_LIMIT - 500) + "\n\n" + "b" * (CHUNK_LIMIT - 500)


async def die_mid_send(
    db: StateDB, name: str, channel: Channel, reached: Callable[[], Awaitable[None]]
) -> None:
    """A first outbox starts the queued item's send; once the chat has the request
    (``reached``), the process dies mid-send: its worker is cancelled there."""
    outbox = Outbox(db, {name: channel})
    await outbox.start()
    async with asyncio.timeout(HANG_GUARD_SECONDS):
        await reached()
    await outbox.close()


async def restart(db: StateDB, name: str, channel: Channel) -> OutboxRecord:
    """A second outbox on the same database; the item as it settles."""
    outbox = Outbox(db, {name: channel})
    settled = Settled()
    outbox.subscribe(settled)
    try:
        await outbox.start()
        (item,) = await settled.wait()
        return item
    finally:
        await outbox.close()


async def assert_cut_off(db: StateDB, item_id: int | None) -> None:
    assert item_id is not None
    item = await db.outbox.get(item_id)
    assert item is not None
    assert item.state == "sending", "the crash must leave the send cut off"


async def assert_delivered(db: StateDB, item: OutboxRecord, run_id: str) -> None:
    assert (item.state, item.in_doubt, item.last_error) == ("delivered", False, None)
    run = await db.runs.get(run_id)
    assert run is not None
    assert (run.delivery.announce_state, run.delivery.announce_error) == ("delivered", None)


# -- Slack -----------------------------------------------------------------------------------


@pytest.fixture
async def fake_slack() -> AsyncIterator[FakeSlack]:
    fake = FakeSlack()
    await fake.start()
    yield fake
    await fake.close()


async def slack_channel(fake: FakeSlack) -> SlackChannel:
    config = SlackConfig.model_validate(
        {
            "enabled": True,
            "mode": "socket",
            "botToken": BOT_TOKEN,
            "appToken": APP_TOKEN,
            "apiBaseUrl": fake.api_base_url,
        }
    )
    channel = SlackChannel(config)

    async def ignore(message: object) -> None:
        return None

    await channel.start(ignore)
    await fake.wait_connected()
    return channel


def posted_calls(fake: FakeSlack, count: int) -> Callable[[], Awaitable[None]]:
    return lambda: fake.wait_for(lambda: len(fake.calls_to("chat.postMessage")) >= count)


@pytest.mark.parametrize("stored", [True, False], ids=["in-the-chat", "not-in-the-chat"])
async def test_a_slack_announce_cut_off_mid_send_is_in_the_chat_exactly_once(
    db: StateDB, fake_slack: FakeSlack, stored: bool
) -> None:
    item, run_id = await queued_announce(db, channel="slack", chat_id="C1", text="tides: done")
    first = await slack_channel(fake_slack)
    fake_slack.cut_off("chat.postMessage", stored=stored)
    await die_mid_send(db, "slack", first, posted_calls(fake_slack, 1))
    await first.stop()
    await assert_cut_off(db, item.id)

    second = await slack_channel(fake_slack)
    try:
        settled = await restart(db, "slack", second)
    finally:
        await second.stop()

    visible = fake_slack.visible("C1")
    assert [m["text"] for m in visible] == ["tides: done"]
    assert settled.message_ids == (visible[0]["ts"],)
    await assert_delivered(db, settled, run_id)
    # The post carries the item's metadata; the chat was asked before anything was resent.
    assert visible[0]["metadata"] == {
        "event_type": ANNOUNCE_EVENT_TYPE,
        "event_payload": {"outbox_id": item.id, "run_id": run_id, "part": 0, "parts": 1},
    }
    (history,) = fake_slack.calls_to("conversations.history")
    assert history.args["include_all_metadata"] in ("1", True)
    assert len(fake_slack.calls_to("chat.postMessage")) == (1 if stored else 2)


async def test_a_slack_announce_in_a_thread_is_looked_for_in_that_thread(
    db: StateDB, fake_slack: FakeSlack
) -> None:
    parent = fake_slack.message("research tides in the background", channel="C1")
    first = await slack_channel(fake_slack)
    await fake_slack.push_event(parent)
    _item, run_id = await queued_announce(
        db, channel="slack", chat_id="C1", text="tides: done", thread_id=parent["ts"]
    )
    fake_slack.cut_off("chat.postMessage", stored=True)
    await die_mid_send(db, "slack", first, posted_calls(fake_slack, 1))
    await first.stop()

    second = await slack_channel(fake_slack)
    try:
        settled = await restart(db, "slack", second)
    finally:
        await second.stop()

    replies = [m for m in fake_slack.visible("C1") if m.get("thread_ts") == parent["ts"]]
    assert [m["text"] for m in replies] == ["tides: done"]
    assert settled.message_ids == (replies[0]["ts"],)
    await assert_delivered(db, settled, run_id)
    (lookup,) = fake_slack.calls_to("conversations.replies")
    assert lookup.args["ts"] == parent["ts"]


@pytest.mark.parametrize("stored", [True, False], ids=["in-the-chat", "not-in-the-chat"])
async def test_a_long_slack_announce_cut_off_between_chunks_shows_each_chunk_once(
    db: StateDB, fake_slack: FakeSlack, stored: bool
) -> None:
    _item, run_id = await queued_announce(db, channel="slack", chat_id="C1", text=LONG_TEXT)
    first = await slack_channel(fake_slack)
    fake_slack.cut_off("chat.postMessage", stored=stored, after=1)  # the second chunk
    await die_mid_send(db, "slack", first, posted_calls(fake_slack, 2))
    await first.stop()

    second = await slack_channel(fake_slack)
    try:
        settled = await restart(db, "slack", second)
    finally:
        await second.stop()

    visible = fake_slack.visible("C1")
    assert [m["text"][0] for m in visible] == ["a", "b"]
    assert [m["metadata"]["event_payload"]["part"] for m in visible] == [0, 1]
    assert settled.message_ids == tuple(m["ts"] for m in visible)
    await assert_delivered(db, settled, run_id)


async def test_a_slack_app_that_cannot_read_history_keeps_a_cut_off_announce_at_most_once(
    db: StateDB, fake_slack: FakeSlack
) -> None:
    _item, run_id = await queued_announce(db, channel="slack", chat_id="C1", text="tides: done")
    first = await slack_channel(fake_slack)
    fake_slack.cut_off("chat.postMessage", stored=True)
    await die_mid_send(db, "slack", first, posted_calls(fake_slack, 1))
    await first.stop()
    fake_slack.fail("conversations.history", error="missing_scope")

    second = await slack_channel(fake_slack)
    try:
        settled = await restart(db, "slack", second)
    finally:
        await second.stop()

    # Asked, could not tell: recorded as uncertain and never posted a second time.
    assert len(fake_slack.calls_to("conversations.history")) == 1
    assert [m["text"] for m in fake_slack.visible("C1")] == ["tides: done"]
    assert (settled.state, settled.last_error) == ("failed", UNCERTAIN)
    run = await db.runs.get(run_id)
    assert run is not None
    assert (run.delivery.announce_state, run.delivery.announce_error) == ("uncertain", UNCERTAIN)


async def test_a_slack_lookup_that_is_rate_limited_is_asked_again_before_any_resend(
    db: StateDB, fake_slack: FakeSlack
) -> None:
    item, run_id = await queued_announce(db, channel="slack", chat_id="C1", text="tides: done")
    assert item.id is not None
    first = await slack_channel(fake_slack)
    fake_slack.cut_off("chat.postMessage", stored=False)
    await die_mid_send(db, "slack", first, posted_calls(fake_slack, 1))
    await first.stop()
    fake_slack.fail("conversations.history", status=429, retry_after=30)

    now = [time.time()]
    retried = asyncio.Event()
    second = await slack_channel(fake_slack)
    outbox = Outbox(db, {"slack": second}, clock=lambda: now[0])
    outbox.on_retry = retried.set
    settled = Settled()
    outbox.subscribe(settled)
    try:
        await outbox.start()
        async with asyncio.timeout(HANG_GUARD_SECONDS):
            await retried.wait()
        waiting = await db.outbox.get(item.id)
        assert waiting is not None
        assert (waiting.state, waiting.in_doubt) == ("pending", True)
        assert waiting.next_attempt_at is not None
        assert waiting.next_attempt_at == pytest.approx(now[0] + 30)
        assert fake_slack.visible("C1") == []  # nothing sent blind
        now[0] = waiting.next_attempt_at
        outbox.kick()
        (done,) = await settled.wait()
    finally:
        await outbox.close()
        await second.stop()

    assert [m["text"] for m in fake_slack.visible("C1")] == ["tides: done"]
    assert len(fake_slack.calls_to("conversations.history")) == 2
    await assert_delivered(db, done, run_id)


# -- Discord ---------------------------------------------------------------------------------


@pytest.fixture
async def fake_discord() -> AsyncIterator[FakeDiscord]:
    async with FakeDiscord() as fake:
        fake.add_guild(GUILD, "test guild", [text_channel_payload(GENERAL, GUILD, "general")], [])
        # The nonce no longer protects: only the lookup in the channel can prevent a repeat.
        fake.nonce_window = 0.0
        yield fake


async def discord_channel(fake: FakeDiscord) -> DiscordChannel:
    config = DiscordConfig(
        enabled=True,
        token=SecretStr(fake.token),
        api_base_url=fake.api_base_url,
        gateway_url=fake.gateway_url,
    )
    channel = DiscordChannel(config, start_timeout=WAIT_GUARD, guild_ready_timeout=0.01)

    async def ignore(message: object) -> None:
        return None

    await channel.start(ignore)
    return channel


@pytest.mark.parametrize("stored", [True, False], ids=["in-the-chat", "not-in-the-chat"])
async def test_a_discord_announce_cut_off_mid_send_is_in_the_chat_exactly_once(
    db: StateDB, fake_discord: FakeDiscord, stored: bool
) -> None:
    item, run_id = await queued_announce(db, channel="discord", chat_id=GENERAL, text="tides: done")
    first = await discord_channel(fake_discord)
    fake_discord.cut_off_next_message(stored=stored)
    path = f"/channels/{GENERAL}/messages"
    await die_mid_send(
        db,
        "discord",
        first,
        lambda: fake_discord.wait_until(lambda: bool(fake_discord.requests_to("POST", path))),
    )
    await first.stop()
    await assert_cut_off(db, item.id)

    second = await discord_channel(fake_discord)
    try:
        settled = await restart(db, "discord", second)
    finally:
        await second.stop()

    visible = fake_discord.messages[GENERAL]
    assert [m["content"] for m in visible] == ["tides: done"]
    assert settled.message_ids == (visible[0]["id"],)
    await assert_delivered(db, settled, run_id)
    assert len(fake_discord.requests_to("GET", path)) == 1
    assert len(fake_discord.requests_to("POST", path)) == (1 if stored else 2)


# -- web chat --------------------------------------------------------------------------------


def webchat_channel(history: Path) -> WebchatChannel:
    return WebchatChannel(WebchatConfig.model_validate({}), history_dir=history)


async def replayed(channel: WebchatChannel) -> list[dict[str, object]]:
    """The message frames a page that connects now is shown (the replay after hello)."""
    app = web.Application()
    channel.add_routes(app)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    frames: list[dict[str, object]] = []
    try:
        async with (
            aiohttp.ClientSession() as http,
            http.ws_connect(f"http://127.0.0.1:{port}/webchat/ws") as ws,
        ):
            await ws.send_json({"type": "hello", "clientId": CLIENT})
            await ws.send_json({"type": "hello", "clientId": CLIENT})  # its error ends the replay
            while (frame := await ws.receive_json(timeout=HANG_GUARD_SECONDS))["type"] != "error":
                frames.append(frame)
    finally:
        await runner.cleanup()
    return [f for f in frames if f["type"] == "message"]


@pytest.mark.parametrize("stored", [True, False], ids=["in-the-chat", "not-in-the-chat"])
async def test_a_webchat_announce_cut_off_mid_send_is_shown_exactly_once(
    db: StateDB, tmp_path: Path, stored: bool
) -> None:
    item, run_id = await queued_announce(db, channel="webchat", chat_id=CLIENT, text="tides")
    assert item.id is not None
    first = webchat_channel(tmp_path / "webchat")
    await first.start(lambda message: asyncio.sleep(0))
    if stored:  # the web chat kept the announce, then the process died before recording it
        await first.send(
            OutboundMessage(
                channel="webchat",
                account=item.account,
                chat_id=CLIENT,
                thread_id=None,
                text=item.text,
                kind="announce",
                run_id=run_id,
                outbox_id=item.id,
            )
        )
    await db.outbox.update(item.id, state="sending", attempts=1, first_attempt_at=time.time())
    await first.stop()

    second = webchat_channel(tmp_path / "webchat")
    await second.start(lambda message: asyncio.sleep(0))
    try:
        settled = await restart(db, "webchat", second)
        shown = await replayed(second)
    finally:
        await second.stop()

    assert [(f["text"], f["kind"]) for f in shown] == [("tides", "announce")]
    assert settled.message_ids == (shown[0]["id"],)
    await assert_delivered(db, settled, run_id)
