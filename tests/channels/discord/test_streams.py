"""Discord replies shown as they are written, against the fake's real REST routes: one
message posted, edited at most once a second as it grows, continued past 2,000 characters,
and made the final reply by the reply object the turn holds (no second message)."""

from __future__ import annotations

import itertools

from channels.discord.streams import EDIT_INTERVAL, DiscordStream
from tests.channels.discord.conftest import GENERAL, MakeChannel
from tests.channels.discord.test_channel import inbound_in
from tests.channels.recording import Recorded
from tests.fakes.discord import FakeDiscord

RECORDED = "inbound-row-42"


def contents(fake: FakeDiscord) -> list[str]:
    return [str(m["content"]) for m in fake.messages.get(GENERAL, [])]


async def test_one_message_grows_by_edits_then_becomes_the_final_reply(
    fake_discord: FakeDiscord, make_channel: MakeChannel
) -> None:
    running = await make_channel()
    stream = running.channel.open_reply(inbound_in(GENERAL), RECORDED, stream=True)
    assert isinstance(stream, DiscordStream)

    stream.append("Tea came")
    await fake_discord.wait_until(lambda: contents(fake_discord) == ["Tea came"])
    for word in (" to", " Europe", " in", " the", " 1600s."):
        stream.append(word)
    await fake_discord.wait_until(
        lambda: contents(fake_discord) == ["Tea came to Europe in the 1600s."]
    )
    stream.replace("Using web_fetch…")
    await fake_discord.wait_until(lambda: contents(fake_discord) == ["Using web_fetch…"])

    sent = await stream.finish("Tea came to Europe in the 1600s.")
    await stream.close()

    assert contents(fake_discord) == ["Tea came to Europe in the 1600s."]
    assert len(fake_discord.posted[GENERAL]) == 1  # one reply: posted once, then edited
    assert sent.message_ids == (fake_discord.messages[GENERAL][0]["id"],)
    times = [at for at, *_ in fake_discord.edits]
    assert len(times) >= 2
    # Never more than one update a second: each edit came an interval after the last.
    assert all(later - earlier >= EDIT_INTERVAL for earlier, later in itertools.pairwise(times))


async def test_text_past_2000_characters_continues_in_a_new_message(
    fake_discord: FakeDiscord, make_channel: MakeChannel
) -> None:
    running = await make_channel()
    stream = running.channel.open_reply(inbound_in(GENERAL), RECORDED, stream=True)
    assert stream.streams
    line = "x" * 99 + "\n"
    stream.append(line * 25)  # 2,500 characters: two messages
    await fake_discord.wait_until(lambda: len(contents(fake_discord)) == 2)

    # The final reply is short: it fits the first message, the second one goes.
    sent = await stream.finish("Short after all.")
    await stream.close()

    assert contents(fake_discord) == ["Short after all."]
    assert len(fake_discord.deleted_messages[GENERAL]) == 1
    assert len(sent.message_ids) == 1


async def test_a_reply_that_showed_nothing_is_posted_as_before(
    fake_discord: FakeDiscord, make_channel: MakeChannel
) -> None:
    running = await make_channel()
    stream = running.channel.open_reply(inbound_in(GENERAL), RECORDED, stream=True)
    assert stream.streams

    await stream.finish("Whole.")  # the turn showed nothing before its reply
    await stream.close()

    assert contents(fake_discord) == ["Whole."]
    assert fake_discord.edits == []


async def test_streaming_off_opens_a_reply_posted_whole(
    fake_discord: FakeDiscord, make_channel: MakeChannel
) -> None:
    running = await make_channel(streaming="off")
    posted = running.channel.open_reply(inbound_in(GENERAL), RECORDED, stream=True)
    assert not posted.streams
    posted.append("not shown")
    await posted.finish("Whole.")
    await posted.close()

    assert contents(fake_discord) == ["Whole."]
    assert len(fake_discord.posted[GENERAL]) == 1


async def test_a_turn_ended_without_a_reply_takes_back_what_it_showed(
    fake_discord: FakeDiscord, make_channel: MakeChannel
) -> None:
    running = await make_channel()
    stream = running.channel.open_reply(inbound_in(GENERAL), RECORDED, stream=True)
    assert stream.streams
    stream.replace("Using sessions_spawn, sessions_yield…")
    await fake_discord.wait_until(lambda: len(contents(fake_discord)) == 1)
    await stream.close()  # the turn yielded with nothing to say

    assert contents(fake_discord) == []
    assert len(fake_discord.deleted_messages[GENERAL]) == 1


async def test_a_rerun_edits_the_message_recorded_at_its_first_post(
    fake_discord: FakeDiscord, make_channel: MakeChannel
) -> None:
    fake_discord.nonce_window = 0.0  # the nonce finds nothing: only the record can
    first, recorded = await make_channel(), Recorded()
    stream = first.channel.open_reply(inbound_in(GENERAL), RECORDED, stream=True, record=recorded)
    assert stream.streams
    stream.append("Tea came")
    shown = await recorded.wait(1)
    assert shown.message_ids == (fake_discord.messages[GENERAL][0]["id"],)
    # The process dies here; the next one runs the turn again with what was recorded.

    second = await make_channel()
    again = second.channel.open_reply(inbound_in(GENERAL), RECORDED, stream=True, earlier=shown)
    assert again.streams
    sent = await again.finish("Tea reached Europe.")
    await again.close()

    assert contents(fake_discord) == ["Tea reached Europe."]
    assert len(fake_discord.posted[GENERAL]) == 1
    assert sent.message_ids == shown.message_ids


async def test_a_rerun_whose_message_was_deleted_posts_a_new_one(
    fake_discord: FakeDiscord, make_channel: MakeChannel
) -> None:
    first, recorded = await make_channel(), Recorded()
    stream = first.channel.open_reply(inbound_in(GENERAL), RECORDED, stream=True, record=recorded)
    assert stream.streams
    stream.append("Tea came")
    await recorded.wait(1)
    fake_discord.messages[GENERAL].clear()  # someone deleted it meanwhile

    second, again_recorded = await make_channel(), Recorded()
    again = second.channel.open_reply(
        inbound_in(GENERAL), RECORDED, stream=True, earlier=recorded.shown[0], record=again_recorded
    )
    assert again.streams
    await again.finish("Tea reached Europe.")
    await again.close()

    assert contents(fake_discord) == ["Tea reached Europe."]
    new_id = fake_discord.messages[GENERAL][0]["id"]
    assert [s.message_ids for s in again_recorded.shown] == [(new_id,)]


async def test_a_rerun_whose_reply_was_sent_before_the_crash_leaves_it(
    fake_discord: FakeDiscord, make_channel: MakeChannel
) -> None:
    first, recorded = await make_channel(), Recorded()
    stream = first.channel.open_reply(inbound_in(GENERAL), RECORDED, stream=True, record=recorded)
    assert stream.streams
    stream.append("Tea came to Europe.")
    shown = await recorded.wait(1)
    # The process sent the reply (this text), then died before the turn was over.

    second = await make_channel()
    again = second.channel.open_reply(inbound_in(GENERAL), RECORDED, stream=True, earlier=shown)
    assert again.streams
    again.keep()  # the re-run found its reply in the chat
    await again.close()

    assert contents(fake_discord) == ["Tea came to Europe."]
