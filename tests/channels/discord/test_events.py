"""Which Discord messages reach the agent, and as what: the real client against the fake."""

from __future__ import annotations

from channels.base import InboundMessage
from channels.discord.events import strip_mentions
from tests.channels.discord.conftest import (
    ALICE,
    BOT_MENTION,
    BOT_ROLE,
    DM_CHANNEL,
    GENERAL,
    GUILD,
    OTHER_BOT,
    THREAD,
    UNCACHED_CHANNEL,
    MakeChannel,
)
from tests.fakes.discord import BOT_ID, FakeDiscord


async def test_dm_reaches_the_handler_as_a_dm(
    fake_discord: FakeDiscord, make_channel: MakeChannel
) -> None:
    running = await make_channel()
    sent = await fake_discord.post_message(channel_id=DM_CHANNEL, author=ALICE, content="hello")

    inbound = await running.next()

    assert inbound.channel == "discord"
    assert inbound.account == BOT_ID
    assert inbound.chat_type == "dm"
    assert inbound.chat_id == DM_CHANNEL
    assert inbound.thread_id is None
    assert inbound.sender_id == ALICE["id"]
    assert inbound.sender_name == "Alice"
    assert inbound.text == "hello"
    assert inbound.message_id == sent["id"]


async def test_guild_channel_needs_a_mention_which_is_stripped(
    fake_discord: FakeDiscord, make_channel: MakeChannel
) -> None:
    running = await make_channel()
    await fake_discord.post_message(
        channel_id=GENERAL, guild_id=GUILD, author=ALICE, content="just chatting"
    )
    await fake_discord.post_message(
        channel_id=GENERAL,
        guild_id=GUILD,
        author=ALICE,
        content=f"{BOT_MENTION} what is the time?",
        mentions=[fake_discord.bot],
    )

    # Messages are handed on in order, so the first to arrive shows the unmentioned one
    # was dropped.
    inbound = await running.next()

    assert inbound.text == "what is the time?"
    assert inbound.chat_type == "channel"
    assert inbound.chat_id == GENERAL


async def test_without_require_mention_every_guild_message_counts(
    fake_discord: FakeDiscord, make_channel: MakeChannel
) -> None:
    running = await make_channel(require_mention=False)
    await fake_discord.post_message(
        channel_id=GENERAL, guild_id=GUILD, author=ALICE, content="just chatting"
    )

    assert (await running.next()).text == "just chatting"


async def test_nickname_and_managed_role_mentions_count(
    fake_discord: FakeDiscord, make_channel: MakeChannel
) -> None:
    running = await make_channel()
    await fake_discord.post_message(
        channel_id=GENERAL, guild_id=GUILD, author=ALICE, content=f"<@!{BOT_ID}> one"
    )
    role_message = fake_discord.message_payload(
        channel_id=GENERAL, guild_id=GUILD, author=ALICE, content=f"<@&{BOT_ROLE}> two"
    )
    role_message["mention_roles"] = [BOT_ROLE]
    await fake_discord.dispatch("MESSAGE_CREATE", role_message)

    assert (await running.next()).text == "one"
    assert (await running.next()).text == "two"


async def test_chat_commands_survive_the_mention(
    fake_discord: FakeDiscord, make_channel: MakeChannel
) -> None:
    running = await make_channel()
    await fake_discord.post_message(
        channel_id=GENERAL,
        guild_id=GUILD,
        author=ALICE,
        content=f"{BOT_MENTION}, /spawn summarise the thread",
        mentions=[fake_discord.bot],
    )
    await fake_discord.post_message(channel_id=DM_CHANNEL, author=ALICE, content="/subagents list")

    assert (await running.next()).text == "/spawn summarise the thread"
    assert (await running.next()).text == "/subagents list"


async def test_thread_messages_get_the_thread_as_their_chat(
    fake_discord: FakeDiscord, make_channel: MakeChannel
) -> None:
    running = await make_channel(require_mention=False)
    await fake_discord.post_message(channel_id=THREAD, guild_id=GUILD, author=ALICE, content="t")
    await fake_discord.post_message(channel_id=GENERAL, guild_id=GUILD, author=ALICE, content="c")

    in_thread, in_channel = await running.next(), await running.next()

    assert (in_thread.chat_id, in_thread.thread_id) == (THREAD, None)
    assert (in_channel.chat_id, in_channel.thread_id) == (GENERAL, None)


