"""Finding an announce in its Discord channel after a crash cut its send off.

Two safeguards work together. Each part of an outbox item is posted with a ``nonce`` made
from the item (:meth:`OutboundMessage.delivery_token`) and ``enforce_nonce``: for a few
minutes Discord answers a repeated nonce from the same bot with the message it already
created instead of a second one, so a resend soon after a crash is idempotent by itself.
Past that window only the channel can say: :func:`find_parts` reads the channel's messages
since shortly before the first attempt (``GET /channels/{id}/messages?after=``; Discord
does not return nonces there) and matches the bot's own messages by their exact content,
part by part, in order.
"""

from __future__ import annotations

import datetime
import logging

from channels.base import DeliveryLookup, OutboundMessage
from channels.discord._sdk import discord
from channels.discord.errors import send_error

log = logging.getLogger(__name__)

#: Messages read at most when looking: a busy channel since the attempt began; beyond this
#: the lookup answers "cannot tell" rather than read on.
LOOKUP_LIMIT = 1_000
#: Seconds before the first attempt that the search starts: Discord's clock and the
#: gateway's may differ a little.
LOOKUP_CLOCK_SKEW = 60.0


async def find_parts(
    target: discord.PartialMessageable, bot_id: int, parts: list[str], since: float
) -> tuple[list[str], bool]:
    """The ids of the leading parts found (in order) and whether the window was read whole.

    Raises discord.py's exceptions; :func:`lookup` classifies them.
    """
    start = datetime.datetime.fromtimestamp(max(0.0, since - LOOKUP_CLOCK_SKEW), datetime.UTC)
    found: list[str] = []
    read = 0
    async for posted in target.history(limit=LOOKUP_LIMIT, after=start, oldest_first=True):
        read += 1
        if len(found) == len(parts):
            break
        # Discord trims the content it stores; the parts are compared the same way.
        if posted.author.id == bot_id and posted.content.strip() == parts[len(found)].strip():
            found.append(str(posted.id))
    return found, read < LOOKUP_LIMIT or len(found) == len(parts)


async def lookup(
    target: discord.PartialMessageable,
    bot_id: int,
    parts: list[str],
    message: OutboundMessage,
    since: float,
) -> tuple[DeliveryLookup, list[str]]:
    """Whether every part of ``message`` is in the channel, and the leading parts' ids (to
    be skipped by the resend). Retryable failures raise :class:`ChannelSendError`."""
    try:
        found, complete = await find_parts(target, bot_id, parts, since)
    except Exception as exc:
        error = send_error(exc)
        if error is None:
            raise
        if error.retryable:
            raise error from exc
        return DeliveryLookup("unknown", detail=str(error)), []
    if parts and len(found) == len(parts):
        return DeliveryLookup("found", tuple(found)), found
    if not complete:
        return DeliveryLookup("unknown", detail="discord lookup: history too long to search"), []
    log.info(
        "discord: cut-off announce not in the chat",
        extra={"chat": message.chat_id, "parts_found": len(found), "parts": len(parts)},
    )
    return DeliveryLookup("not_found"), found
