"""An in-memory channel: the channel interface with no chat service behind it.

Tests and benchmarks drive the gateway through it exactly as Slack or Discord would: inject
an :class:`InboundMessage`, read what was sent. Send failures can be scripted to exercise the
outbox's retry and give-up paths.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterable

from channels.base import (
    Channel,
    InboundHandler,
    InboundMessage,
    OutboundMessage,
    RunUpdate,
    SentMessage,
)
from channels.errors import ChannelSendError


class MemoryChannel(Channel):
    """Keeps every sent message in ``sent``; ``fail_next`` scripts send failures."""

    def __init__(self, name: str = "memory", *, account: str = "default") -> None:
        self.name = name
        self._account = account
        self.sent: list[OutboundMessage] = []
        self.updates: list[RunUpdate] = []
        self._handler: InboundHandler | None = None
        self._connected = False
        self._failures: deque[ChannelSendError] = deque()
        self._changed = asyncio.Condition()
        self._next_id = 0
        #: Chat ids that no longer exist: sends to them fail permanently.
        self.vanished: set[str] = set()

    @property
    def account(self) -> str:
        return self._account

    def __repr__(self) -> str:
        return f"<MemoryChannel {self.name} sent={len(self.sent)} connected={self._connected}>"

    async def start(self, handler: InboundHandler) -> None:
        self._handler = handler
        self._connected = True

    async def stop(self) -> None:
        self._connected = False

    @property
    def connected(self) -> bool:
        return self._connected

    def fail_next(self, errors: Iterable[ChannelSendError]) -> None:
        """The next sends raise these errors, in order."""
        self._failures.extend(errors)

    async def send(self, message: OutboundMessage) -> SentMessage:
        if self._failures:
            raise self._failures.popleft()
        if message.chat_id in self.vanished:
            raise ChannelSendError(f"chat {message.chat_id} not found", retryable=False)
        self._next_id += 1
        async with self._changed:
            self.sent.append(message)
            self._changed.notify_all()
        return SentMessage(chat_id=message.chat_id, message_ids=(str(self._next_id),))

    async def run_update(self, update: RunUpdate) -> None:
        async with self._changed:
            self.updates.append(update)
            self._changed.notify_all()

    async def wait_update(self, run_id: str, status: str) -> RunUpdate:
        """Wait until run ``run_id`` was reported with ``status``."""
        return await self.wait_run(lambda u: u.run_id == run_id and u.status == status)

    async def wait_run(self, predicate: Callable[[RunUpdate], bool]) -> RunUpdate:
        """Wait until a run update matches ``predicate`` (a run known by its name, say)."""
        async with self._changed:
            await self._changed.wait_for(lambda: any(predicate(u) for u in self.updates))
        return next(u for u in self.updates if predicate(u))

    async def receive(self, message: InboundMessage) -> None:
        """Hand ``message`` to the gateway as if a person had sent it."""
        if self._handler is None:
            raise ChannelSendError("memory channel is not started", retryable=False)
        await self._handler(message)

    def inbound(
        self,
        text: str,
        *,
        chat_id: str = "c1",
        thread_id: str | None = None,
        sender_id: str = "u1",
        chat_type: str = "channel",
    ) -> InboundMessage:
        """Build an inbound message for this channel."""
        return InboundMessage(
            channel=self.name,
            account=self.account,
            chat_id=chat_id,
            thread_id=thread_id,
            sender_id=sender_id,
            text=text,
            chat_type="dm" if chat_type == "dm" else "channel",
        )

    async def wait_for(
        self, predicate: Callable[[OutboundMessage], bool], *, count: int = 1
    ) -> list[OutboundMessage]:
        """Wait until ``count`` sent messages match ``predicate``; returns them."""
        async with self._changed:
            await self._changed.wait_for(lambda: sum(1 for m in self.sent if predicate(m)) >= count)
            return [m for m in self.sent if predicate(m)]
