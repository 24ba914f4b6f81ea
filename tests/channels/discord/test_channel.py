"""DiscordChannel's lifecycle and sends: the real discord.py client against the fake Discord."""

from __future__ import annotations

import logging
import re
import time

import pytest

from channels.base import InboundMessage, OutboundMessage
from channels.discord import DiscordChannel, DiscordConfig, discord_intents
from channels.discord._sdk import discord
from channels.errors import ChannelSendError, ChannelStartError
from tests.channels.discord.conftest import (
    ALICE,
    DM_CHANNEL,
    GENERAL,
    THREAD,
    MakeChannel,
    eventually,
)
from tests.fakes.discord import BOT_ID, FakeDiscord

MESSAGES = f"/channels/{GENERAL}/messages"


def reply(text: str, chat_id: str = GENERAL, kind: str = "reply") -> OutboundMessage:
    return OutboundMessage(
        channel="discord",
        account=BOT_ID,
        chat_id=chat_id,
        thread_id=None,
        text=text,
        kind=kind,  # type: ignore[arg-type]
    )


def inbound_in(chat_id: str) -> InboundMessage:
    return InboundMessage(
        channel="discord", account=BOT_ID, chat_id=chat_id, thread_id=None, sender_id="1", text="x"
    )


# start-up


async def test_start_returns_once_ready_with_the_intents_herald_needs(
    fake_discord: FakeDiscord, make_channel: MakeChannel
) -> None:
    running = await make_channel()

    assert running.channel.connected
    assert running.channel.bot_user_id == BOT_ID
    assert fake_discord.requests_to("GET", "/users/@me")[0].authorized
    assert fake_discord.gateway_queries == [
        {"v": "10", "encoding": "json", "compress": "zlib-stream"}
    ]
    intents = discord.Intents._from_value(fake_discord.identifies[0]["intents"])
    assert intents == discord_intents()
    assert (intents.guilds, intents.guild_messages, intents.dm_messages) == (True, True, True)
    assert intents.message_content
    assert not intents.members
    assert not intents.presences


async def test_heartbeats_are_sent_with_the_sequence_and_acknowledged(
    fake_discord: FakeDiscord, make_channel: MakeChannel
) -> None:
    fake_discord.heartbeat_interval_ms = 20
    running = await make_channel()

    await fake_discord.wait_until(lambda: len(fake_discord.heartbeats) >= 4)

    # READY and GUILD_CREATE were sequence 1 and 2: later beats carry the last one seen.
    assert fake_discord.heartbeats[-1] == 2
    assert running.channel.connected
    assert fake_discord.connections == 1


async def test_a_wrong_token_is_a_clear_start_error_without_retries(
    fake_discord: FakeDiscord, make_channel: MakeChannel
) -> None:
    running = await make_channel(token="not-the-token", start=False)

    with pytest.raises(ChannelStartError, match="rejected the bot token") as caught:
        await running.channel.start(running.inbound.put)

    assert "not-the-token" not in str(caught.value)
    assert not caught.value.fault  # a mistake: the gateway exits 78
    assert not running.channel.connected
    assert len(fake_discord.requests_to("GET", "/users/@me")) == 1
    assert fake_discord.connections == 0


@pytest.mark.parametrize(
    ("code", "explains"),
    [(4004, "authentication failed"), (4014, "Message Content intent"), (4013, "invalid intents")],
)
async def test_a_fatal_gateway_close_code_is_a_clear_start_error(
    fake_discord: FakeDiscord, make_channel: MakeChannel, code: int, explains: str
) -> None:
    fake_discord.close_on_identify = code
    running = await make_channel(start=False)

    with pytest.raises(ChannelStartError, match=f"closed with {code}: .*{explains}") as caught:
        await running.channel.start(running.inbound.put)

    assert fake_discord.token not in str(caught.value)
    assert not caught.value.fault
    assert len(fake_discord.identifies) == 1  # no reconnect loop
    assert not running.channel.connected


async def test_an_unreachable_api_is_a_start_error(make_channel: MakeChannel) -> None:
    running = await make_channel(api_base_url="http://127.0.0.1:9/api/v10", start=False)

    with pytest.raises(
        ChannelStartError, match=r"cannot reach the Discord API at http://127\.0\.0\.1:9/api/v10"
    ) as caught:
        await running.channel.start(running.inbound.put)
    assert caught.value.fault  # a network fault: retried in the background, not exit 78


