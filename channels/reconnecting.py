"""A chat channel whose start survives a network fault.

A Slack or Discord API unreachable when the gateway starts (DNS not up yet, a refused
connection, a timeout, a 5xx) is a fault that passes, not a mistake in the configuration:
exiting 78 would make systemd's ``RestartPreventExitStatus=78`` stop the service for good
after a network blip at boot. :class:`Reconnecting` wraps such a channel: a start that
fails with a fault (:attr:`ChannelStartError.fault`) returns at once and is tried again in
the background with exponential backoff, while the rest of the gateway (the web chat, the
API) works. Until it connects the channel reports ``disconnected`` (so ``/readyz`` answers
503 naming it) and sends fail as retryable (the outbox keeps them). Credentials refused
by the chat stay a :class:`ChannelStartError` raised from :meth:`start` — or, met during
the background retries, are logged as an error and end them.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Final

from aiohttp import web

from channels.base import (
    Channel,
    ChannelState,
    DeliveryLookup,
    InboundHandler,
    InboundMessage,
    OutboundMessage,
    Reply,
    RunUpdate,
    SentMessage,
)
from channels.errors import ChannelSendError, ChannelStartError
from channels.probe import DEFAULT_PROBE_TIMEOUT, ProbeResult
from channels.streaming import StreamedMessage, StreamRecorder

log = logging.getLogger(__name__)

#: Seconds before the first retry, and the longest wait between two: a network back at
#: boot is found within a second or two, a longer outage costs one attempt a minute.
FIRST_RETRY: Final = 1.0
MAX_RETRY: Final = 60.0


class Reconnecting(Channel):
    """``inner``, started again in the background while its start fails with a fault."""

    def __init__(
        self, inner: Channel, *, first_retry: float = FIRST_RETRY, max_retry: float = MAX_RETRY
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self._first_retry = first_retry
        self._max_retry = max_retry
        self._retrying: asyncio.Task[None] | None = None
        #: Why the last attempt failed, while the channel is not connected.
        self.last_error: str | None = None
        self.attempts = 0

    def __repr__(self) -> str:
        state = "retrying" if self._retrying is not None else self.connection_state
        return f"<Reconnecting {self.inner!r} {state} attempts={self.attempts}>"

    # Defined for the interpreter alone: the type checker, seeing ``__getattr__``, would type
    # any attribute of a ``Reconnecting`` it does not find (a misspelt one too) as ``Any``.
    # Typed code reaches what only the wrapped channel has through ``inner``.
    if not TYPE_CHECKING:

        def __getattr__(self, name: str) -> Any:
            # What only the wrapped channel has (Slack's account, say) is read through.
            return getattr(self.inner, name)

    @property
    def account(self) -> str:
        return self.inner.account

    def add_routes(self, app: web.Application) -> None:
        self.inner.add_routes(app)

    async def start(self, handler: InboundHandler) -> None:
        """Start ``inner``; on a fault, log it and go on retrying in the background."""
        if await self._attempt(handler):
            return
        self._retrying = asyncio.create_task(self._retry(handler), name=f"{self.name}-reconnect")

    async def _attempt(self, handler: InboundHandler) -> bool:
        self.attempts += 1
        try:
            await self.inner.start(handler)
        except ChannelStartError as exc:
            if not exc.fault:
                raise
            self.last_error = str(exc)
            log.warning(
                "%s: cannot connect (%s); retrying in the background",
                self.name,
                exc,
                extra={"channel": self.name, "attempt": self.attempts},
            )
            return False
        if self.attempts > 1:
            log.info("%s: connected after %d attempts", self.name, self.attempts)
        self.last_error = None
        return True

    async def _retry(self, handler: InboundHandler) -> None:
        delay = self._first_retry
        try:
            while True:
                # Jittered, so replicas that lost one network do not retry in step.
                await asyncio.sleep(delay * (0.5 + random.random() / 2))
                if await self._attempt(handler):
                    return
                delay = min(self._max_retry, delay * 2)
        except ChannelStartError as exc:  # credentials refused meanwhile: a person must act
            self.last_error = str(exc)
            log.error("%s: cannot start: %s", self.name, exc, extra={"channel": self.name})
        finally:
            self._retrying = None

    async def stop(self) -> None:
        """Stop retrying, then stop ``inner``. Idempotent."""
        task, self._retrying = self._retrying, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await self.inner.stop()

    async def send(self, message: OutboundMessage) -> SentMessage:
        if self._retrying is not None:
            raise ChannelSendError(f"{self.name}: not connected yet", retryable=True)
        return await self.inner.send(message)

    async def find_delivered(self, message: OutboundMessage, since: float) -> DeliveryLookup:
        if self._retrying is not None:
            raise ChannelSendError(f"{self.name}: not connected yet", retryable=True)
        return await self.inner.find_delivered(message, since)

    @property
    def connected(self) -> bool:
        return self._retrying is None and self.inner.connected

    @property
    def connection_state(self) -> ChannelState:
        return "disconnected" if self._retrying is not None else self.inner.connection_state

    async def run_update(self, update: RunUpdate) -> None:
        if self._retrying is None:
            await self.inner.run_update(update)

    async def probe(self, *, timeout_seconds: float = DEFAULT_PROBE_TIMEOUT) -> ProbeResult:
        return await self.inner.probe(timeout_seconds=timeout_seconds)

    def open_reply(
        self,
        message: InboundMessage,
        reply_to: str | None = None,
        *,
        stream: bool = False,
        earlier: StreamedMessage | None = None,
        record: StreamRecorder | None = None,
    ) -> Reply:
        # A reply posted whole goes through this wrapper's send (not connected yet: it says so).
        return super().open_reply(message, reply_to, stream=stream, earlier=earlier, record=record)

    def stream_reply(
        self,
        message: InboundMessage,
        final: OutboundMessage,
        *,
        earlier: StreamedMessage | None = None,
        record: StreamRecorder | None = None,
    ) -> Reply | None:
        if self._retrying is not None:  # not connected yet: the reply is posted whole
            return None
        return self.inner.stream_reply(message, final, earlier=earlier, record=record)

    @asynccontextmanager
    async def working(self, message: InboundMessage) -> AsyncIterator[None]:
        async with self.inner.working(message):
            yield
