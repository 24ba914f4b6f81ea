"""Turning discord.py messages into :class:`~channels.base.InboundMessage`.

Rules: DMs always reach the agent; in guild channels and threads the bot must be mentioned
when ``requireMention`` is on; the bot ignores itself, other bots, webhooks and system
messages (joins, pins, thread starts); a message with no text left (only attachments,
embeds or stickers, or only the bot's mention) is ignored. Edits never arrive here: the
channel listens to new messages only.

Chat ids: ``chat_id`` is the id of the channel the message was posted in. A Discord thread
is a channel with its own id, so a thread's messages get their own chat id, and so their own
session (``agent:<id>:discord:channel:<thread id>``); replies and announces sent to that
chat id land in the thread. ``thread_id`` is therefore always ``None`` for Discord.
For a DM, ``chat_id`` is the DM channel's id and ``sender_id`` the person's user id (the
session key uses the user id: ``agent:<id>:discord:dm:<user id>``).
"""

from __future__ import annotations

import logging
import re

from channels.base import InboundMessage
from channels.discord._sdk import discord

log = logging.getLogger(__name__)

#: Message types that people write; everything else is a system notice.
_PERSON_TYPES = frozenset({discord.MessageType.default, discord.MessageType.reply})


def _mentions_me(message: discord.Message, me: int) -> tuple[bool, set[int]]:
    """Whether ``message`` mentions the bot, and the ids of the bot's managed roles it names.

    When people pick the bot from Discord's autocomplete they sometimes get the bot's
    managed role (``<@&role>``) rather than its user; that counts as a mention too.
    """
    user_mentioned = any(user.id == me for user in message.mentions) or bool(
        re.search(rf"<@!?{me}>", message.content)
    )
    roles = {
        role.id
        for role in message.role_mentions
        if role.tags is not None and role.tags.bot_id == me
    }
    return user_mentioned or bool(roles), roles


def strip_mentions(text: str, me: int, role_ids: set[int] | frozenset[int] = frozenset()) -> str:
    """``text`` without the bot's own mentions, and without the ``,``/``:`` that addressed it.

    ``<@bot> /spawn x`` becomes ``/spawn x``, so chat commands work after a mention.
    """
    patterns = [rf"<@!?{me}>"] + [rf"<@&{role}>" for role in sorted(role_ids)]
    stripped, count = re.subn("|".join(patterns), " ", text)
    if count == 0:
        return text.strip()
    stripped = re.sub(r"^[\s,:;]+", "", stripped)
    return re.sub(r"[ \t]{2,}", " ", stripped).strip()


def is_dm(message: discord.Message) -> bool:
    """True for a direct message to the bot (never for a guild channel or thread); a
    message read back from a DM's history has a partial channel of the private type."""
    channel = message.channel
    if isinstance(channel, discord.PartialMessageable):
        return channel.type == discord.ChannelType.private
    return isinstance(channel, discord.DMChannel)


def to_inbound(
    message: discord.Message,
    *,
    me: int,
    channel_name: str,
    require_mention: bool,
) -> InboundMessage | None:
    """The :class:`InboundMessage` for ``message``, or ``None`` when the bot should ignore it.

    ``me`` is the bot's user id (from READY); it is also the inbound ``account``.
    """
    author = message.author
    if author.id == me or author.bot or message.webhook_id is not None:
        return None
    if message.type not in _PERSON_TYPES:
        log.debug("ignoring Discord system message %s of type %s", message.id, message.type)
        return None
    dm = is_dm(message)
    mentioned, bot_roles = _mentions_me(message, me)
    if not dm and require_mention and not mentioned:
        return None
    text = strip_mentions(message.content, me, bot_roles)
    if not text:
        log.debug(
            "ignoring Discord message %s without text (%d attachments, %d embeds)",
            message.id,
            len(message.attachments),
            len(message.embeds),
        )
        return None
    return InboundMessage(
        channel=channel_name,
        account=str(me),
        chat_id=str(message.channel.id),
        thread_id=None,
        sender_id=str(author.id),
        sender_name=author.display_name,
        text=text,
        chat_type="dm" if dm else "channel",
        message_id=str(message.id),
    )
