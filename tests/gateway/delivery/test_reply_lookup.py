"""A turn's reply posted just before a crash is found in the chat by the next process.

The reply to a recorded message (here posted whole by the reply object a turn opens)
carries that message's id (Slack metadata, a Discord nonce and its content, a web chat
message id), so :meth:`Replier.delivered` in a new process, with a fresh channel that
remembers nothing, can tell whether it is there before the reply is posted again. The real
channels run against the wire fakes.
"""

from __future__ import annotations

import time
from pathlib import Path

from channels import Channel, InboundMessage
from gateway.delivery import Replier
from gateway.state import Origin
from tests.fakes.discord import FakeDiscord
from tests.fakes.slack import FakeSlack
from tests.gateway.delivery.test_exactly_once import (
    CLIENT,
    GENERAL,
    discord_channel,
    fake_discord,
    fake_slack,
    slack_channel,
    webchat_channel,
)

__all__ = ["fake_discord", "fake_slack"]  # fixtures used by name

ANSWER = "the tide turns at six"


async def reply_then_look(
    name: str, origin: Origin, first: Channel, second: Channel
) -> tuple[bool, bool, bool]:
    """Post the reply to message ``in-1`` with ``first``; ask with ``second`` (a new process)
    whether the replies to ``in-1``, ``in-2`` and an untraced copy are in the chat."""
    since = time.time()
    asked = InboundMessage(
        origin.channel, origin.account, origin.chat_id, origin.thread_id, "u1", "?"
    )
    await first.open_reply(asked, "in-1").finish(ANSWER)
    asking = Replier({name: second})
    return (
        await asking.delivered(origin, ANSWER, "in-1", since),
        await asking.delivered(origin, ANSWER, "in-2", since),
        await asking.delivered(origin, "another answer", "in-1", since),
    )


async def test_slack_finds_the_reply_by_its_metadata_in_its_thread(fake_slack: FakeSlack) -> None:
    question = fake_slack.message("when does the tide turn?", channel="C1")
    first = await slack_channel(fake_slack)
    await fake_slack.push_event(question)  # the thread the reply goes to
    second = await slack_channel(fake_slack)
    origin = Origin("slack", "default", "C1", thread_id=question["ts"])
    try:
        found = await reply_then_look("slack", origin, first, second)
    finally:
        await first.stop()
        await second.stop()
    # The reply to another message is not this one, even with the same words; a reply to
    # the same message is identified by the message, not by its words.
    assert found == (True, False, True)
    (post,) = fake_slack.posts
    assert post.thread_ts == question["ts"]
    assert post.metadata is not None
    assert post.metadata["event_payload"]["reply_to"] == "in-1"


async def test_discord_finds_the_reply_by_its_content(fake_discord: FakeDiscord) -> None:
    origin = Origin("discord", "default", GENERAL)
    first, second = await discord_channel(fake_discord), await discord_channel(fake_discord)
    try:
        found = await reply_then_look("discord", origin, first, second)
    finally:
        await first.stop()
        await second.stop()
    # Discord's history has no nonces: the bot's own message with the same parts counts.
    assert found == (True, True, False)


async def test_webchat_finds_the_reply_by_its_message_id(tmp_path: Path) -> None:
    origin = Origin("webchat", "default", CLIENT)
    first, second = webchat_channel(tmp_path), webchat_channel(tmp_path)
    found = await reply_then_look("webchat", origin, first, second)
    assert found == (True, False, True)