async def test_an_unreachable_gateway_is_a_start_error_naming_it(
    make_channel: MakeChannel,
) -> None:
    running = await make_channel(gateway_url="ws://127.0.0.1:9/", start=False)

    # discord.py either gives up after its first backoff or keeps retrying until the start
    # timeout; both errors name the gateway.
    with pytest.raises(
        ChannelStartError, match=r"the Discord gateway at ws://127\.0\.0\.1:9/"
    ) as caught:
        await running.channel.start(running.inbound.put)
    assert caught.value.fault
    assert not running.channel.connected


async def test_a_silent_gateway_is_a_start_error_after_the_timeout(
    fake_discord: FakeDiscord, make_channel: MakeChannel
) -> None:
    fake_discord.silent = True
    running = await make_channel(start=False, start_timeout=0.3)

    with pytest.raises(ChannelStartError, match=r"did not become ready within 0\.3 s") as caught:
        await running.channel.start(running.inbound.put)
    assert caught.value.fault
    assert fake_discord.connections == 1
    assert not running.channel.connected


async def test_a_missing_token_is_a_start_error() -> None:
    channel = DiscordChannel(DiscordConfig(enabled=True))

    with pytest.raises(ChannelStartError, match=r"channels\.discord\.token is not set"):
        await channel.start(lambda message: _never())


async def _never() -> None:
    raise AssertionError("no message expected")


async def test_stop_is_idempotent_and_restores_discord_py_urls(
    fake_discord: FakeDiscord, make_channel: MakeChannel
) -> None:
    before = discord.http.Route.BASE
    running = await make_channel()
    assert fake_discord.api_base_url == discord.http.Route.BASE

    await running.channel.stop()
    await running.channel.stop()

    assert before == discord.http.Route.BASE
    assert not running.channel.connected
    with pytest.raises(ChannelSendError) as caught:
        await running.channel.send(reply("late"))
    assert caught.value.retryable


# reconnecting


@pytest.mark.parametrize("close_code", [4000, None], ids=["close-4000", "no-close-frame"])
async def test_a_dropped_connection_resumes_and_replays_missed_messages(
    fake_discord: FakeDiscord, make_channel: MakeChannel, close_code: int | None
) -> None:
    running = await make_channel()
    session = fake_discord.session_id

    await fake_discord.drop(close_code)
    await fake_discord.post_message(channel_id=DM_CHANNEL, author=ALICE, content="while away")
    await fake_discord.wait_until(lambda: len(fake_discord.resumes) == 1)
    await fake_discord.post_message(channel_id=DM_CHANNEL, author=ALICE, content="after")

    assert (await running.next()).text == "while away"
    assert (await running.next()).text == "after"
    assert fake_discord.resumes[0]["session_id"] == session
    assert len(fake_discord.identifies) == 1
    assert fake_discord.connections == 2
    await eventually(lambda: running.channel.connected)


async def test_a_reconnect_request_resumes_the_session(
    fake_discord: FakeDiscord, make_channel: MakeChannel
) -> None:
    running = await make_channel()

    await fake_discord.request_reconnect()
    await fake_discord.wait_until(lambda: len(fake_discord.resumes) == 1)
    await fake_discord.post_message(channel_id=DM_CHANNEL, author=ALICE, content="still here")

    assert (await running.next()).text == "still here"
    assert len(fake_discord.identifies) == 1


async def test_a_fatal_close_after_ready_takes_the_channel_down_and_says_why(
    fake_discord: FakeDiscord, make_channel: MakeChannel, caplog: pytest.LogCaptureFixture
) -> None:
    running = await make_channel()

    with caplog.at_level(logging.ERROR, logger="channels.discord.channel"):
        await fake_discord.drop(4004)
        await eventually(lambda: not running.channel.connected)
        await eventually(lambda: bool(caplog.records))

    assert "discord channel is down: Discord gateway closed with 4004" in caplog.text
    assert fake_discord.token not in caplog.text
    assert fake_discord.resumes == []
    with pytest.raises(ChannelSendError) as caught:
        await running.channel.send(reply("anyone?"))
    assert caught.value.retryable


# sending


