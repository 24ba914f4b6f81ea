"""Plain replies and a turn's reply posted whole: a few quick tries for transient failures,
then a logged give-up that never raises into the turn that produced the reply."""

from __future__ import annotations

import logging

import pytest

from channels import ChannelSendError, OutboundMessage, SentMessage
from channels.memory import MemoryChannel
from gateway.delivery import Replier, TurnReply, send_reply
from gateway.state import Origin

#: Test timing: retries are quick (the backoff itself is tested in test_backoff).
QUICK = 0.001
ORIGIN = Origin(channel="memory", account="default", chat_id="c9", thread_id="t1")


class CountingChannel(MemoryChannel):
    """The in-memory channel, counting every send tried."""

    tries = 0

    async def send(self, message: OutboundMessage) -> SentMessage:
        self.tries += 1
        return await super().send(message)


def reply_to(chat_id: str = "c9") -> OutboundMessage:
    return OutboundMessage(
        channel="memory", account="default", chat_id=chat_id, thread_id=None, text="hi"
    )


async def test_transient_failures_are_retried_until_the_reply_goes_through() -> None:
    channel = MemoryChannel()
    channel.fail_next(
        [
            ChannelSendError("HTTP 502", retryable=True),
            ChannelSendError("slow down", retryable=True, retry_after=QUICK),
        ]
    )
    sent = await send_reply(channel, reply_to(), base_delay=QUICK)
    assert sent.chat_id == "c9"
    assert [m.text for m in channel.sent] == ["hi"]


async def test_the_last_transient_failure_is_raised_after_the_set_attempts() -> None:
    channel = CountingChannel()
    channel.fail_next(ChannelSendError(f"HTTP 503 ({n})", retryable=True) for n in range(1, 6))
    with pytest.raises(ChannelSendError, match=r"HTTP 503 \(3\)"):
        await send_reply(channel, reply_to(), attempts=3, base_delay=QUICK)
    assert channel.tries == 3


async def test_a_permanent_failure_is_raised_at_once() -> None:
    channel = CountingChannel()
    channel.vanished.add("c9")
    with pytest.raises(ChannelSendError, match="chat c9 not found"):
        await send_reply(channel, reply_to(), base_delay=QUICK)
    assert channel.tries == 1


async def test_replier_sends_to_the_origins_chat_and_thread_with_its_kind() -> None:
    channel = MemoryChannel()
    replier = Replier({"memory": channel})
    assert await replier.reply(ORIGIN, "Stopped.", "notice") is True
    (message,) = channel.sent
    assert (message.channel, message.account, message.chat_id, message.thread_id) == (
        "memory",
        "default",
        "c9",
        "t1",
    )
    assert (message.text, message.kind) == ("Stopped.", "notice")
    assert await replier.reply(ORIGIN, "an answer") is True
    assert channel.sent[-1].kind == "reply"


async def test_replier_reports_an_undeliverable_reply_instead_of_raising(
    caplog: pytest.LogCaptureFixture,
) -> None:
    channel = MemoryChannel()
    channel.vanished.add("c9")
    replier = Replier({"memory": channel})
    with caplog.at_level(logging.ERROR, logger="gateway.delivery.replies"):
        assert await replier.reply(ORIGIN, "lost") is False
    assert [r.getMessage() for r in caplog.records] == ["reply not delivered"]
    assert caplog.records[0].__dict__["chat_id"] == "c9"
    assert channel.sent == []


async def test_replier_without_the_origins_channel_sends_nothing() -> None:
    channel = MemoryChannel()
    replier = Replier({"memory": channel})
    elsewhere = Origin(channel="slack", account="T1", chat_id="C1")
    assert await replier.reply(elsewhere, "hello") is False
    assert channel.sent == []


async def test_a_turns_reply_on_a_chat_that_does_not_stream_is_posted_whole_once() -> None:
    """The memory chat shows nothing as it is written: the turn's reply has no listener
    (its model calls need not stream) and its final text is posted whole, with the recorded
    message it answers, a transient failure tried again."""
    channel = CountingChannel()
    asked = channel.inbound("tea?", chat_id="c9", thread_id="t1")
    reply = TurnReply(channel.open_reply(asked, "inbound-row-3", stream=True), base_delay=QUICK)
    assert reply.listener is None
    reply.text("shown nowhere")
    channel.fail_next([ChannelSendError("HTTP 502", retryable=True)])

    assert await reply.finish("the answer")
    await reply.close()

    [sent] = channel.sent
    assert (sent.chat_id, sent.thread_id, sent.text) == ("c9", "t1", "the answer")
    assert (sent.kind, sent.reply_to) == ("reply", "inbound-row-3")
    assert channel.tries == 2


async def test_a_turns_reply_that_cannot_be_delivered_is_logged_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    channel = MemoryChannel()
    channel.vanished.add("c9")
    reply = TurnReply(channel.open_reply(channel.inbound("tea?", chat_id="c9")))
    with caplog.at_level(logging.ERROR, logger="gateway.delivery.replies"):
        assert await reply.finish("lost") is False
    assert [r.getMessage() for r in caplog.records] == ["reply not delivered"]
    assert caplog.records[0].__dict__["chat_id"] == "c9"
