"""Slack replies shown as they are written, against the fake's real Web API methods:
native streaming in threads (``chat.startStream``/``appendStream``/``stopStream``), edits
where Slack refuses it (``auto``) and outside threads, at most one update a second, and the
final reply made from the streamed message (no second one), by the reply object the turn holds."""

from __future__ import annotations

import itertools

from channels import StreamedMessage
from channels.base import InboundMessage
from channels.slack.streams import UPDATE_INTERVAL, SlackStream
from tests.channels.recording import Recorded
from tests.channels.slack.conftest import MakeChannel
from tests.fakes.slack import FakeSlack

RECORDED = "inbound-row-7"
THREAD = "1700000000.000100"


def asked(channel: str = "C1", thread: str | None = THREAD) -> InboundMessage:
    return InboundMessage(
        channel="slack",
        account="T0FAKE",
        chat_id=channel,
        thread_id=thread,
        sender_id="U0ALICE",
        text="tell me",
        message_id=THREAD,
    )


def bot_texts(fake: FakeSlack, channel: str = "C1") -> list[str]:
    return [str(m["text"]) for m in fake.history.get(channel, []) if m.get("bot_id")]


def spaced(fake: FakeSlack) -> bool:
    times = [at for at, *_ in fake.updates]
    return all(b - a >= UPDATE_INTERVAL for a, b in itertools.pairwise(times))


async def test_native_stream_in_a_thread_then_the_final_reply(
    fake_slack: FakeSlack, make_channel: MakeChannel
) -> None:
    channel, _ = await make_channel()
    stream = channel.open_reply(asked(), RECORDED, stream=True)
    assert isinstance(stream, SlackStream)
    assert stream.mode == "native"

    stream.append("Tea came")
    await fake_slack.wait_for(lambda: bot_texts(fake_slack) == ["Tea came"])
    stream.append(" to Europe.")
    await fake_slack.wait_for(lambda: bot_texts(fake_slack) == ["Tea came to Europe."])
    sent = await stream.finish("Tea came to Europe.")
    await stream.close()

    starts = [c for c in fake_slack.calls if c.method == "chat.startStream"]
    assert len(starts) == 1
    assert starts[0].args["thread_ts"] == THREAD
    assert (starts[0].args["recipient_user_id"], starts[0].args["recipient_team_id"]) == (
        "U0ALICE",
        "T0FAKE",
    )
    assert fake_slack.open_streams == {}  # stopped
    assert bot_texts(fake_slack) == ["Tea came to Europe."]
    assert sent.message_ids == (stream.ts,)
    assert not any(c.method == "chat.postMessage" for c in fake_slack.calls)
    assert spaced(fake_slack)


async def test_auto_falls_back_to_edits_when_slack_refuses_native(
    fake_slack: FakeSlack, make_channel: MakeChannel
) -> None:
    fake_slack.refuse_streaming = "unknown_method"
    channel, _ = await make_channel()
    stream = channel.open_reply(asked(), RECORDED, stream=True)
    assert isinstance(stream, SlackStream)

    stream.append("Using web_fetch…")
    await fake_slack.wait_for(lambda: bot_texts(fake_slack) == ["Using web_fetch…"])
    assert stream.mode == "edit"
    stream.replace("The answer, longer")
    await fake_slack.wait_for(lambda: bot_texts(fake_slack) == ["The answer, longer"])
    await stream.finish("The answer.")
    await stream.close()

    assert bot_texts(fake_slack) == ["The answer."]
    assert len([c for c in fake_slack.calls if c.method == "chat.postMessage"]) == 1
    assert spaced(fake_slack)
    # Refused once: the next reply goes straight to edits.
    again = channel.open_reply(asked(), "inbound-row-8", stream=True)
    assert isinstance(again, SlackStream)
    assert again.mode == "edit"
    await again.close()


async def test_native_setting_outside_a_thread_posts_whole(
    fake_slack: FakeSlack, make_channel: MakeChannel
) -> None:
    channel, _ = await make_channel(streaming="native")
    assert not channel.open_reply(asked(thread=None), RECORDED, stream=True).streams
    edit, _ = await make_channel(streaming="edit")
    stream = edit.open_reply(asked(thread=None), RECORDED, stream=True)
    assert isinstance(stream, SlackStream)
    assert stream.mode == "edit"
    await stream.close()


