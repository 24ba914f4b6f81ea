"""Reading what each chat received while no gateway connection was up.

Discord sends a bot the events it missed only when it RESUMEs a live session; a fresh
IDENTIFY (after a restart, a deploy, a crash, or a replica of a cluster taking the
connection over) starts from now. So after each READY the channel reads, over REST, each
chat's messages past the newest one it took (its :class:`~channels.cursors.ChatCursor`),
oldest first, and hands on those it would have handled live. The reach is bounded: chats
whose cursor moved within :data:`CATCHUP_MAX_AGE`, messages no older than that, and at most
:data:`CATCHUP_LIMIT` per chat (``GET /channels/{id}/messages?after=``, 100 a page).
"""

from __future__ import annotations

import datetime
import logging
from typing import Final

from channels.cursors import ChatCursor
from channels.discord._sdk import discord

log = logging.getLogger(__name__)

#: Seconds back the catch-up reaches: older messages are not answered so late.
CATCHUP_MAX_AGE: Final = 24 * 3600.0
#: Messages read at most per chat (two pages); the rest of a flood is left unanswered.
CATCHUP_LIMIT: Final = 200


async def read_missed(
    client: discord.Client, cursor: ChatCursor, now: float
) -> list[discord.Message]:
    """The messages of ``cursor``'s chat after it and no older than the bound, oldest first.

    Raises discord.py's exceptions (an unknown channel, missing access, a failed request).
    """
    since = datetime.datetime.fromtimestamp(now - CATCHUP_MAX_AGE, datetime.UTC)
    after = max(cursor.message_id, discord.utils.time_snowflake(since, high=True))
    chat_id = int(cursor.chat_id)
    target: discord.abc.Messageable
    if cursor.chat_type == "dm":
        target = client.get_partial_messageable(chat_id, type=discord.ChannelType.private)
    else:  # the cached guild channel or thread, so that a mention of the bot's role counts
        cached = client.get_channel(chat_id)
        target = (
            cached
            if isinstance(cached, discord.abc.Messageable)
            else client.get_partial_messageable(chat_id)
        )
    return [
        message
        async for message in target.history(
            limit=CATCHUP_LIMIT, after=discord.Object(id=after), oldest_first=True
        )
    ]
