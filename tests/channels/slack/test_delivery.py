"""Sending through the fake Web API: chunks, error classes, 429 and partial-failure resume."""

from __future__ import annotations

import pytest
from aiohttp import web

from channels.base import OutboundKind, OutboundMessage
from channels.errors import ChannelSendError
from channels.slack import SlackChannel
from channels.slack.constants import CHUNK_LIMIT
from tests.channels.slack.conftest import Inbox, MakeChannel, slack_config
from tests.fakes.slack import TEAM_ID, FakeSlack


def outbound(
    text: str,
    *,
    chat_id: str = "C1",
    thread_id: str | None = "1700000000.000001",
    kind: OutboundKind = "reply",
) -> OutboundMessage:
    return OutboundMessage("slack", TEAM_ID, chat_id, thread_id, text, kind=kind)


def long_markdown(lines: int) -> str:
    return "\n".join(f"{i:04d} **point** {'word ' * 12}".rstrip() for i in range(lines))


async def test_a_long_reply_is_split_on_lines_into_one_thread(
    fake_slack: FakeSlack, make_channel: MakeChannel
) -> None:
    channel, _ = await make_channel()
    message = outbound(long_markdown(400))
    sent = await channel.send(message)

    posts = fake_slack.posts
    assert len(posts) > 1
    assert sent.message_ids == tuple(p.ts for p in posts)
    assert all(len(p.text) <= CHUNK_LIMIT for p in posts)
    assert {p.thread_ts for p in posts} == {message.thread_id}
    lines = "\n".join(p.text for p in posts).split("\n")
    assert lines == [f"{i:04d} *point* {'word ' * 12}".rstrip() for i in range(400)]


async def test_channel_not_found_is_permanent_and_not_retried(
    fake_slack: FakeSlack, make_channel: MakeChannel
) -> None:
    channel, _ = await make_channel()
    for code in ("channel_not_found", "not_in_channel", "is_archived", "invalid_auth"):
        fake_slack.fail("chat.postMessage", error=code)
        with pytest.raises(ChannelSendError, match=code) as caught:
            await channel.send(outbound("hi"))
        assert caught.value.retryable is False
    assert len(fake_slack.calls_to("chat.postMessage")) == 4
    assert "xoxb" not in str(caught.value)


async def test_server_errors_are_retryable(
    fake_slack: FakeSlack, make_channel: MakeChannel
) -> None:
    channel, _ = await make_channel()
    fake_slack.fail("chat.postMessage", status=500)
    with pytest.raises(ChannelSendError) as caught:
        await channel.send(outbound("hi", kind="announce"))
    assert (caught.value.retryable, caught.value.retry_after) == (True, None)
    fake_slack.fail("chat.postMessage", error="internal_error")
    with pytest.raises(ChannelSendError) as caught:
        await channel.send(outbound("hi", kind="announce"))
    assert caught.value.retryable is True


async def test_rate_limited_announce_goes_back_to_the_outbox_with_retry_after(
    fake_slack: FakeSlack, make_channel: MakeChannel
) -> None:
    channel, _ = await make_channel()
    fake_slack.fail("chat.postMessage", status=429, retry_after=7)
    with pytest.raises(ChannelSendError) as caught:
        await channel.send(outbound("Done.", kind="announce"))
    assert (caught.value.retryable, caught.value.retry_after) == (True, 7.0)
    assert len(fake_slack.calls_to("chat.postMessage")) == 1  # waited out once, by the outbox


async def test_rate_limited_reply_waits_out_a_short_retry_after_once(
    fake_slack: FakeSlack, make_channel: MakeChannel
) -> None:
    channel, _ = await make_channel()
    fake_slack.fail("chat.postMessage", status=429, retry_after=0)
    sent = await channel.send(outbound("hello"))
    assert len(fake_slack.calls_to("chat.postMessage")) == 2
    assert sent.message_ids == (fake_slack.posts[0].ts,)

    fake_slack.fail("chat.postMessage", status=429, retry_after=0, times=2)
    with pytest.raises(ChannelSendError) as caught:
        await channel.send(outbound("again"))
    assert caught.value.retry_after == 0.0
    fake_slack.fail("chat.postMessage", status=429, retry_after=60)
    with pytest.raises(ChannelSendError) as caught:
        await channel.send(outbound("long wait"))
    assert caught.value.retry_after == 60.0
    assert len(fake_slack.calls_to("chat.postMessage")) == 5


async def test_a_retried_send_resumes_after_the_chunks_that_landed(
    fake_slack: FakeSlack, make_channel: MakeChannel
) -> None:
    channel, _ = await make_channel()
    message = outbound(long_markdown(400), kind="announce")
    fake_slack.fail("chat.postMessage", status=503, after=1)  # the second chunk fails
    with pytest.raises(ChannelSendError) as caught:
        await channel.send(message)
    assert caught.value.retryable is True
    [landed] = fake_slack.posts

    sent = await channel.send(message)  # the outbox tries the same message again
    texts = [p.text for p in fake_slack.posts]
    assert texts[0] == landed.text
    assert len(texts) >= 3
    assert len(set(texts)) == len(texts)  # no chunk posted twice
    assert sent.message_ids == tuple(p.ts for p in fake_slack.posts)
    assert "\n".join(texts).split("\n") == [
        f"{i:04d} *point* {'word ' * 12}".rstrip() for i in range(400)
    ]


async def test_connection_errors_are_retryable(fake_slack: FakeSlack) -> None:
    # HTTP mode, so no Socket Mode client is left trying to reconnect to the closed fake.
    channel = SlackChannel(slack_config(fake_slack, mode="http"))
    channel.add_routes(web.Application())
    await channel.start(Inbox())
    try:
        await fake_slack.close()
        with pytest.raises(ChannelSendError) as caught:
            await channel.send(outbound("hi"))
        assert caught.value.retryable is True
    finally:
        await channel.stop()


async def test_sending_before_start_is_retryable(fake_slack: FakeSlack) -> None:
    channel = SlackChannel(slack_config(fake_slack))
    with pytest.raises(ChannelSendError, match="not started") as caught:
        await channel.send(outbound("hi"))
    assert caught.value.retryable is True


async def test_empty_text_posts_nothing(fake_slack: FakeSlack, make_channel: MakeChannel) -> None:
    channel, _ = await make_channel()
    sent = await channel.send(outbound("  \n"))
    assert sent.message_ids == ()
    assert fake_slack.calls_to("chat.postMessage") == []
