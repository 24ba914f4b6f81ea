"""After a fresh gateway session the channel reads what its chats received while it was
away: Discord replays nothing to a new IDENTIFY. Two channels one after the other stand for
a gateway stopped and started again; they share the cursors and seen keys that the state
database keeps for a real gateway."""

from __future__ import annotations

import time

from channels.cursors import ChatCursor, MemoryCursors
from channels.discord.catchup import CATCHUP_LIMIT, CATCHUP_MAX_AGE
from channels.replay import MemorySeenKeys
from tests.channels.discord.conftest import (
    ALICE,
    BOT_MENTION,
    DM_CHANNEL,
    GENERAL,
    GUILD,
    OTHER_BOT,
    MakeChannel,
    Running,
)
from tests.fakes.discord import BOT_ID, FakeDiscord


def snowflake(at: float) -> int:
    return (int(at * 1000) - 1_420_070_400_000) << 22


async def marker(fake: FakeDiscord, running: Running) -> None:
    """A live message: what arrives before it was handed on before it."""
    await fake.post_message(channel_id=DM_CHANNEL, author=ALICE, content="live marker")
    assert (await running.next()).text == "live marker"


async def test_messages_sent_while_stopped_are_handed_on_once_after_ready(
    fake_discord: FakeDiscord, make_channel: MakeChannel
) -> None:
    cursors, seen = MemoryCursors(), MemorySeenKeys(1000)
    first = await make_channel(cursors=cursors, seen=seen)
    await fake_discord.post_message(channel_id=DM_CHANNEL, author=ALICE, content="hello")
    await fake_discord.post_message(
        channel_id=GENERAL, guild_id=GUILD, author=ALICE, content=f"{BOT_MENTION} hi there"
    )
    assert [(await first.next()).text for _ in range(2)] == ["hello", "hi there"]
    await first.channel.stop()

    fake_discord.store_message(
        channel_id=GENERAL, guild_id=GUILD, author=ALICE, content="not for the bot"
    )
    fake_discord.store_message(
        channel_id=GENERAL, guild_id=GUILD, author=OTHER_BOT, content=f"{BOT_MENTION} x"
    )
    fake_discord.store_message(
        channel_id=GENERAL, guild_id=GUILD, author=ALICE, content=f"{BOT_MENTION} missed"
    )
    fake_discord.store_message(channel_id=DM_CHANNEL, author=ALICE, content="while down")
    fake_discord.store_message(channel_id=DM_CHANNEL, author=ALICE, content="and this")
    second = await make_channel(cursors=cursors, seen=seen)

    caught = [await second.next() for _ in range(3)]
    assert [(m.chat_id, m.text, m.chat_type) for m in caught] == [
        (GENERAL, "missed", "channel"),
        (DM_CHANNEL, "while down", "dm"),
        (DM_CHANNEL, "and this", "dm"),
    ]
    assert caught[0].account == BOT_ID
    await marker(fake_discord, second)  # "hello" and "hi there" did not come again


async def test_a_long_absence_is_read_page_by_page_up_to_the_limit(
    fake_discord: FakeDiscord, make_channel: MakeChannel
) -> None:
    cursors = MemoryCursors()
    first = await make_channel(cursors=cursors)
    await fake_discord.post_message(channel_id=DM_CHANNEL, author=ALICE, content="hello")
    await first.next()
    await first.channel.stop()
    for n in range(CATCHUP_LIMIT + 5):
        fake_discord.store_message(channel_id=DM_CHANNEL, author=ALICE, content=f"m{n}")

    second = await make_channel(cursors=cursors)

    texts = [(await second.next()).text for _ in range(CATCHUP_LIMIT)]
    assert texts == [f"m{n}" for n in range(CATCHUP_LIMIT)]
    assert len(fake_discord.requests_to("GET", f"/channels/{DM_CHANNEL}/messages")) > 1
    await marker(fake_discord, second)


async def test_messages_older_than_the_bound_are_not_answered(
    fake_discord: FakeDiscord, make_channel: MakeChannel
) -> None:
    cursors = MemoryCursors()
    now = time.time()
    await cursors.advance(
        ChatCursor("discord", BOT_ID, GENERAL, "channel", snowflake(now - 2 * CATCHUP_MAX_AGE))
    )
    fake_discord.store_message(
        at=now - CATCHUP_MAX_AGE - 3600,
        channel_id=GENERAL,
        guild_id=GUILD,
        author=ALICE,
        content=f"{BOT_MENTION} stale",
    )
    fake_discord.store_message(
        at=now - 3600,
        channel_id=GENERAL,
        guild_id=GUILD,
        author=ALICE,
        content=f"{BOT_MENTION} recent",
    )

    running = await make_channel(cursors=cursors)

    assert (await running.next()).text == "recent"
    await marker(fake_discord, running)


async def test_a_message_handed_on_before_is_dropped_when_read_again(
    fake_discord: FakeDiscord, make_channel: MakeChannel
) -> None:
    # A gateway killed after its handler took a message but before its cursor moved.
    seen = MemorySeenKeys(1000)
    first = await make_channel(seen=seen)
    posted = await fake_discord.post_message(channel_id=DM_CHANNEL, author=ALICE, content="once")
    assert (await first.next()).text == "once"
    await first.channel.stop()
    behind = MemoryCursors()
    await behind.advance(ChatCursor("discord", BOT_ID, DM_CHANNEL, "dm", int(posted["id"]) - 1))

    second = await make_channel(seen=seen, cursors=behind)

    await marker(fake_discord, second)
    assert len(fake_discord.requests_to("GET", f"/channels/{DM_CHANNEL}/messages")) == 1
