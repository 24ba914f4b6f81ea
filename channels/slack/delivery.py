"""Posting replies and announces: chunks, error classes, and the one place 429 is waited out.

Retry policy. The gateway's outbox owns delivery retries, so the Web API client
is built with no slack_sdk retry handlers at all: neither its rate-limit handler nor its
connection-error handler, which could post a message twice when a reply was lost after Slack
stored the post. Every failure becomes a :class:`ChannelSendError`:

- ``ok: false`` with a permanent code (``channel_not_found``, ``not_in_channel``,
  ``is_archived``, ``invalid_auth``, ``msg_too_long``…) → ``retryable=False``;
- HTTP 5xx, transient codes (``internal_error``…), timeouts, connection errors → retryable;
- HTTP 429 → retryable with ``retry_after`` from Slack's ``Retry-After`` header.

One exception, so that a person's reply is not held back behind the outbox's backoff: a
``reply`` hit by a 429 asking for at most ``INLINE_RETRY_AFTER_MAX`` seconds waits that long
here and tries the same chunk once more. Announces and notices never wait here; the outbox
waits ``retry_after`` itself, so a 429 is never waited out twice over.

A message split in chunks that fails part-way remembers which chunks landed; when the outbox
sends the same message again, posting resumes after them instead of repeating them.

An outbox item's chunks carry message metadata (:func:`announce_metadata`: event type
``herald_announce``, the item's id, its run id, the chunk's index and count), by which
:mod:`channels.slack.lookup` finds them in the conversation after a crash cut a send off.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from channels.base import OutboundMessage, SentMessage
from channels.errors import ChannelSendError
from channels.slack.config import SlackConfig
from channels.slack.constants import (
    ANNOUNCE_EVENT_TYPE,
    CHUNK_LIMIT,
    DEFAULT_API_BASE_URL,
    INLINE_RETRY_AFTER_MAX,
    PARTIAL_SENDS_CAPACITY,
    TRANSIENT_ERRORS,
)
from channels.slack.format import split_text, to_mrkdwn

log = logging.getLogger(__name__)


def web_client(
    config: SlackConfig, token: str, session: aiohttp.ClientSession, *, logger: logging.Logger
) -> AsyncWebClient:
    """The Web API client for ``config``: its ``apiBaseUrl``, ``session``, and no slack_sdk
    retry handlers (retries live in the outbox: see the module docstring)."""
    return AsyncWebClient(
        token=token,
        base_url=config.api_base_url or DEFAULT_API_BASE_URL,
        session=session,
        logger=logger,
        retry_handlers=[],
    )


def send_error(method: str, exc: BaseException) -> ChannelSendError:
    """Classify a failed Web API call as a retryable or permanent :class:`ChannelSendError`."""
    if isinstance(exc, SlackApiError):
        response = exc.response
        status = int(getattr(response, "status_code", 0) or 0)
        data = getattr(response, "data", None)
        code = data.get("error") if isinstance(data, dict) else None
        if status == 429 or code in ("ratelimited", "rate_limited"):
            return ChannelSendError(
                f"slack {method}: rate limited (HTTP {status})",
                retryable=True,
                retry_after=_retry_after(response),
            )
        if status >= 500 or code in TRANSIENT_ERRORS:
            return ChannelSendError(
                f"slack {method}: {code or 'server error'} (HTTP {status})", retryable=True
            )
        return ChannelSendError(
            f"slack {method}: {code or 'failed'} (HTTP {status})", retryable=False
        )
    if isinstance(exc, (aiohttp.ClientError, asyncio.TimeoutError, OSError)):
        return ChannelSendError(f"slack {method}: {type(exc).__name__}: {exc}", retryable=True)
    return ChannelSendError(f"slack {method}: unexpected {type(exc).__name__}", retryable=False)


def _retry_after(response: Any) -> float | None:
    headers = getattr(response, "headers", None) or {}
    value = None
    for key in headers:
        if str(key).lower() == "retry-after":
            value = headers[key]
            break
    try:
        return max(0.0, float(value)) if value is not None else None
    except (TypeError, ValueError):
        return None


def announce_metadata(message: OutboundMessage, part: int, parts: int) -> dict[str, Any] | None:
    """The message metadata of chunk ``part`` of ``parts`` of an outbox item or of the
    reply to a recorded message (None for other messages): what
    :mod:`channels.slack.lookup` looks for. The event type stays ``herald_announce`` for
    both, so messages posted before replies carried metadata are still found."""
    if not message.traceable:
        return None
    payload: dict[str, Any] = {"part": part, "parts": parts}
    if message.outbox_id is not None:
        payload["outbox_id"] = message.outbox_id
    if message.run_id is not None:
        payload["run_id"] = message.run_id
    if message.reply_to is not None:
        payload["reply_to"] = message.reply_to
    return {"event_type": ANNOUNCE_EVENT_TYPE, "event_payload": payload}


class Poster:
    """Posts an :class:`OutboundMessage` as mrkdwn chunks with ``chat.postMessage``."""

    def __init__(self, client: AsyncWebClient, *, chunk_limit: int = CHUNK_LIMIT) -> None:
        self._client = client
        self.chunk_limit = chunk_limit
        # message → ts of the chunks already posted, for messages that failed part-way.
        self._partial: OrderedDict[OutboundMessage, list[str]] = OrderedDict()

    def __repr__(self) -> str:
        return f"<Poster partial={len(self._partial)}>"

    def chunks(self, message: OutboundMessage) -> list[str]:
        """The chunks ``message`` is posted as."""
        return split_text(to_mrkdwn(message.text), self.chunk_limit)

    async def post(self, message: OutboundMessage) -> SentMessage:
        """Post every chunk of ``message`` in order; raise :class:`ChannelSendError` on failure."""
        chunks = self.chunks(message)
        posted = self._partial.pop(message, [])
        chat_id = message.chat_id
        for part in range(len(posted), len(chunks)):
            metadata = announce_metadata(message, part, len(chunks))
            try:
                response = await self._post_chunk(message, chunks[part], metadata)
            except ChannelSendError:
                if posted:
                    self._remember(message, posted)
                raise
            chat_id = str(response.get("channel") or chat_id)
            posted.append(str(response.get("ts") or ""))
        return SentMessage(chat_id=chat_id, message_ids=tuple(posted))

    async def _post_chunk(
        self, message: OutboundMessage, chunk: str, metadata: dict[str, Any] | None
    ) -> Any:
        waited = False
        while True:
            try:
                return await self._client.chat_postMessage(
                    channel=message.chat_id,
                    text=chunk,
                    thread_ts=message.thread_id,
                    metadata=metadata,
                )
            except Exception as exc:  # classified below; nothing escapes unclassified
                error = send_error("chat.postMessage", exc)
                error.__cause__ = exc
            if (
                message.kind == "reply"
                and not waited
                and error.retry_after is not None
                and error.retry_after <= INLINE_RETRY_AFTER_MAX
            ):
                log.info("slack: rate limited; reply waits %.1fs", error.retry_after)
                waited = True
                await asyncio.sleep(error.retry_after)
                continue
            if not error.retryable:
                log.warning("slack: permanent send failure to %s: %s", message.chat_id, error)
            raise error

    def remember(self, message: OutboundMessage, posted: list[str]) -> None:
        """The first ``len(posted)`` chunks of ``message`` are in the chat already (found
        there after a crash): the next :meth:`post` of it resumes after them."""
        if posted:
            self._remember(message, list(posted))

    def _remember(self, message: OutboundMessage, posted: list[str]) -> None:
        self._partial[message] = posted
        if len(self._partial) > PARTIAL_SENDS_CAPACITY:
            self._partial.popitem(last=False)