async def test_a_turn_that_showed_nothing_posts_its_reply_as_usual(
    fake_slack: FakeSlack, make_channel: MakeChannel
) -> None:
    channel, _ = await make_channel()
    stream = channel.open_reply(asked(), RECORDED, stream=True)
    assert stream.streams
    sent = await stream.finish("Whole.")
    await stream.close()
    assert bot_texts(fake_slack) == ["Whole."]
    assert len(sent.message_ids) == 1


async def test_streaming_off_posts_the_reply_whole(
    fake_slack: FakeSlack, make_channel: MakeChannel
) -> None:
    channel, _ = await make_channel(streaming="off")
    posted = channel.open_reply(asked(), RECORDED, stream=True)
    assert not posted.streams
    posted.append("not shown")
    sent = await posted.finish("Whole.")
    await posted.close()

    assert bot_texts(fake_slack) == ["Whole."]
    assert [c.method for c in fake_slack.calls if c.method.startswith("chat.")] == [
        "chat.postMessage"
    ]
    assert len(sent.message_ids) == 1


async def test_a_turn_ended_without_a_reply_takes_back_what_it_showed(
    fake_slack: FakeSlack, make_channel: MakeChannel
) -> None:
    channel, _ = await make_channel(streaming="edit")
    stream = channel.open_reply(asked(), RECORDED, stream=True)
    assert stream.streams
    stream.replace("Using sessions_spawn…")
    await fake_slack.wait_for(lambda: bot_texts(fake_slack) == ["Using sessions_spawn…"])
    await stream.close()

    assert bot_texts(fake_slack) == []
    assert any(c.method == "chat.delete" for c in fake_slack.calls)


async def test_a_rerun_edits_the_native_stream_recorded_at_its_first_post(
    fake_slack: FakeSlack, make_channel: MakeChannel
) -> None:
    first, _ = await make_channel()
    recorded = Recorded()
    stream = first.open_reply(asked(), RECORDED, stream=True, record=recorded)
    assert isinstance(stream, SlackStream)
    stream.append("Tea came")
    shown = await recorded.wait(1)
    assert shown == StreamedMessage("C1", THREAD, (stream.ts or "",))
    # The process dies here, its native stream still open; the next one runs the turn
    # again with what was recorded.

    second, _ = await make_channel()
    again = second.open_reply(asked(), RECORDED, stream=True, earlier=shown)
    assert isinstance(again, SlackStream)
    sent = await again.finish("Tea reached Europe.")
    await again.close()

    assert bot_texts(fake_slack) == ["Tea reached Europe."]
    assert sent.message_ids == shown.message_ids
    assert fake_slack.open_streams == {}  # the dead process's stream was ended
    assert len(fake_slack.calls_to("chat.startStream")) == 1
    assert not fake_slack.calls_to("chat.postMessage")


async def streamed_then_deleted(
    fake_slack: FakeSlack, make_channel: MakeChannel
) -> StreamedMessage:
    """What a first run's edited stream recorded, its message deleted in the chat since."""
    first, _ = await make_channel(streaming="edit")
    recorded = Recorded()
    stream = first.open_reply(asked(), RECORDED, stream=True, record=recorded)
    assert stream.streams
    stream.append("Tea came")
    shown = await recorded.wait(1)
    fake_slack.history["C1"] = [m for m in fake_slack.history["C1"] if not m.get("bot_id")]
    return shown


async def test_a_rerun_whose_message_was_deleted_posts_a_new_one(
    fake_slack: FakeSlack, make_channel: MakeChannel
) -> None:
    shown = await streamed_then_deleted(fake_slack, make_channel)

    second, _ = await make_channel(streaming="edit")
    again_recorded = Recorded()
    again = second.open_reply(asked(), RECORDED, stream=True, earlier=shown, record=again_recorded)
    assert again.streams
    again.append("Tea reached")
    new = await again_recorded.wait(1)
    sent = await again.finish("Tea reached Europe.")
    await again.close()

    assert bot_texts(fake_slack) == ["Tea reached Europe."]
    assert new.message_ids != shown.message_ids
    assert sent.message_ids == new.message_ids


async def test_a_rerun_that_shows_nothing_still_makes_the_recorded_message_its_reply(
    fake_slack: FakeSlack, make_channel: MakeChannel
) -> None:
    shown = await streamed_then_deleted(fake_slack, make_channel)

    second, _ = await make_channel(streaming="edit")
    again = second.open_reply(asked(), RECORDED, stream=True, earlier=shown)
    assert again.streams
    await again.finish("Tea reached Europe.")  # the reply the transcript held
    await again.close()

    assert bot_texts(fake_slack) == ["Tea reached Europe."]
