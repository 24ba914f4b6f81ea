"""A Slack reply streamed natively never loses its final text, against the fake's real Web
API methods through slack_sdk: a stream Slack ended (its stop or append refused
``message_not_in_streaming_state``) is updated to the reply; an update refused too, or a
message gone, posts the reply once; a piece longer than one call may carry is sent in
several; a reply past one message is finished once, even when a send is tried again."""

from __future__ import annotations

import pytest

from channels import ChannelSendError
from channels.slack.format import split_text, to_mrkdwn
from channels.slack.streams import SlackStream
from tests.channels.slack.conftest import MakeChannel
from tests.channels.slack.test_streams import RECORDED, asked, bot_texts
from tests.fakes.slack import STREAM_TEXT_LIMIT, FakeSlack, stream_text

#: Twenty words; the stream shows the first eighteen before Slack ends it.
WORDS = [f"word{n:02d}" for n in range(1, 21)]
REPLY = " ".join(WORDS)
SHOWN = " ".join(WORDS[:18])


async def streamed(fake: FakeSlack, make_channel: MakeChannel, text: str) -> SlackStream:
    """A reply streamed natively in a thread, showing ``text``."""
    channel, _ = await make_channel()
    stream = channel.open_reply(asked(), RECORDED, stream=True)
    assert isinstance(stream, SlackStream)
    assert stream.mode == "native"
    stream.append(text)
    await fake.wait_for(lambda: bot_texts(fake) == [text])
    return stream


def posted(fake: FakeSlack) -> list[str]:
    return [str(call.args["text"]) for call in fake.calls_to("chat.postMessage")]


@pytest.mark.parametrize("how", ["ended", "refused"])
async def test_a_refused_stop_updates_the_streamed_message_to_the_whole_reply(
    fake_slack: FakeSlack, make_channel: MakeChannel, how: str
) -> None:
    stream = await streamed(fake_slack, make_channel, SHOWN)
    if how == "ended":
        fake_slack.end_streams()  # Slack ended it: its stop is refused as not streaming
    else:
        fake_slack.fail("chat.stopStream", error="message_not_in_streaming_state")

    sent = await stream.finish(REPLY)
    await stream.close()

    assert [c.method for c in fake_slack.calls_to("chat.stopStream")] != []
    assert bot_texts(fake_slack) == [REPLY]  # the whole reply, once, in the streamed message
    assert sent.message_ids == (stream.ts,)
    assert posted(fake_slack) == []


async def test_a_refused_append_goes_on_by_updates_of_the_same_message(
    fake_slack: FakeSlack, make_channel: MakeChannel
) -> None:
    stream = await streamed(fake_slack, make_channel, " ".join(WORDS[:10]))
    fake_slack.end_streams()

    stream.append(" " + " ".join(WORDS[10:18]))
    # The refused append hands the message to updates: the text so far shows there.
    await fake_slack.wait_for(lambda: bot_texts(fake_slack) == [SHOWN])
    assert stream.mode == "edit"
    sent = await stream.finish(REPLY)
    await stream.close()

    assert bot_texts(fake_slack) == [REPLY]
    assert sent.message_ids == (stream.ts,)
    assert posted(fake_slack) == []


@pytest.mark.parametrize("how", ["refused", "gone"])
async def test_a_message_that_cannot_be_updated_gets_the_reply_posted_once(
    fake_slack: FakeSlack, make_channel: MakeChannel, how: str
) -> None:
    stream = await streamed(fake_slack, make_channel, SHOWN)
    fake_slack.end_streams()
    if how == "refused":
        fake_slack.fail("chat.update", error="cant_update_message")
    else:  # deleted in the chat meanwhile
        fake_slack.history["C1"] = [m for m in fake_slack.history["C1"] if not m.get("bot_id")]

    sent = await stream.finish(REPLY)
    await stream.close()

    assert bot_texts(fake_slack) == [REPLY]  # the half-written message is gone
    assert posted(fake_slack) == [REPLY]
    assert sent.message_ids != (stream.ts,)


async def test_a_piece_past_slacks_limit_is_appended_in_parts_and_later_ones_still_land(
    fake_slack: FakeSlack, make_channel: MakeChannel
) -> None:
    long = " ".join(f"w{n:05d}" for n in range(4_200))  # about 29,000 characters
    stream = await streamed(fake_slack, make_channel, "Tea came")

    stream.append(" " + long)
    await fake_slack.wait_for(lambda: bot_texts(fake_slack) == [f"Tea came {long}"])
    stream.append(" The end.")
    await fake_slack.wait_for(lambda: bot_texts(fake_slack) == [f"Tea came {long} The end."])

    calls = fake_slack.calls_to("chat.appendStream") + fake_slack.calls_to("chat.startStream")
    assert max(len(stream_text(call.args)) for call in calls) <= STREAM_TEXT_LIMIT
    reply = f"Tea came {long} The end."
    sent = await stream.finish(reply)
    await stream.close()

    parts = split_text(to_mrkdwn(reply))
    assert bot_texts(fake_slack) == parts
    assert sent.message_ids[0] == stream.ts
    assert len(sent.message_ids) == len(parts)


async def test_a_long_reply_cut_off_part_way_is_finished_once_when_sent_again(
    fake_slack: FakeSlack, make_channel: MakeChannel
) -> None:
    stream = await streamed(fake_slack, make_channel, "Tea came")
    reply = "\n".join(f"Line {n} about tea and its long way to Europe." for n in range(200))
    parts = split_text(to_mrkdwn(reply))
    assert len(parts) >= 3
    fake_slack.fail("chat.postMessage", status=503, after=1)  # the third part fails once

    with pytest.raises(ChannelSendError) as failed:
        await stream.finish(reply)
    assert failed.value.retryable
    sent = await stream.finish(reply)  # as the turn tries again
    await stream.close()

    assert bot_texts(fake_slack) == parts
    assert len(sent.message_ids) == len(parts)