async def test_channels_missing_from_the_cache_still_work(
    fake_discord: FakeDiscord, make_channel: MakeChannel
) -> None:
    running = await make_channel(require_mention=False)
    await fake_discord.post_message(
        channel_id=UNCACHED_CHANNEL, guild_id=GUILD, author=ALICE, content="new channel"
    )

    inbound = await running.next()

    assert (inbound.chat_id, inbound.chat_type) == (UNCACHED_CHANNEL, "channel")


async def test_the_bot_itself_and_other_bots_are_ignored(
    fake_discord: FakeDiscord, make_channel: MakeChannel
) -> None:
    running = await make_channel()
    await fake_discord.post_message(channel_id=DM_CHANNEL, author=fake_discord.bot, content="me")
    await fake_discord.post_message(channel_id=DM_CHANNEL, author=OTHER_BOT, content="beep")
    await fake_discord.post_message(channel_id=DM_CHANNEL, author=ALICE, content="a person")

    assert (await running.next()).text == "a person"


async def test_messages_without_text_are_ignored(
    fake_discord: FakeDiscord, make_channel: MakeChannel
) -> None:
    running = await make_channel()
    attachment = {
        "id": "1500000000000000001",
        "filename": "cat.png",
        "size": 10,
        "url": "https://cdn.example/cat.png",
        "proxy_url": "https://cdn.example/cat.png",
    }
    await fake_discord.post_message(
        channel_id=DM_CHANNEL, author=ALICE, content="", attachments=[attachment]
    )
    await fake_discord.post_message(
        channel_id=DM_CHANNEL, author=ALICE, content="", embeds=[{"title": "a link"}]
    )
    await fake_discord.post_message(
        channel_id=GENERAL, guild_id=GUILD, author=ALICE, content=BOT_MENTION
    )
    await fake_discord.post_message(
        channel_id=DM_CHANNEL, author=ALICE, content="with a file", attachments=[attachment]
    )

    assert (await running.next()).text == "with a file"


async def test_edits_and_system_messages_are_ignored(
    fake_discord: FakeDiscord, make_channel: MakeChannel
) -> None:
    running = await make_channel(require_mention=False)
    edited = fake_discord.message_payload(channel_id=DM_CHANNEL, author=ALICE, content="edited")
    edited["edited_timestamp"] = edited["timestamp"]
    await fake_discord.dispatch("MESSAGE_UPDATE", edited)
    # Type 7: "Alice joined the server"; type 18: a thread was started.
    await fake_discord.post_message(
        channel_id=GENERAL, guild_id=GUILD, author=ALICE, content="", message_type=7
    )
    await fake_discord.post_message(
        channel_id=GENERAL, guild_id=GUILD, author=ALICE, content="a thread", message_type=18
    )
    await fake_discord.post_message(channel_id=DM_CHANNEL, author=ALICE, content="new")

    assert (await running.next()).text == "new"


async def test_a_failing_handler_does_not_stop_later_messages(
    fake_discord: FakeDiscord, make_channel: MakeChannel
) -> None:
    running = await make_channel(start=False)
    seen: list[str] = []

    async def handler(message: InboundMessage) -> None:
        seen.append(message.text)
        if message.text == "boom":
            raise ValueError("handler bug")
        await running.inbound.put(message)

    await running.channel.start(handler)
    await fake_discord.post_message(channel_id=DM_CHANNEL, author=ALICE, content="boom")
    await fake_discord.post_message(channel_id=DM_CHANNEL, author=ALICE, content="after")

    assert (await running.next()).text == "after"
    assert seen == ["boom", "after"]


def test_strip_mentions_only_touches_the_bot() -> None:
    assert strip_mentions(f"<@{BOT_ID}>: hi <@42>", int(BOT_ID)) == "hi <@42>"
    assert strip_mentions(f"thanks <@!{BOT_ID}>", int(BOT_ID)) == "thanks"
    assert strip_mentions("  no mention: here ", int(BOT_ID)) == "no mention: here"
    assert strip_mentions("<@&7> hi", int(BOT_ID), {7}) == "hi"