async def test_send_posts_without_pings(
    fake_discord: FakeDiscord, make_channel: MakeChannel
) -> None:
    running = await make_channel()

    sent = await running.channel.send(reply("hi @everyone and <@&123> and <@42>"))

    [body] = fake_discord.posted[GENERAL]
    assert body["content"] == "hi @everyone and <@&123> and <@42>"
    assert body["allowed_mentions"] == {"parse": []}
    assert sent.chat_id == GENERAL
    assert len(sent.message_ids) == 1


async def test_long_replies_are_split_with_code_blocks_kept_whole(
    fake_discord: FakeDiscord, make_channel: MakeChannel
) -> None:
    running = await make_channel()
    code = "\n".join(f"print({i})  # {'x' * 60}" for i in range(80))
    text = f"Here you go:\n```python\n{code}\n```\nDone."

    sent = await running.channel.send(reply(text))

    bodies = fake_discord.posted[GENERAL]
    assert len(bodies) == len(sent.message_ids) >= 3
    for body in bodies:
        assert len(body["content"]) <= 2000
        assert len(re.findall(r"^```", body["content"], re.MULTILINE)) == 2
        assert body["allowed_mentions"] == {"parse": []}
    assert bodies[1]["content"].startswith("```python\n")
    assert bodies[-1]["content"].endswith("```\nDone.")


async def test_announces_land_in_the_thread_they_came_from(
    fake_discord: FakeDiscord, make_channel: MakeChannel
) -> None:
    running = await make_channel()

    await running.channel.send(reply("the result", chat_id=THREAD, kind="announce"))

    assert [b["content"] for b in fake_discord.posted[THREAD]] == ["the result"]
    assert GENERAL not in fake_discord.posted


async def test_working_shows_typing_and_shrugs_off_failures(
    fake_discord: FakeDiscord, make_channel: MakeChannel
) -> None:
    running = await make_channel()

    async with running.channel.working(inbound_in(GENERAL)):
        await fake_discord.wait_until(lambda: fake_discord.typing == [GENERAL])

    fake_discord.deleted_channels.add(THREAD)
    async with running.channel.working(inbound_in(THREAD)):
        await fake_discord.wait_until(
            lambda: bool(fake_discord.requests_to("POST", f"/channels/{THREAD}/typing"))
        )


async def test_a_deleted_channel_is_a_permanent_failure(
    fake_discord: FakeDiscord, make_channel: MakeChannel
) -> None:
    running = await make_channel()
    fake_discord.deleted_channels.add(GENERAL)

    with pytest.raises(ChannelSendError, match="Unknown Channel") as caught:
        await running.channel.send(reply("hello?"))

    assert not caught.value.retryable
    assert len(fake_discord.requests_to("POST", MESSAGES)) == 1


async def test_missing_permissions_are_a_permanent_failure(
    fake_discord: FakeDiscord, make_channel: MakeChannel
) -> None:
    running = await make_channel()
    fake_discord.fail("POST", MESSAGES, 403, {"message": "Missing Permissions", "code": 50013})

    with pytest.raises(ChannelSendError, match="Missing Permissions") as caught:
        await running.channel.send(reply("hello?"))

    assert not caught.value.retryable


async def test_a_server_error_is_retryable(
    fake_discord: FakeDiscord, make_channel: MakeChannel
) -> None:
    running = await make_channel()
    fake_discord.fail("POST", MESSAGES, 503, {"message": "Service Unavailable", "code": 0})

    with pytest.raises(ChannelSendError) as caught:
        await running.channel.send(reply("hello?"))

    assert caught.value.retryable
    assert GENERAL not in fake_discord.posted


async def test_a_short_rate_limit_is_waited_out_and_delivers_once(
    fake_discord: FakeDiscord, make_channel: MakeChannel
) -> None:
    running = await make_channel()
    fake_discord.rate_limit("POST", MESSAGES, retry_after=0.05)

    sent = await running.channel.send(reply("patience"))

    assert len(fake_discord.requests_to("POST", MESSAGES)) == 2
    assert [b["content"] for b in fake_discord.posted[GENERAL]] == ["patience"]
    assert len(sent.message_ids) == 1


async def test_a_long_rate_limit_goes_back_to_the_outbox_with_its_wait(
    fake_discord: FakeDiscord, make_channel: MakeChannel
) -> None:
    running = await make_channel()
    fake_discord.rate_limit("POST", MESSAGES, retry_after=120.0)

    with pytest.raises(ChannelSendError) as caught:
        await running.channel.send(reply("patience"))

    assert caught.value.retryable
    assert caught.value.retry_after == 120.0
    assert GENERAL not in fake_discord.posted


async def test_a_retry_after_a_partial_send_posts_only_the_missing_parts(
    fake_discord: FakeDiscord, make_channel: MakeChannel
) -> None:
    running = await make_channel()
    message = reply("\n".join(f"line {i} " + "y" * 90 for i in range(50)))
    fake_discord.fail("POST", MESSAGES, 503, after=1)  # the second part fails once

    with pytest.raises(ChannelSendError) as caught:
        await running.channel.send(message)
    assert caught.value.retryable
    sent = await running.channel.send(message)

    contents = [b["content"] for b in fake_discord.posted[GENERAL]]
    assert len(contents) == len(sent.message_ids) >= 3
    assert "\n".join(contents) == message.text


async def test_a_bad_chat_id_is_a_permanent_failure(make_channel: MakeChannel) -> None:
    running = await make_channel()

    with pytest.raises(ChannelSendError) as caught:
        await running.channel.send(reply("hi", chat_id="general"))

    assert not caught.value.retryable


def announce(text: str, *, outbox_id: int = 7, run_id: str = "run-1") -> OutboundMessage:
    """An outbox item's message: the same on every attempt to deliver it."""
    return OutboundMessage(
        channel="discord",
        account=BOT_ID,
        chat_id=GENERAL,
        thread_id=None,
        text=text,
        kind="announce",
        run_id=run_id,
        outbox_id=outbox_id,
    )


async def test_an_announce_sent_again_soon_is_one_message_by_its_enforced_nonce(
    fake_discord: FakeDiscord, make_channel: MakeChannel
) -> None:
    first = await make_channel()
    message = announce("\n".join(f"line {i} " + "z" * 90 for i in range(30)))
    sent = await first.channel.send(message)
    await first.channel.stop()
    # A new process (nothing remembered) sends the same item again, as after a crash.
    second = await make_channel()
    again = await second.channel.send(message)

    assert again.message_ids == sent.message_ids
    assert len(fake_discord.messages[GENERAL]) == len(sent.message_ids) >= 2
    bodies = [r.body for r in fake_discord.requests_to("POST", MESSAGES)]
    nonces = [body["nonce"] for body in bodies]
    assert all(body["enforce_nonce"] is True for body in bodies)
    assert all(isinstance(n, str) and len(n) <= 25 for n in nonces)
    # One nonce per part, the same on both attempts; another item gets others.
    parts = len(sent.message_ids)
    assert nonces[:parts] == nonces[parts:]
    assert len(set(nonces)) == parts
    assert message.delivery_token(0) != announce(message.text, outbox_id=8).delivery_token(0)


async def test_find_delivered_reads_the_channel_after_the_nonce_window(
    fake_discord: FakeDiscord, make_channel: MakeChannel
) -> None:
    fake_discord.nonce_window = 0.0  # Discord has forgotten the nonces
    running = await make_channel()
    since = time.time()
    await fake_discord.post_message(channel_id=GENERAL, author=ALICE, content="unrelated")
    done = announce("the result")
    sent = await running.channel.send(done)
    missing = announce("never sent", outbox_id=8)

    found = await running.channel.find_delivered(done, since)
    not_found = await running.channel.find_delivered(missing, since)
    too_early = await running.channel.find_delivered(done, time.time() + 3600)

    assert (found.outcome, found.message_ids) == ("found", sent.message_ids)
    assert not_found.outcome == "not_found"
    assert too_early.outcome == "not_found"


async def test_a_resend_after_a_lookup_skips_the_parts_already_in_the_channel(
    fake_discord: FakeDiscord, make_channel: MakeChannel
) -> None:
    fake_discord.nonce_window = 0.0  # only the lookup can prevent a repeat
    first = await make_channel()
    since = time.time()
    message = announce("\n".join(f"line {i} " + "w" * 90 for i in range(30)))
    fake_discord.fail("POST", MESSAGES, 503, after=1)  # the second part fails
    with pytest.raises(ChannelSendError):
        await first.channel.send(message)
    await first.channel.stop()

    second = await make_channel()
    lookup = await second.channel.find_delivered(message, since)
    sent = await second.channel.send(message)

    assert lookup.outcome == "not_found"
    contents = [m["content"] for m in fake_discord.messages[GENERAL]]
    assert len(contents) == len(sent.message_ids) >= 2
    assert "\n".join(contents) == message.text
