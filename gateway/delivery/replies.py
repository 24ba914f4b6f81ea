"""Plain replies to a chat: not durable (a person is waiting), so a few quick tries only.

Announces go through the durable :class:`gateway.delivery.outbox.Outbox`; a chat turn's
reply goes to the reply object the turn opened (:class:`gateway.delivery.TurnReply`); a
command's answer, a "Stopped." notice and the answer of a turn with no message to reply to
go through :class:`Replier`, which resolves the origin's channel. Both retry transient
failures with the shared backoff (:func:`retried`) and log what could not be delivered
instead of raising into the turn that produced it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping

from channels import Channel, ChannelSendError, OutboundKind, OutboundMessage, SentMessage
from gateway.backoff import backoff
from gateway.state import Origin

logger = logging.getLogger(__name__)

REPLY_ATTEMPTS = 3
REPLY_BASE_DELAY = 0.5
#: A person is waiting: never sleep longer than this between tries, whatever the chat says.
REPLY_MAX_DELAY = 10.0


async def send_reply(
    channel: Channel,
    message: OutboundMessage,
    *,
    attempts: int = REPLY_ATTEMPTS,
    base_delay: float = REPLY_BASE_DELAY,
) -> SentMessage:
    """Send a reply, retrying transient failures a few times; raises the last error."""
    return await retried(lambda: channel.send(message), attempts=attempts, base_delay=base_delay)


async def retried(
    send: Callable[[], Awaitable[SentMessage]],
    *,
    attempts: int = REPLY_ATTEMPTS,
    base_delay: float = REPLY_BASE_DELAY,
) -> SentMessage:
    """``send()``, called again after a transient failure a few times (a person is waiting:
    never longer than :data:`REPLY_MAX_DELAY` between tries); raises the last error."""
    attempt = 1
    while True:
        try:
            return await send()
        except ChannelSendError as exc:
            if not exc.retryable or attempt >= attempts:
                raise
            wait = exc.retry_after or backoff(attempt, base=base_delay, cap=REPLY_MAX_DELAY)
            await asyncio.sleep(min(REPLY_MAX_DELAY, wait))
            attempt += 1


class Replier:
    """Sends replies to an origin through the gateway's live channels."""

    def __init__(self, channels: Mapping[str, Channel]) -> None:
        self._channels = channels

    def __repr__(self) -> str:
        return f"<Replier channels={sorted(self._channels)}>"

    async def reply(
        self,
        origin: Origin,
        text: str,
        kind: OutboundKind = "reply",
    ) -> bool:
        """Send ``text`` to ``origin``'s chat and thread; False when it could not be sent."""
        channel = self._channels.get(origin.channel)
        if channel is None:
            logger.info("no channel for reply", extra={"channel": origin.channel})
            return False
        message = _message(origin, text, kind, None)
        try:
            await send_reply(channel, message)
        except ChannelSendError as exc:
            not_delivered(message, exc)
            return False
        return True

    async def delivered(self, origin: Origin, text: str, reply_to: str, since: float) -> bool:
        """Whether the reply ``text`` to recorded message ``reply_to`` is in the chat already
        (posted by a process that died before it could record so). A chat that cannot tell
        counts as delivered, as for announces: a person must not get the same answer twice.
        A failed lookup counts as not delivered: better twice than never."""
        channel = self._channels.get(origin.channel)
        if channel is None:
            return False
        message = _message(origin, text, "reply", reply_to)
        try:
            lookup = await channel.find_delivered(message, since)
        except ChannelSendError as exc:
            logger.warning(
                "reply lookup failed; posting it",
                extra={"channel": origin.channel, "error": str(exc)},
            )
            return False
        if lookup.outcome == "unknown":
            logger.warning(
                "reply may be in the chat already; not posted again",
                extra={"channel": origin.channel, "detail": lookup.detail},
            )
        return lookup.outcome != "not_found"


def not_delivered(message: OutboundMessage, exc: ChannelSendError) -> None:
    """Log a reply that could not be delivered (the person sees no answer: an error)."""
    logger.error(
        "reply not delivered",
        extra={"channel": message.channel, "chat_id": message.chat_id, "error": str(exc)},
    )


def _message(
    origin: Origin, text: str, kind: OutboundKind, reply_to: str | None
) -> OutboundMessage:
    return OutboundMessage(
        channel=origin.channel,
        account=origin.account,
        chat_id=origin.chat_id,
        thread_id=origin.thread_id,
        text=text,
        kind=kind,
        reply_to=reply_to,
    )
