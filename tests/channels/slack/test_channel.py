"""SlackChannel in Socket Mode against the fake Slack: real slack-bolt and slack_sdk code."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from channels.base import OutboundMessage
from channels.errors import ChannelSendError, ChannelStartError
from channels.replay import MemorySeenKeys, SeenKeys
from channels.slack import SlackChannel
from channels.slack.constants import WORKING_REACTION
from tests.channels.slack.conftest import Inbox, MakeChannel, slack_config
from tests.fakes.slack import BOT_ID, BOT_USER_ID, TEAM_ID, FakeSlack

MENTION = f"<@{BOT_USER_ID}>"


async def assert_ignored(fake: FakeSlack, inbox: Inbox, *events: dict[str, Any]) -> None:
    """Each event is acked, and none reaches the handler.

    Listeners hand messages over before the ack, in order; so when the DM pushed after the
    acks is the next message the handler sees, none of the events got through.
    """
    for event in events:
        await fake.wait_ack(await fake.push_event(event))
    sentinel = fake.message("sentinel", channel="D1")
    await fake.push_event(sentinel)
    assert (await inbox.next()).message_id == sentinel["ts"]


def reply(text: str, *, chat_id: str = "C1", thread_id: str | None = None) -> OutboundMessage:
    return OutboundMessage("slack", TEAM_ID, chat_id, thread_id, text)


async def test_dm_reaches_the_handler_and_the_reply_posts(
    fake_slack: FakeSlack, make_channel: MakeChannel
) -> None:
    channel, inbox = await make_channel()
    event = fake_slack.message("hello there", channel="D1", user="U7")
    envelope = await fake_slack.push_event(event)

    message = await inbox.next()
    assert (message.channel, message.account, message.chat_id) == ("slack", TEAM_ID, "D1")
    assert (message.chat_type, message.thread_id, message.sender_id) == ("dm", None, "U7")
    assert (message.text, message.message_id) == ("hello there", event["ts"])
    assert await fake_slack.wait_ack(envelope) == {"envelope_id": envelope}

    sent = await channel.send(reply("**hi**", chat_id="D1"))
    [post] = fake_slack.posts
    assert (post.channel, post.text, post.thread_ts) == ("D1", "*hi*", None)
    assert sent.message_ids == (post.ts,)
    assert [call.token for call in fake_slack.calls_to("chat.postMessage")] == [
        "xoxb-fake-bot-token"
    ]


async def test_start_checks_tokens_and_reports_connection(
    fake_slack: FakeSlack, make_channel: MakeChannel
) -> None:
    channel, _ = await make_channel()
    assert channel.connected
    assert channel.account == TEAM_ID
    assert "connected=True" in repr(channel)
    [open_call] = fake_slack.calls_to("apps.connections.open")
    assert open_call.token == "xapp-fake-app-token"
    await channel.stop()
    assert not channel.connected
    await channel.stop()  # idempotent


@pytest.mark.parametrize(
    ("override", "method"),
    [
        ({"botToken": "xoxb-wrong"}, "auth.test"),
        ({"appToken": "xapp-wrong"}, "apps.connections.open"),
    ],
)
async def test_start_fails_cleanly_on_a_bad_token(
    fake_slack: FakeSlack, override: dict[str, str], method: str
) -> None:
    channel = SlackChannel(slack_config(fake_slack, **override))
    with pytest.raises(ChannelStartError, match=f"{method}: invalid_auth"):
        await channel.start(Inbox())
    assert not channel.connected
    assert fake_slack.connections == 0


async def test_start_without_a_token_names_the_key(fake_slack: FakeSlack) -> None:
    channel = SlackChannel(slack_config(fake_slack, appToken=None))
    with pytest.raises(ChannelStartError, match=r"channels\.slack\.appToken"):
        await channel.start(Inbox())
    assert fake_slack.calls == []


async def test_channel_messages_need_a_mention(
    fake_slack: FakeSlack, make_channel: MakeChannel
) -> None:
    _, inbox = await make_channel()
    await assert_ignored(fake_slack, inbox, fake_slack.message("just chatting", channel="C1"))

    event = fake_slack.message(f"{MENTION} what's up?", channel="C1", user="U2")
    await fake_slack.push_event(event)
    message = await inbox.next()
    assert (message.chat_id, message.chat_type, message.text) == ("C1", "channel", "what's up?")
    # replyInThread: the answer starts a thread under the mention, and so does the session.
    assert message.thread_id == event["ts"]


async def test_without_require_mention_or_reply_in_thread(
    fake_slack: FakeSlack, make_channel: MakeChannel
) -> None:
    channel, inbox = await make_channel(requireMention=False, replyInThread=False)
    await fake_slack.push_event(fake_slack.message("anyone?", channel="C2"))
    message = await inbox.next()
    assert (message.chat_id, message.thread_id, message.text) == ("C2", None, "anyone?")

    await channel.send(reply("here", chat_id="C2", thread_id=message.thread_id))
    assert fake_slack.posts[0].thread_ts is None


async def test_thread_replies_stay_in_their_thread(
    fake_slack: FakeSlack, make_channel: MakeChannel
) -> None:
    channel, inbox = await make_channel()
    root = fake_slack.next_ts()
    await fake_slack.push_event(
        fake_slack.message(f"{MENTION} look at this", channel="C1", thread_ts=root)
    )
    message = await inbox.next()
    assert message.thread_id == root
    await channel.send(reply("looking", thread_id=message.thread_id))
    assert fake_slack.posts[-1].thread_ts == root

    # The bot takes part in this thread now: no mention needed there, still needed elsewhere.
    await fake_slack.push_event(fake_slack.message("and this?", channel="C1", thread_ts=root))
    follow_up = await inbox.next()
    assert (follow_up.text, follow_up.thread_id) == ("and this?", root)
    other = fake_slack.message("unrelated", channel="C1", thread_ts=fake_slack.next_ts())
    await assert_ignored(fake_slack, inbox, other)


async def test_replies_in_a_thread_under_the_bots_own_post_need_no_mention(
    fake_slack: FakeSlack, make_channel: MakeChannel
) -> None:
    channel, inbox = await make_channel(replyInThread=False)
    sent = await channel.send(reply("Daily summary: …"))
    [bot_post] = sent.message_ids
    await fake_slack.push_event(fake_slack.message("thanks!", channel="C1", thread_ts=bot_post))
    assert (await inbox.next()).thread_id == bot_post


async def test_the_bot_ignores_itself_and_other_bots(
    fake_slack: FakeSlack, make_channel: MakeChannel
) -> None:
    _, inbox = await make_channel(requireMention=False)
    await assert_ignored(
        fake_slack,
        inbox,
        fake_slack.message("my own post", channel="C1", user=BOT_USER_ID, bot_id=BOT_ID),
        fake_slack.message(f"{MENTION} ping", channel="C1", user="U9", bot_id="B9"),
        fake_slack.message(f"{MENTION} ping", channel="D1", subtype="bot_message", bot_id="B9"),
    )


async def test_edits_deletions_joins_and_files_only_are_ignored(
    fake_slack: FakeSlack, make_channel: MakeChannel
) -> None:
    _, inbox = await make_channel()
    ts = fake_slack.next_ts()
    edited = {
        "type": "message",
        "subtype": "message_changed",
        "channel": "D1",
        "ts": ts,
        "message": {"type": "message", "user": "U1", "text": "edited", "ts": ts},
    }
    deleted = {
        "type": "message",
        "subtype": "message_deleted",
        "channel": "D1",
        "ts": fake_slack.next_ts(),
        "deleted_ts": ts,
    }
    joined = fake_slack.message("<@U1> has joined", channel="C1", subtype="channel_join")
    file = {"id": "F1", "name": "photo.png"}
    files_only = fake_slack.message("", channel="D1", subtype="file_share", files=[file])
    mention_only = fake_slack.message(MENTION, channel="C1")
    await assert_ignored(fake_slack, inbox, edited, deleted, joined, files_only, mention_only)

    with_text = fake_slack.message("see attached", channel="D1", subtype="file_share", files=[file])
    await fake_slack.push_event(with_text)
    message = await inbox.next()
    assert message.text.startswith("see attached\n")
    assert "photo.png" in message.text


async def test_events_slack_retries_are_acked_and_handled_once(
    fake_slack: FakeSlack, make_channel: MakeChannel
) -> None:
    _, inbox = await make_channel()
    event = fake_slack.message(f"{MENTION} do it once", channel="C1")
    first = await fake_slack.push_event(event, event_id="Ev1")
    retry = await fake_slack.push_event(
        event, event_id="Ev1", retry_attempt=1, retry_reason="timeout"
    )
    # Slack also sends the app_mention twin of a mentioning message, under its own event id.
    twin = await fake_slack.push_event({**event, "type": "app_mention"}, event_id="Ev2")
    for envelope in (first, retry, twin):
        assert await fake_slack.wait_ack(envelope) == {"envelope_id": envelope}
    assert (await inbox.next()).text == "do it once"
    await assert_ignored(fake_slack, inbox)


async def started(fake: FakeSlack, seen: SeenKeys) -> tuple[SlackChannel, Inbox]:
    channel = SlackChannel(slack_config(fake), seen=seen)
    inbox = Inbox()
    await channel.start(inbox)
    await fake.wait_connected()
    return channel, inbox


async def test_events_seen_before_a_restart_are_dropped_through_the_given_memory(
    fake_slack: FakeSlack,
) -> None:
    seen = MemorySeenKeys(100)
    first, inbox = await started(fake_slack, seen)
    try:
        await fake_slack.push_event(fake_slack.message("once", channel="D1"), event_id="Ev1")
        assert (await inbox.next()).text == "once"
    finally:
        await first.stop()
    # A new channel (as after a restart) with the same memory: Slack's retry is dropped.
    second, inbox = await started(fake_slack, seen)
    try:
        retry = fake_slack.message("once", channel="D1")
        await fake_slack.wait_ack(
            await fake_slack.push_event(retry, event_id="Ev1", retry_attempt=1)
        )
        await assert_ignored(fake_slack, inbox)
    finally:
        await second.stop()


class BrokenMemory:
    """A memory of events that cannot be written (a full disk under the state database)."""

    async def first_sighting(self, keys: Sequence[str], ttl_seconds: float) -> bool:
        raise OSError("database or disk is full")


async def test_a_failing_memory_drops_repeats_in_memory_and_warns_once(
    fake_slack: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    channel, inbox = await started(fake_slack, BrokenMemory())
    try:
        event = fake_slack.message("still once", channel="D1")
        for attempt in range(3):
            await fake_slack.push_event(event, event_id="Ev1", retry_attempt=attempt)
        assert (await inbox.next()).text == "still once"
        await assert_ignored(fake_slack, inbox)
    finally:
        await channel.stop()
    warnings = [r for r in caplog.records if "cannot record seen requests" in r.getMessage()]
    assert len(warnings) == 1
    assert "disk is full" in warnings[0].getMessage()


async def test_app_mention_alone_is_enough(
    fake_slack: FakeSlack, make_channel: MakeChannel
) -> None:
    _, inbox = await make_channel()
    event = {**fake_slack.message(f"{MENTION} hi", channel="C2"), "type": "app_mention"}
    del event["channel_type"]  # app_mention events carry no channel_type
    await fake_slack.push_event(event)
    message = await inbox.next()
    assert (message.chat_id, message.chat_type, message.text) == ("C2", "channel", "hi")


async def test_other_event_types_are_acked(
    fake_slack: FakeSlack, make_channel: MakeChannel
) -> None:
    _, inbox = await make_channel()
    reaction = {
        "type": "reaction_added",
        "user": "U1",
        "reaction": "tada",
        "item": {"type": "message", "channel": "C1", "ts": "1.2"},
    }
    await assert_ignored(fake_slack, inbox, reaction)


async def test_unknown_channel_mention_is_handled_and_its_reply_fails_permanently(
    fake_slack: FakeSlack, make_channel: MakeChannel
) -> None:
    channel, inbox = await make_channel()
    await assert_ignored(fake_slack, inbox, fake_slack.message("no mention", channel="C999"))
    await fake_slack.push_event(fake_slack.message(f"{MENTION} hi", channel="C999"))
    message = await inbox.next()
    assert message.chat_id == "C999"
    with pytest.raises(ChannelSendError, match="channel_not_found") as caught:
        await channel.send(reply("hi", chat_id="C999", thread_id=message.thread_id))
    assert caught.value.retryable is False


async def test_huge_inbound_message_is_cut_to_slacks_limit(
    fake_slack: FakeSlack, make_channel: MakeChannel
) -> None:
    _, inbox = await make_channel()
    await fake_slack.push_event(fake_slack.message("x" * 100_000, channel="D1"))
    message = await inbox.next()
    assert message.text.startswith("x" * 40_000)
    assert message.text.endswith("[message truncated]")
    assert len(message.text) < 40_100


async def test_announce_lands_in_the_origin_thread_after_the_chat_moved_on(
    fake_slack: FakeSlack, make_channel: MakeChannel
) -> None:
    channel, inbox = await make_channel()
    origin = fake_slack.message(f"{MENTION} spawn a researcher", channel="C1")
    await fake_slack.push_event(origin)
    spawned_from = await inbox.next()
    # The conversation moves on: new top-level mentions start newer threads.
    for text in ("next question", "and another"):
        await fake_slack.push_event(fake_slack.message(f"{MENTION} {text}", channel="C1"))
        newer = await inbox.next()
        await channel.send(reply("answer", thread_id=newer.thread_id))

    announce = OutboundMessage(
        "slack",
        spawned_from.account,
        spawned_from.chat_id,
        spawned_from.thread_id,
        "Research done.\n\nStats: runtime 5s",
        kind="announce",
        run_id="run-1",
    )
    await channel.send(announce)
    post = fake_slack.posts[-1]
    assert (post.channel, post.thread_ts) == ("C1", origin["ts"])
    assert post.text.startswith("Research done.")


async def test_slash_commands_become_command_messages(
    fake_slack: FakeSlack, make_channel: MakeChannel
) -> None:
    _, inbox = await make_channel()
    envelope = await fake_slack.push_command("/spawn", "summarise the &lt;log&gt;", user_id="U3")
    assert await fake_slack.wait_ack(envelope) == {"envelope_id": envelope}
    message = await inbox.next()
    assert (message.text, message.chat_id, message.sender_id) == (
        "/spawn summarise the <log>",
        "C1",
        "U3",
    )
    assert (message.thread_id, message.message_id, message.chat_type) == (None, None, "channel")

    await fake_slack.push_command("/subagents", "list", channel_id="D1")
    message = await inbox.next()
    assert (message.text, message.chat_type) == ("/subagents list", "dm")


async def test_text_commands_after_a_mention_or_with_a_bang(
    fake_slack: FakeSlack, make_channel: MakeChannel
) -> None:
    _, inbox = await make_channel()
    await fake_slack.push_event(
        fake_slack.message(f"{MENTION} /subagents info run-1", channel="C1")
    )
    assert (await inbox.next()).text == "/subagents info run-1"
    await fake_slack.push_event(fake_slack.message("!stop", channel="D1"))
    assert (await inbox.next()).text == "/stop"
    await fake_slack.push_event(fake_slack.message("!important note", channel="D1"))
    assert (await inbox.next()).text == "!important note"


async def test_working_adds_and_removes_a_reaction(
    fake_slack: FakeSlack, make_channel: MakeChannel
) -> None:
    channel, inbox = await make_channel()
    await fake_slack.push_event(fake_slack.message("think hard", channel="D1"))
    message = await inbox.next()
    key = ("D1", message.message_id, WORKING_REACTION)
    async with channel.working(message):
        assert key in fake_slack.reactions
    assert fake_slack.reactions == set()
    assert [c.method for c in fake_slack.calls if c.method.startswith("reactions.")] == [
        "reactions.add",
        "reactions.remove",
    ]


async def test_working_survives_reaction_failures(
    fake_slack: FakeSlack, make_channel: MakeChannel
) -> None:
    channel, inbox = await make_channel()
    await fake_slack.push_event(fake_slack.message("think", channel="D1"))
    message = await inbox.next()
    fake_slack.fail("reactions.add", error="missing_scope")
    ran = False
    async with channel.working(message):
        ran = True
    assert ran
    assert fake_slack.calls_to("reactions.remove") == []  # nothing was added, nothing to remove

    fake_slack.fail("reactions.remove", status=500)
    async with channel.working(message):
        pass
    assert len(fake_slack.calls_to("reactions.remove")) == 1


async def test_reconnects_when_slack_asks(fake_slack: FakeSlack, make_channel: MakeChannel) -> None:
    channel, inbox = await make_channel()
    await fake_slack.disconnect()
    await fake_slack.wait_for(lambda: fake_slack.connections == 2)
    await fake_slack.wait_for(lambda: len(fake_slack.calls_to("apps.connections.open")) == 2)
    await fake_slack.push_event(fake_slack.message("still there?", channel="D1"))
    assert (await inbox.next()).text == "still there?"
    assert channel.connected


async def test_many_messages_through_the_socket(
    fake_slack: FakeSlack, make_channel: MakeChannel
) -> None:
    channel, inbox = await make_channel()
    count = 200
    envelopes = [
        await fake_slack.push_event(fake_slack.message(f"message {i}", channel="D1"))
        for i in range(count)
    ]
    received = [await inbox.next() for _ in range(count)]
    assert sorted(m.text for m in received) == sorted(f"message {i}" for i in range(count))
    await asyncio.gather(*(fake_slack.wait_ack(e) for e in envelopes))
    await asyncio.gather(*(channel.send(reply(m.text, chat_id="D1")) for m in received))
    assert len(fake_slack.posts) == count


async def test_bolt_oauth_environment_is_refused(
    fake_slack: FakeSlack, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLACK_CLIENT_ID", "1.2")
    monkeypatch.setenv("SLACK_CLIENT_SECRET", "s")
    channel = SlackChannel(slack_config(fake_slack))
    with pytest.raises(ChannelStartError, match="SLACK_CLIENT_ID"):
        await channel.start(Inbox())
    assert fake_slack.calls == []
