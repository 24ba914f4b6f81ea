"""Delivery to chats: the durable announce outbox, and replies with bounded retries.

Retries live here and nowhere else (channels raise :class:`ChannelSendError` and say
whether trying again can help). Announces are rows in the state database's ``outbox``:

- ``pending`` → ``sending`` is written before each attempt; ``delivered`` or ``failed``
  after it. A transient failure goes back to ``pending`` with a backoff (the channel's
  ``retry_after`` when it gives one); a permanent one is ``failed`` and recorded on the run.
- Each announce is delivered **at most once**: an item still ``sending`` at start-up was cut
  off by a crash mid-send and may have reached the chat, so it is recorded as failed with an
  explanation rather than sent a second time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable, Mapping

from channels import Channel, ChannelSendError, OutboundMessage, SentMessage
from gateway.state import OutboxRecord, StateDB

logger = logging.getLogger(__name__)

#: Backoff of transient failures: 2 s, 4 s, … capped at 5 minutes, over 12 attempts (~35 min
#: in all): long enough to ride out a chat provider's incident, short enough to surface.
BASE_DELAY = 2.0
MAX_DELAY = 300.0
MAX_ATTEMPTS = 12
#: Replies are not durable: a person is waiting, so a few quick tries only.
REPLY_ATTEMPTS = 3
REPLY_MAX_DELAY = 10.0
UNCERTAIN = "the gateway stopped during this send; not sent again, to keep announces at most once"

DeliveryListener = Callable[[OutboxRecord], None]


def backoff(attempt: int, *, base: float = BASE_DELAY, cap: float = MAX_DELAY) -> float:
    """Delay before attempt ``attempt + 1``: exponential with ±20 % jitter, capped."""
    delay: float = min(cap, base * 2.0 ** max(0, attempt - 1))
    return delay * (0.8 + 0.4 * random.random())


class Outbox:
    """Delivers queued announces to their channels; one worker task per gateway."""

    def __init__(
        self,
        db: StateDB,
        channels: Mapping[str, Channel],
        *,
        clock: Callable[[], float] = time.time,
        base_delay: float = BASE_DELAY,
        max_attempts: int = MAX_ATTEMPTS,
    ) -> None:
        self._db = db
        self._channels = channels
        self._clock = clock
        self._base_delay = base_delay
        self._max_attempts = max_attempts
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._listeners: list[DeliveryListener] = []
        #: Called after each transient failure that will be retried (metrics).
        self.on_retry: Callable[[], object] | None = None

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("running" if self._task else "new")
        return f"<Outbox {state}>"

    def subscribe(self, listener: DeliveryListener) -> None:
        """Call ``listener(item)`` after each item is delivered or fails for good."""
        self._listeners.append(listener)

    async def start(self) -> int:
        """Settle items a crash left mid-send, then start delivering. Returns that count."""
        uncertain = await self._db.outbox.mark_interrupted_sends(UNCERTAIN)
        await self._db.outbox.reconcile_runs()
        if uncertain:
            logger.warning("outbox: sends cut off by a restart", extra={"count": uncertain})
        self._task = asyncio.create_task(self._loop(), name="outbox")
        return uncertain

    def kick(self) -> None:
        """Look for due items now (after an insert)."""
        self._wake.set()

    async def close(self) -> None:
        """Stop the worker; undelivered items stay in the database for the next start."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _loop(self) -> None:
        while not self._closed:
            try:
                due = await self._db.outbox.due(self._clock())
                for item in due:
                    await self._deliver(item)
                if len(due) == 100:
                    continue  # a full batch: there may be more due at once
                next_at = await self._db.outbox.next_due_at()
            except asyncio.CancelledError:
                raise
            except Exception:  # the loop must outlive any one failure (a locked DB, say)
                logger.exception("outbox: delivery loop error")
                next_at = self._clock() + self._base_delay
            timeout = None if next_at is None else max(0.0, next_at - self._clock())
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)

    async def _deliver(self, item: OutboxRecord) -> None:
        item_id = _id_of(item)
        channel = self._channels.get(item.channel)
        if channel is None:
            await self._fail(item, f"channel {item.channel!r} is not enabled in this gateway")
            return
        attempts = item.attempts + 1
        item = await self._db.outbox.update(item_id, state="sending", attempts=attempts)
        message = OutboundMessage(
            channel=item.channel,
            account=item.account,
            chat_id=item.chat_id,
            thread_id=item.thread_id,
            text=item.text,
            kind="announce",
            run_id=item.run_id,
        )
        try:
            sent = await channel.send(message)
        except ChannelSendError as exc:
            if exc.retryable and attempts < self._max_attempts:
                delay = exc.retry_after or backoff(attempts, base=self._base_delay)
                await self._db.outbox.update(
                    item_id,
                    state="pending",
                    next_attempt_at=self._clock() + delay,
                    last_error=str(exc),
                )
                if self.on_retry is not None:
                    self.on_retry()
                logger.warning(
                    "announce delivery failed; will retry",
                    extra={"run_id": item.run_id, "attempt": attempts, "error": str(exc)},
                )
                return
            await self._fail(item, str(exc))
            return
        except Exception as exc:  # a channel bug: record it rather than retry forever
            logger.exception("announce delivery crashed", extra={"run_id": item.run_id})
            await self._fail(item, f"{type(exc).__name__}: {exc}")
            return
        item = await self._db.outbox.settle(
            item_id,
            {
                "state": "delivered",
                "delivered_at": self._clock(),
                "message_ids": sent.message_ids,
                "last_error": None,
            },
            {"announce_state": "delivered", "announce_error": None},
        )
        logger.info(
            "announce delivered",
            extra={"run_id": item.run_id, "channel": item.channel, "attempts": attempts},
        )
        self._notify(item)

    async def _fail(self, item: OutboxRecord, error: str) -> None:
        item = await self._db.outbox.settle(
            _id_of(item),
            {"state": "failed", "last_error": error},
            {"announce_state": "failed", "announce_error": error},
        )
        logger.error(
            "announce delivery failed for good",
            extra={"run_id": item.run_id, "channel": item.channel, "error": error},
        )
        self._notify(item)

    def _notify(self, item: OutboxRecord) -> None:
        for listener in self._listeners:
            try:
                listener(item)
            except Exception:
                logger.exception("outbox listener failed")


def _id_of(item: OutboxRecord) -> int:
    if item.id is None:  # only rows read back from the database reach delivery
        raise ValueError("outbox item has no id")
    return item.id


async def send_reply(
    channel: Channel,
    message: OutboundMessage,
    *,
    attempts: int = REPLY_ATTEMPTS,
    base_delay: float = 0.5,
) -> SentMessage:
    """Send a reply, retrying transient failures a few times; raises the last error."""
    for attempt in range(1, attempts + 1):
        try:
            return await channel.send(message)
        except ChannelSendError as exc:
            if not exc.retryable or attempt == attempts:
                raise
            delay = min(REPLY_MAX_DELAY, exc.retry_after or backoff(attempt, base=base_delay))
            await asyncio.sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises
