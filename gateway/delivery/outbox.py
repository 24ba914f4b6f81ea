"""The durable announce outbox: rows of the state database's ``outbox``, delivered in order.

Channels raise :class:`ChannelSendError` and say whether trying again can help; the retry
policy lives here (and, for plain replies, in :mod:`gateway.delivery.replies`).

- ``pending`` → ``sending`` is written before each attempt; ``delivered`` or ``failed``
  after it. A transient failure goes back to ``pending`` with a backoff (the channel's
  ``retry_after`` when it gives one); a permanent one is ``failed`` and recorded on the run.
- Each announce is delivered **exactly once** where its channel can say what is in the
  chat: an item still ``sending`` at start-up was cut off by a crash mid-send and may have
  reached the chat, so it goes back to ``pending`` marked ``in_doubt``, and before any
  second send its channel is asked (:meth:`Channel.find_delivered`): found → ``delivered``
  with the chat's message ids; not found → sent (with the same delivery id, which makes the
  send idempotent where the chat supports it); cannot tell → recorded as failed with the
  "uncertain" explanation rather than risk a second copy (**at most once**).
- Several replicas share the outbox: each delivery loop claims the due items it sends
  (``claimed_by``, taken with ``FOR UPDATE SKIP LOCKED`` on PostgreSQL), so each item has
  one sender; an item queued by another replica is found within ``poll_seconds``. At start
  a replica reopens only its own cut-off sends; those of a replica that died are reopened
  ``in_doubt`` by a survivor (:meth:`OutboxTable.reopen_dead`, from the heartbeat).
- A full disk is waited out: the item stays ``pending`` until its ``sending`` mark can be
  written, and how a send ended is recorded once space is back (an item left ``sending``
  would be in doubt at the next start, though it reached the chat or never did). So is a
  database away for a while (PostgreSQL restarting): how a send ended is written again
  until it is back, and a ``sending`` mark the lost connection kept without confirming it
  is asked about at once, as after a crash, rather than at the next start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping

from channels import Channel, ChannelSendError, DeliveryLookup, OutboundMessage
from gateway.backoff import backoff
from gateway.state import DiskFullError, OutboxRecord, StateDB, StateUnavailableError

logger = logging.getLogger(__name__)

#: Backoff of transient failures: 2 s, 4 s, … capped at 5 minutes, over 12 attempts (~35 min
#: in all): long enough to ride out a chat provider's incident, short enough to surface.
BASE_DELAY = 2.0
MAX_DELAY = 300.0
MAX_ATTEMPTS = 12
UNCERTAIN = "the gateway stopped during this send; not sent again, to keep announces at most once"
#: A database away is asked again at least this often, to record how a send ended or to
#: go on delivering (nothing says when it is back, as the disk-full state says when space is).
RECORD_MAX_DELAY = 10.0
#: Items a loop claims at once: a few, so that other replicas' loops find work too.
CLAIM_BATCH = 20
#: The claimant's name of a gateway alone on its database (SQLite).
LOCAL_REPLICA = "local"
#: In a cluster, how often a loop looks for items other replicas queued (their own loop
#: sends them at once; this is for a replica that died or is busy).
CLUSTER_POLL_SECONDS = 2.0

DeliveryListener = Callable[[OutboxRecord], None]


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
        replica_id: str | None = None,
        poll_seconds: float | None = None,
    ) -> None:
        """``replica_id`` names this gateway among replicas sharing the database (None: it
        is alone); ``poll_seconds`` bounds each wait, so items queued by other replicas are
        seen (None: wait for the next due time or a :meth:`kick`)."""
        self._db = db
        self._replica_id = replica_id
        self._claimant = replica_id or LOCAL_REPLICA
        self._poll = poll_seconds
        self._channels = channels
        self._clock = clock
        self._base_delay = base_delay
        self._max_attempts = max_attempts
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        #: Set by :meth:`flush`: the worker finishes its current send and exits.
        self._stopping = False
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
        """Reopen items a crash left mid-send (their chat is asked before any second send),
        then start delivering. Returns how many were reopened."""
        reopened = await self._db.outbox.reopen_interrupted_sends(self._replica_id)
        await self._db.outbox.reconcile_runs()
        if reopened:
            logger.warning(
                "outbox: sends cut off by a restart; asking their chats", extra={"count": reopened}
            )
        self._task = asyncio.create_task(self._loop(), name="outbox")
        return reopened

    def kick(self) -> None:
        """Look for due items now (after an insert)."""
        self._wake.set()

    async def flush(self, seconds: float) -> int:
        """Deliver every item due now, within ``seconds``, then stop the worker
        (a clean stop, while the channels are still up); returns how many were handled.

        The worker finishes the send it is in (never cut off mid-send, which would leave
        the item uncertain) and stops; items still due are then sent here, one by one.
        Items waiting for a later retry stay ``pending`` for the next start.
        """
        self._stopping = True
        self._wake.set()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, seconds)
        if self._task is not None:
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self._task), max(0.0, seconds))
        handled = 0
        while not self._closed and loop.time() < deadline:
            due = await self._db.outbox.claim_due(self._clock(), self._claimant, limit=CLAIM_BATCH)
            if not due:
                break
            for item in due:
                if loop.time() >= deadline:
                    break
                try:
                    await self._deliver(item)
                except DiskFullError:  # nothing more can be recorded: the rest waits
                    logger.warning("outbox: flush at stop ended by a full disk")
                    return handled
                handled += 1
        if handled:
            logger.info("outbox flushed at stop", extra={"count": handled})
        return handled

    async def close(self) -> None:
        """Stop the worker; undelivered items stay in the database for the next start."""
        self._stopping = True
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._replica_id is not None:  # peers may send what this one claimed but never began
            try:
                await self._db.outbox.release_claims(self._replica_id)
            except Exception as exc:  # they are taken over once this replica counts as dead
                logger.warning("outbox: claims not released at stop", extra={"error": str(exc)})

    async def _loop(self) -> None:
        full = 0  # consecutive rounds the disk refused
        away = 0  # consecutive rounds the database could not be reached
        while not self._closed and not self._stopping:
            # Cleared before the round reads, never after: a kick while the round runs
            # (an item queued after the claim read) must wake the next wait at once.
            self._wake.clear()
            try:
                if away:
                    # A lost connection may have kept a `sending` mark it never confirmed:
                    # that send was never made. This loop sends one item at a time, so
                    # none of this gateway's is in flight now: each is asked about as
                    # after a crash, never left `sending` until the next start.
                    await self._db.outbox.reopen_interrupted_sends(self._replica_id)
                due = await self._db.outbox.claim_due(
                    self._clock(), self._claimant, limit=CLAIM_BATCH
                )
                for item in due:
                    if self._stopping:
                        return
                    await self._deliver(item)
                if len(due) == CLAIM_BATCH:
                    continue  # a full batch: there may be more due at once
                next_at = await self._db.outbox.next_due_at(self._replica_id)
                full = away = 0
            except asyncio.CancelledError:
                raise
            except DiskFullError:  # logged once by the disk-full state, which kicks us after
                full += 1
                next_at = self._clock() + backoff(full, base=self._base_delay, cap=MAX_DELAY)
            except StateUnavailableError as exc:  # the database away (or locked too long)
                away += 1
                log = logger.warning if away == 1 else logger.debug
                log("outbox: state database unavailable; trying again", extra={"error": str(exc)})
                next_at = self._clock() + backoff(away, base=self._base_delay, cap=RECORD_MAX_DELAY)
            except Exception:  # the loop must outlive any one failure
                logger.exception("outbox: delivery loop error")
                next_at = self._clock() + self._base_delay
            timeout = None if next_at is None else max(0.0, next_at - self._clock())
            if self._poll is not None:
                timeout = self._poll if timeout is None else min(timeout, self._poll)
            if self._stopping:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)

    async def _deliver(self, item: OutboxRecord) -> None:
        item_id = _id_of(item)
        channel = self._channels.get(item.channel)
        if channel is None:
            error = f"channel {item.channel!r} is not enabled in this gateway"
            await (self._uncertain(item, error) if item.in_doubt else self._fail(item, error))
            return
        message = OutboundMessage(
            channel=item.channel,
            account=item.account,
            chat_id=item.chat_id,
            thread_id=item.thread_id,
            text=item.text,
            # A batch's follow-up is the agent answering: a reply, not an announce.
            kind="reply" if item.batch_id is not None else "announce",
            run_id=item.run_id,
            outbox_id=item_id,
        )
        if item.in_doubt and await self._settled_by_lookup(item, channel, message):
            return
        attempts = item.attempts + 1
        first = item.first_attempt_at if item.first_attempt_at is not None else self._clock()
        started = await self._db.outbox.start_send(
            item_id, self._claimant, attempts=attempts, first_attempt_at=first, in_doubt=False
        )
        if started is None:  # taken over (this replica counted as dead meanwhile): not ours
            logger.warning("outbox: claim lost before the send", extra={"run_id": item.run_id})
            return
        item = started
        try:
            sent = await channel.send(message)
        except ChannelSendError as exc:
            if exc.retryable and attempts < self._max_attempts:
                await self._retry_later(item, attempts, exc, str(exc))
                return
            await self._fail(item, str(exc))
            return
        except Exception as exc:  # a channel bug: record it rather than retry forever
            logger.exception("announce delivery crashed", extra={"run_id": item.run_id})
            await self._fail(item, f"{type(exc).__name__}: {exc}")
            return
        await self._delivered(item, sent.message_ids, attempts)

    async def _settled_by_lookup(
        self, item: OutboxRecord, channel: Channel, message: OutboundMessage
    ) -> bool:
        """Ask the chat whether the send a crash cut off reached it. True when that settled
        the item (delivered, uncertain, or asked again later); False when it must be sent."""
        since = item.first_attempt_at if item.first_attempt_at is not None else item.created_at
        try:
            lookup = await channel.find_delivered(message, since)
        except ChannelSendError as exc:
            attempts = item.attempts + 1
            if exc.retryable and attempts < self._max_attempts:
                await self._retry_later(item, attempts, exc, f"looking for the cut-off send: {exc}")
                return True
            await self._uncertain(item, str(exc))
            return True
        except Exception as exc:  # a channel bug: never a second send on a guess
            logger.exception("announce lookup crashed", extra={"run_id": item.run_id})
            await self._uncertain(item, f"{type(exc).__name__}: {exc}")
            return True
        return await self._apply_lookup(item, lookup)

    async def _apply_lookup(self, item: OutboxRecord, lookup: DeliveryLookup) -> bool:
        if lookup.outcome == "found":
            logger.info(
                "a cut-off announce is in the chat; recorded as delivered",
                extra={"run_id": item.run_id, "channel": item.channel},
            )
            await self._delivered(item, lookup.message_ids, item.attempts)
            return True
        if lookup.outcome == "unknown":
            await self._uncertain(item, lookup.detail or "the chat cannot tell")
            return True
        logger.info(
            "a cut-off announce is not in the chat; sending it",
            extra={"run_id": item.run_id, "channel": item.channel},
        )
        return False

    async def _retry_later(
        self, item: OutboxRecord, attempts: int, exc: ChannelSendError, error: str
    ) -> None:
        """Back to ``pending`` (``in_doubt`` as it was), due after the backoff."""
        delay = exc.retry_after or backoff(attempts, base=self._base_delay, cap=MAX_DELAY)
        item_id, retry_at = _id_of(item), self._clock() + delay
        await self._record(
            lambda: self._db.outbox.update(
                item_id,
                state="pending",
                attempts=attempts,
                next_attempt_at=retry_at,
                last_error=error,
                claimed_by=None,  # any replica may make the next attempt
            )
        )
        if self.on_retry is not None:
            self.on_retry()
        logger.warning(
            "announce delivery failed; will retry",
            extra={"run_id": item.run_id, "attempt": attempts, "error": error},
        )

    async def _delivered(
        self, item: OutboxRecord, message_ids: tuple[str, ...], attempts: int
    ) -> None:
        item_id = _id_of(item)
        delivered = {
            "state": "delivered",
            "delivered_at": self._clock(),
            "message_ids": message_ids,
            "last_error": None,
            "in_doubt": False,
        }
        item = await self._record(
            lambda: self._db.outbox.settle(
                item_id, delivered, {"announce_state": "delivered", "announce_error": None}
            )
        )
        logger.info(
            "announce delivered",
            extra={"run_id": item.run_id, "channel": item.channel, "attempts": attempts},
        )
        self._notify(item)

    async def _uncertain(self, item: OutboxRecord, why: str) -> None:
        """A cut-off send whose chat cannot say whether it arrived: never sent again."""
        item_id = _id_of(item)
        item = await self._record(
            lambda: self._db.outbox.settle(
                item_id,
                {"state": "failed", "last_error": UNCERTAIN, "in_doubt": False},
                {"announce_state": "uncertain", "announce_error": UNCERTAIN},
            )
        )
        logger.warning(
            "announce cut off by a restart and not sent again: its chat cannot tell",
            extra={"run_id": item.run_id, "channel": item.channel, "error": why},
        )
        self._notify(item)

    async def _fail(self, item: OutboxRecord, error: str) -> None:
        item_id = _id_of(item)
        item = await self._record(
            lambda: self._db.outbox.settle(
                item_id,
                {"state": "failed", "last_error": error},
                {"announce_state": "failed", "announce_error": error},
            )
        )
        logger.error(
            "announce delivery failed for good",
            extra={"run_id": item.run_id, "channel": item.channel, "error": error},
        )
        self._notify(item)

    async def _record(self, write: Callable[[], Awaitable[OutboxRecord]]) -> OutboxRecord:
        """Write how an attempt ended, waiting out a full disk or a database away for a
        while: the attempt happened, and an item left ``sending`` is never sent again. A
        stop does not wait (the item is then settled as uncertain at the next start). Each
        write sets the item's outcome whole, so one a lost connection may have made is
        harmless made again."""
        attempt = 0
        while True:
            try:
                return await write()
            except (DiskFullError, StateUnavailableError) as exc:
                if self._stopping:
                    raise
                attempt += 1
                delay = backoff(attempt, base=self._base_delay, cap=MAX_DELAY)
                if isinstance(exc, DiskFullError):
                    await self._db.space.wait_for_space(delay)
                    continue
                if attempt == 1:
                    logger.warning(
                        "outbox: how a send ended not recorded; writing it again",
                        extra={"error": str(exc)},
                    )
                await asyncio.sleep(min(delay, RECORD_MAX_DELAY))

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
