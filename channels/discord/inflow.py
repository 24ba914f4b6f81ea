"""The Discord messages on their way to the gateway's handler, each handed on once.

Live messages and those a catch-up reads after a fresh gateway session (:mod:`.catchup`)
share one bounded queue and one consumer. A message is handed on only at its first
sighting (the seen keys, shared by a cluster's replicas, remembered as long as a catch-up
reaches back), and once the handler took it its chat's cursor moves past it. While a
catch-up reads, live messages wait behind it, so each chat's messages keep their order.
"""

from __future__ import annotations

import asyncio
import logging
import time

from channels.base import InboundHandler, InboundMessage
from channels.cursors import ChatCursor, ChatCursors
from channels.discord._sdk import discord
from channels.discord.catchup import CATCHUP_MAX_AGE, read_missed
from channels.discord.errors import send_error
from channels.discord.events import to_inbound
from channels.replay import MemorySeenKeys, SeenKeys

log = logging.getLogger(__name__)

#: Inbound messages waiting for the handler; beyond this discord.py's event tasks wait.
INBOUND_QUEUE_SIZE = 256
#: Message ids remembered in memory when the seen keys cannot be recorded.
SEEN_FALLBACK_CAPACITY = 10_000


class Inflow:
    """One Discord channel's inbound messages: :meth:`take` (live), :meth:`catch_up`,
    :meth:`deliver` (the consumer), :meth:`reset` (at stop)."""

    def __init__(
        self, name: str, *, require_mention: bool, seen: SeenKeys | None, cursors: ChatCursors
    ) -> None:
        self._name = name
        self._require_mention = require_mention
        self._fallback = MemorySeenKeys(SEEN_FALLBACK_CAPACITY)
        self._seen: SeenKeys = seen if seen is not None else self._fallback
        self._seen_failing = False
        self._cursors = cursors
        self._queue: asyncio.Queue[InboundMessage] = asyncio.Queue(INBOUND_QUEUE_SIZE)
        #: Live messages held back while a catch-up hands on the older ones (None: none runs).
        self._held: list[InboundMessage] | None = None
        self._task: asyncio.Task[None] | None = None
        self._again = False

    def __repr__(self) -> str:
        return f"<Inflow {self._name} queued={self.queued} catching_up={self._held is not None}>"

    @property
    def queued(self) -> int:
        return self._queue.qsize()

    async def take(self, inbound: InboundMessage) -> None:
        """A live message: queued, or held until the running catch-up has handed on."""
        if self._held is not None:
            self._held.append(inbound)
            return
        await self._queue.put(inbound)

    def catch_up(self, client: discord.Client, me: int) -> None:
        """Read what each recent chat received while no connection was up (in the
        background; once more after the running one, when one runs)."""
        if self._task is not None and not self._task.done():
            self._again = True
            return
        self._held = []
        self._task = asyncio.create_task(self._catch_up(client, me), name=f"{self._name}-catch-up")

    async def deliver(self, handler: InboundHandler) -> None:
        """Hand each queued message on, once; runs until cancelled."""
        while True:
            inbound = await self._queue.get()
            if not await self._first_sighting(inbound):
                log.debug("%s: message %s handed on already", self._name, inbound.message_id)
                continue
            try:
                await handler(inbound)
            except Exception:
                log.exception(
                    "%s inbound handler failed for message %s", self._name, inbound.message_id
                )
            await self._advance(inbound)

    def reset(self) -> tuple[asyncio.Task[None] | None, int]:
        """At stop: the catch-up task to cancel and how many messages were left unhandled;
        the queue starts empty for the next start."""
        task, self._task = self._task, None
        self._held = None
        dropped = self._queue.qsize()
        self._queue = asyncio.Queue(INBOUND_QUEUE_SIZE)
        return task, dropped

    async def _catch_up(self, client: discord.Client, me: int) -> None:
        try:
            again = True
            while again:
                self._again = False
                await self._catch_up_once(client, me)
                again = self._again
        except Exception:
            log.exception("%s channel: catching up after READY failed", self._name)
        finally:
            held, self._held = self._held, None
            for inbound in held or []:
                await self._queue.put(inbound)

    async def _catch_up_once(self, client: discord.Client, me: int) -> None:
        now = time.time()
        cursors = await self._cursors.recent(self._name, str(me), now - CATCHUP_MAX_AGE)
        found = 0
        for cursor in cursors:
            try:
                missed = await read_missed(client, cursor, now)
            except Exception as exc:
                error = send_error(exc)
                if error is None:
                    raise
                log.warning(
                    "%s channel: cannot read chat %s to catch up: %s",
                    self._name,
                    cursor.chat_id,
                    error,
                )
                continue
            for message in missed:
                inbound = to_inbound(
                    message, me=me, channel_name=self._name, require_mention=self._require_mention
                )
                if inbound is not None:
                    found += 1
                    await self._queue.put(inbound)
        if found:
            log.info(
                "%s channel: %d messages sent while no connection was up handed on",
                self._name,
                found,
            )

    async def _first_sighting(self, inbound: InboundMessage) -> bool:
        """Whether ``inbound`` was not handed on before (live, by a catch-up, by another
        replica); remembered as long as a catch-up reaches back."""
        keys = [f"{self._name}:msg:{inbound.chat_id}:{inbound.message_id}"]
        try:
            new = await self._seen.first_sighting(keys, CATCHUP_MAX_AGE)
        except Exception as exc:
            if not self._seen_failing:
                log.warning(
                    "%s: cannot record seen messages (%s); remembering in memory", self._name, exc
                )
            self._seen_failing = True
            return self._fallback.first_sighting_now(keys, CATCHUP_MAX_AGE)
        if self._seen_failing:
            log.info("%s: recording seen messages again", self._name)
            self._seen_failing = False
        return new

    async def _advance(self, inbound: InboundMessage) -> None:
        """The handler took ``inbound``: a later catch-up reads its chat from after it."""
        if inbound.message_id is None or not inbound.message_id.isdigit():
            return
        cursor = ChatCursor(
            self._name, inbound.account, inbound.chat_id, inbound.chat_type, int(inbound.message_id)
        )
        try:
            await self._cursors.advance(cursor)
        except Exception as exc:  # the next catch-up reads from an older message: seen drops it
            log.warning("%s: cannot record the chat's newest message: %s", self._name, exc)
