"""Finding an announce in its Slack conversation after a crash cut its send off.

Each chunk of an outbox item is posted with message metadata (``herald_announce``: the
item's id, its run id, the chunk's index and count; see :mod:`channels.slack.delivery`).
To learn whether a cut-off send reached the chat, :func:`find_chunks` reads the
conversation since shortly before the send's first attempt — ``conversations.history`` for
a top-level message, ``conversations.replies`` for one in a thread — with
``include_all_metadata`` (without it Slack leaves the payload out), and collects the ts of
every chunk whose metadata names this item.

Reading history needs the ``channels:history``/``groups:history``/``im:history`` scopes; an
app without them gets ``missing_scope``, which :func:`lookup` reports as "cannot tell", and
the outbox then keeps the announce at most once.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from channels.base import DeliveryLookup, OutboundMessage
from channels.errors import ChannelSendError
from channels.slack.constants import (
    ANNOUNCE_EVENT_TYPE,
    LOOKUP_CLOCK_SKEW,
    LOOKUP_MAX_PAGES,
    LOOKUP_PAGE_SIZE,
)
from channels.slack.delivery import Poster, send_error

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Found:
    """Chunks of one message found in its conversation: index → ts; ``complete`` when the
    whole window was read (else a missing chunk may lie beyond what was read)."""

    chunks: dict[int, str]
    complete: bool


async def find_chunks(client: AsyncWebClient, message: OutboundMessage, since: float) -> Found:
    """The chunks of ``message`` (an outbox item or a traceable reply) posted at or after
    ``since`` (epoch seconds).

    Raises :class:`ChannelSendError` (classified like a send) when Slack refuses or fails.
    """
    method = "conversations.replies" if message.thread_id else "conversations.history"
    oldest = f"{max(0.0, since - LOOKUP_CLOCK_SKEW):.6f}"
    chunks: dict[int, str] = {}
    cursor: str | None = None
    for _ in range(LOOKUP_MAX_PAGES):
        args: dict[str, Any] = {
            "channel": message.chat_id,
            "oldest": oldest,
            "include_all_metadata": True,
            "limit": LOOKUP_PAGE_SIZE,
        }
        if cursor:
            args["cursor"] = cursor
        try:
            if message.thread_id:
                response = await client.conversations_replies(ts=message.thread_id, **args)
            else:
                response = await client.conversations_history(**args)
        except Exception as exc:  # classified: retryable or not, never unclassified
            raise send_error(method, exc) from exc
        for item in response.get("messages") or []:
            part = _chunk_of(item, message)
            if part is not None and isinstance(item.get("ts"), str):
                chunks.setdefault(part, item["ts"])
        metadata = response.get("response_metadata") or {}
        cursor = metadata.get("next_cursor") if isinstance(metadata, Mapping) else None
        if not response.get("has_more") or not cursor:
            return Found(chunks, complete=True)
    return Found(chunks, complete=False)


async def lookup(
    client: AsyncWebClient, poster: Poster, message: OutboundMessage, since: float
) -> DeliveryLookup:
    """Whether every chunk of ``message`` is in the conversation. A leading run of chunks
    found without the rest is handed to ``poster``, so that the resend posts only the rest.

    Retryable failures raise :class:`ChannelSendError`; permanent ones (``missing_scope``,
    ``channel_not_found``, ``thread_not_found``…) answer "unknown".
    """
    expected = len(poster.chunks(message))
    try:
        found = await find_chunks(client, message, since)
    except ChannelSendError as exc:
        if exc.retryable:
            raise
        return DeliveryLookup("unknown", detail=str(exc))
    ordered = [found.chunks.get(part) for part in range(expected)]
    if expected and all(ordered):
        return DeliveryLookup("found", tuple(ts for ts in ordered if ts))
    leading: list[str] = []
    for ts in ordered:
        if ts is None:
            break
        leading.append(ts)
    if len(found.chunks) > len(leading) or not found.complete:
        # Chunks out of order (one deleted by a person?) or a window too long to read:
        # a resend could repeat what is there, so say so rather than guess.
        why = "history too long to search" if not found.complete else "chunks missing"
        return DeliveryLookup("unknown", detail=f"slack lookup: {why}")
    poster.remember(message, leading)
    log.info(
        "slack: cut-off announce not in the chat",
        extra={"chat": message.chat_id, "chunks_found": len(leading), "chunks": expected},
    )
    return DeliveryLookup("not_found")


def _chunk_of(item: Mapping[str, Any], message: OutboundMessage) -> int | None:
    """The chunk index ``item`` (a message from the history) carries for ``message``."""
    metadata = item.get("metadata")
    if not isinstance(metadata, Mapping) or metadata.get("event_type") != ANNOUNCE_EVENT_TYPE:
        return None
    payload = metadata.get("event_payload")
    if not isinstance(payload, Mapping):
        return None
    if (payload.get("outbox_id"), payload.get("run_id"), payload.get("reply_to")) != (
        message.outbox_id,
        message.run_id,
        message.reply_to,
    ):
        return None
    part = payload.get("part")
    return part if isinstance(part, int) and not isinstance(part, bool) else None
