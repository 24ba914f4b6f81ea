"""The announce outbox over a real state database: delivery, its retry schedule, give-up,
start-up and a clean stop's flush. The clock is injected, so a schedule of half an hour
runs at once: the test moves the clock to each item's next attempt and kicks the worker."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

import gateway.state.diskfull as disk_state
from channels import Channel, ChannelSendError, DeliveryLookup, OutboundMessage, SentMessage
from channels.memory import MemoryChannel
from gateway.delivery import MAX_ATTEMPTS, UNCERTAIN, Outbox
from gateway.delivery.outbox import BASE_DELAY, MAX_DELAY
from gateway.state import OutboxRecord, StateDB
from gateway.state.connection import Connection
from tests.gateway.delivery._support import HANG_GUARD_SECONDS, Settled, queued_announce

#: The backoff's jitter scales a delay down by at most this share.
JITTER = 0.2

MakeOutbox = Callable[..., Outbox]


class FakeClock:
    """Epoch seconds the test moves by hand."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class CrashingChannel(MemoryChannel):
    """A channel whose send has a bug: it raises something that is no ChannelSendError."""

    async def send(self, message: OutboundMessage) -> SentMessage:
        raise RuntimeError("channel bug")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def make_outbox(db: StateDB, clock: FakeClock) -> AsyncIterator[MakeOutbox]:
    """Outboxes over ``db`` with the fake clock; each is closed when the test ends."""
    made: list[Outbox] = []

    def make(channels: dict[str, Channel], **options: Any) -> Outbox:
        outbox = Outbox(db, channels, clock=clock, **options)
        made.append(outbox)
        return outbox

    yield make
    for outbox in made:
        await outbox.close()


class Retries:
    """``Outbox.on_retry``: counts transient failures and wakes the test at each one."""

    def __init__(self) -> None:
        self.count = 0
        self._event = asyncio.Event()

    def __call__(self) -> None:
        self.count += 1
        self._event.set()

    async def next(self) -> None:
        async with asyncio.timeout(HANG_GUARD_SECONDS):
            await self._event.wait()
        self._event.clear()


async def follow_retries(
    db: StateDB, outbox: Outbox, clock: FakeClock, retries: Retries, item_id: int, count: int
) -> list[OutboxRecord]:
    """Let ``count`` attempts fail transiently: after each, read the item back and move the
    clock to its next attempt. Returns the item as each failure left it."""
    seen: list[OutboxRecord] = []
    for _ in range(count):
        await retries.next()
        item = await db.outbox.get(item_id)
        assert item is not None
        seen.append(item)
        assert item.next_attempt_at is not None
        clock.now = item.next_attempt_at
        outbox.kick()
    return seen


def backoff_band(attempt: int, base: float = BASE_DELAY) -> tuple[float, float]:
    """The delays the outbox may choose after failed attempt ``attempt``."""
    ceiling = min(MAX_DELAY, base * 2 ** (attempt - 1))
    return ceiling * (1 - JITTER), ceiling


async def test_transient_failures_back_off_up_to_the_cap_and_attempt_12_fails_item_and_run(
    db: StateDB, make_outbox: MakeOutbox, clock: FakeClock
) -> None:
    assert MAX_ATTEMPTS == 12
    channel = MemoryChannel()
    channel.fail_next(ChannelSendError(f"HTTP 503 (try {n})", retryable=True) for n in range(1, 13))
    item, run_id = await queued_announce(db)
    assert item.id is not None
    outbox = make_outbox({"memory": channel})
    retries, settled = Retries(), Settled()
    outbox.on_retry = retries
    outbox.subscribe(settled)
    await outbox.start()

    start = clock.now
    failures = await follow_retries(db, outbox, clock, retries, item.id, MAX_ATTEMPTS - 1)
    (final,) = await settled.wait()

    # Attempts 1..11 each went back to pending, due after a backoff drawn from its band.
    delays: list[float] = []
    for attempt, failed in enumerate(failures, start=1):
        assert (failed.state, failed.attempts) == ("pending", attempt)
        assert failed.last_error == f"HTTP 503 (try {attempt})"
        assert failed.next_attempt_at is not None
        delays.append(failed.next_attempt_at - start)
        start = failed.next_attempt_at
    for attempt, delay in enumerate(delays, start=1):
        low, high = backoff_band(attempt)
        assert low <= delay <= high, (attempt, delays)
    # It grows until the cap (attempt 9: 2 s * 2**8 > 5 min), then stays there.
    uncapped = [d for n, d in enumerate(delays, start=1) if BASE_DELAY * 2 ** (n - 1) < MAX_DELAY]
    assert len(uncapped) == 8
    assert all(a < b for a, b in itertools.pairwise(uncapped)), delays
    assert all(MAX_DELAY * (1 - JITTER) <= d <= MAX_DELAY for d in delays[8:]), delays
    # Attempt 12 gave up: the item and its run say failed, with the last error.
    assert retries.count == MAX_ATTEMPTS - 1
    assert (final.state, final.attempts, final.last_error) == ("failed", 12, "HTTP 503 (try 12)")
    assert await db.outbox.get(item.id) == final
    run = await db.runs.get(run_id)
    assert run is not None
    assert (run.progress.status, run.delivery.announce_state, run.delivery.announce_error) == (
        "done",
        "failed",
        "HTTP 503 (try 12)",
    )
    assert channel.sent == []


async def test_a_retry_after_from_the_chat_replaces_the_backoff_for_that_attempt(
    db: StateDB, make_outbox: MakeOutbox, clock: FakeClock
) -> None:
    channel = MemoryChannel()
    channel.fail_next(
        [
            ChannelSendError("HTTP 500", retryable=True),
            ChannelSendError("rate limited", retryable=True, retry_after=42.5),
            ChannelSendError("HTTP 502", retryable=True),
        ]
    )
    item, run_id = await queued_announce(db, text="hello chat")
    assert item.id is not None
    outbox = make_outbox({"memory": channel})
    retries, settled = Retries(), Settled()
    outbox.on_retry = retries
    outbox.subscribe(settled)
    await outbox.start()

    start = clock.now
    failures = await follow_retries(db, outbox, clock, retries, item.id, 3)
    (delivered,) = await settled.wait()

    at = [start] + [f.next_attempt_at or 0.0 for f in failures]
    delays = [b - a for a, b in itertools.pairwise(at)]
    low, high = backoff_band(1)
    assert low <= delays[0] <= high
    assert delays[1] == pytest.approx(42.5)
    low, high = backoff_band(3)  # the attempt count goes on: the third failure's band
    assert low <= delays[2] <= high
    assert (delivered.state, delivered.attempts, delivered.last_error) == ("delivered", 4, None)
    assert delivered.delivered_at == clock.now
    assert [m.text for m in channel.sent] == ["hello chat"]
    assert delivered.message_ids == ("1",)
    run = await db.runs.get(run_id)
    assert run is not None
    assert (run.delivery.announce_state, run.delivery.announce_error) == ("delivered", None)


async def test_items_are_delivered_in_order_and_every_listener_hears_despite_a_broken_one(
    db: StateDB, make_outbox: MakeOutbox
) -> None:
    channel = MemoryChannel()
    items = [(await queued_announce(db, text=f"announce {n}"))[0] for n in range(3)]
    outbox = make_outbox({"memory": channel})
    heard: list[int | None] = []

    def broken(item: OutboxRecord) -> None:
        raise RuntimeError("listener bug")

    settled = Settled()
    outbox.subscribe(broken)
    outbox.subscribe(lambda item: heard.append(item.id))
    outbox.subscribe(settled)
    await outbox.start()
    await settled.wait(3)

    assert [m.text for m in channel.sent] == ["announce 0", "announce 1", "announce 2"]
    assert all(m.kind == "announce" for m in channel.sent)
    assert heard == [item.id for item in items]
    assert [i.state for i in settled.items] == ["delivered"] * 3


async def test_an_item_queued_while_a_round_ends_is_sent_without_waiting_for_a_poll(
    db: StateDB, make_outbox: MakeOutbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The announce step queues and kicks at any moment: one that comes after the round
    read what was due, before the loop waits again, must not be lost (alone, the loop
    has no poll to find the item later)."""
    channel = MemoryChannel()
    outbox = make_outbox({"memory": channel})
    settled = Settled()
    outbox.subscribe(settled)
    read_due = db.outbox.next_due_at
    queued: list[OutboxRecord] = []

    async def queue_after_the_read(replica_id: str | None = None) -> float | None:
        due = await read_due(replica_id)
        if not queued:
            queued.append((await queued_announce(db, text="late"))[0])
            outbox.kick()
        return due

    monkeypatch.setattr(db.outbox, "next_due_at", queue_after_the_read)
    await outbox.start()
    (item,) = await settled.wait()
    assert (item.id, item.state) == (queued[0].id, "delivered")
    assert [m.text for m in channel.sent] == ["late"]


async def test_an_item_for_a_channel_this_gateway_lacks_fails_without_an_attempt(
    db: StateDB, make_outbox: MakeOutbox
) -> None:
    item, run_id = await queued_announce(db, channel="slack")
    outbox = make_outbox({"memory": MemoryChannel()})
    settled = Settled()
    outbox.subscribe(settled)
    await outbox.start()
    (failed,) = await settled.wait()
    assert (failed.id, failed.state, failed.attempts) == (item.id, "failed", 0)
    assert failed.last_error == "channel 'slack' is not enabled in this gateway"
    run = await db.runs.get(run_id)
    assert run is not None
    assert (run.delivery.announce_state, run.delivery.announce_error) == (
        "failed",
        failed.last_error,
    )


async def test_a_channel_that_crashes_fails_the_item_at_once_instead_of_retrying(
    db: StateDB, make_outbox: MakeOutbox
) -> None:
    _item, run_id = await queued_announce(db)
    outbox = make_outbox({"memory": CrashingChannel()})
    retries, settled = Retries(), Settled()
    outbox.on_retry = retries
    outbox.subscribe(settled)
    await outbox.start()
    (failed,) = await settled.wait()
    assert (failed.state, failed.attempts, failed.last_error) == (
        "failed",
        1,
        "RuntimeError: channel bug",
    )
    assert retries.count == 0
    run = await db.runs.get(run_id)
    assert run is not None
    assert run.delivery.announce_state == "failed"


async def test_start_records_on_runs_the_fate_of_items_that_settled_without_them(
    db: StateDB, make_outbox: MakeOutbox
) -> None:
    # What a crash between an item's write and its run's left, in a version that wrote them
    # in two transactions: the item settled, the run still "queued".
    delivered, delivered_run = await queued_announce(db)
    failed, failed_run = await queued_announce(db)
    assert delivered.id is not None
    assert failed.id is not None
    await db.outbox.update(delivered.id, state="delivered", attempts=1)
    await db.outbox.update(failed.id, state="failed", attempts=1, last_error="chat gone")
    channel = MemoryChannel()
    await make_outbox({"memory": channel}).start()
    runs = [await db.runs.get(delivered_run), await db.runs.get(failed_run)]
    assert [
        (r.delivery.announce_state, r.delivery.announce_error) for r in runs if r is not None
    ] == [
        ("delivered", None),
        ("failed", "chat gone"),
    ]
    assert channel.sent == []


async def test_flush_sends_what_is_due_and_leaves_later_retries_pending(
    db: StateDB, make_outbox: MakeOutbox, clock: FakeClock
) -> None:
    due, _ = await queued_announce(db, text="due now")
    later, later_run = await queued_announce(
        db, text="retry later", attempts=3, next_attempt_at=clock.now + 60
    )
    assert later.id is not None
    channel = MemoryChannel()
    outbox = make_outbox({"memory": channel})
    assert await outbox.flush(HANG_GUARD_SECONDS) == 1
    assert [m.text for m in channel.sent] == ["due now"]
    assert due.id is not None
    sent = await db.outbox.get(due.id)
    assert sent is not None
    assert sent.state == "delivered"
    still = await db.outbox.get(later.id)
    assert still is not None
    assert (still.state, still.attempts) == ("pending", 3)
    run = await db.runs.get(later_run)
    assert run is not None
    assert run.delivery.announce_state == "queued"


class LookingChannel(MemoryChannel):
    """A channel that answers lookups of cut-off sends with scripted results."""

    def __init__(self, *answers: DeliveryLookup | Exception) -> None:
        super().__init__()
        self.answers = list(answers)
        self.asked: list[tuple[OutboundMessage, float]] = []

    async def find_delivered(self, message: OutboundMessage, since: float) -> DeliveryLookup:
        self.asked.append((message, since))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


async def cut_off_item(db: StateDB, **fields: Any) -> tuple[OutboxRecord, str]:
    """An announce a crash left mid-send (``sending``), first tried at 500."""
    item, run_id = await queued_announce(db, **fields)
    assert item.id is not None
    item = await db.outbox.update(item.id, state="sending", attempts=1, first_attempt_at=500.0)
    return item, run_id


@pytest.mark.parametrize(
    ("answer", "sent"),
    [
        (DeliveryLookup("found", ("m-1",)), []),
        (DeliveryLookup("not_found"), ["the announce"]),
    ],
    ids=["found", "not-found"],
)
async def test_a_cut_off_send_is_settled_by_what_its_chat_says(
    db: StateDB, make_outbox: MakeOutbox, answer: DeliveryLookup, sent: list[str]
) -> None:
    item, run_id = await cut_off_item(db)
    channel = LookingChannel(answer)
    outbox = make_outbox({"memory": channel})
    settled = Settled()
    outbox.subscribe(settled)
    await outbox.start()
    (done,) = await settled.wait()

    ((asked, since),) = channel.asked
    assert (asked.outbox_id, asked.run_id, asked.text, since) == (item.id, run_id, item.text, 500.0)
    assert [m.text for m in channel.sent] == sent
    assert [m.outbox_id for m in channel.sent] == [item.id] * len(sent)
    assert (done.state, done.in_doubt) == ("delivered", False)
    assert done.message_ids == (answer.message_ids or ("1",))
    run = await db.runs.get(run_id)
    assert run is not None
    assert run.delivery.announce_state == "delivered"


@pytest.mark.parametrize(
    "answer",
    [
        DeliveryLookup("unknown", detail="no history scope"),
        ChannelSendError("not allowed to read", retryable=False),
        RuntimeError("lookup bug"),
    ],
    ids=["cannot-tell", "refused", "channel-bug"],
)
async def test_a_cut_off_send_its_chat_cannot_vouch_for_is_never_sent_again(
    db: StateDB, make_outbox: MakeOutbox, answer: DeliveryLookup | Exception
) -> None:
    _item, run_id = await cut_off_item(db)
    channel = LookingChannel(answer)
    outbox = make_outbox({"memory": channel})
    settled = Settled()
    outbox.subscribe(settled)
    await outbox.start()
    (done,) = await settled.wait()

    assert len(channel.asked) == 1
    assert channel.sent == []
    assert (done.state, done.last_error, done.in_doubt) == ("failed", UNCERTAIN, False)
    run = await db.runs.get(run_id)
    assert run is not None
    assert (run.delivery.announce_state, run.delivery.announce_error) == ("uncertain", UNCERTAIN)


async def test_a_cut_off_send_to_a_channel_no_longer_enabled_is_uncertain(
    db: StateDB, make_outbox: MakeOutbox
) -> None:
    _item, run_id = await cut_off_item(db, channel="slack")
    outbox = make_outbox({"memory": MemoryChannel()})
    settled = Settled()
    outbox.subscribe(settled)
    await outbox.start()
    (done,) = await settled.wait()

    assert (done.state, done.last_error) == ("failed", UNCERTAIN)
    run = await db.runs.get(run_id)
    assert run is not None
    assert run.delivery.announce_state == "uncertain"


# -- a full disk ---------------------------------------------------------------------------
# ``PRAGMA max_page_count = 1`` on the database's writer caps it at its current size: SQLite
# then refuses, as on a full disk, every write that needs a new page (see
# tests/gateway/state/test_diskfull.py). Raising the limit is an operator freeing space.


def _limit(pages: int) -> Callable[[Connection], None]:
    def limit(conn: Connection) -> None:
        conn.execute(f"PRAGMA max_page_count = {pages}")

    return limit


class FillingChannel(MemoryChannel):
    """Each send goes out, then the disk fills before it is recorded. A send fails
    transiently while ``failures`` last; each error and each receipt is long (a long
    announce split into many messages), so recording either needs new pages."""

    def __init__(self, db: StateDB, *, failures: int = 0) -> None:
        super().__init__()
        self.db = db
        self.failures = failures

    async def send(self, message: OutboundMessage) -> SentMessage:
        await self.db.write(_limit(1))
        if self.failures:
            self.failures -= 1
            raise ChannelSendError("chat overloaded: " + "e" * 8000, retryable=True)
        sent = await super().send(message)
        return SentMessage(chat_id=sent.chat_id, message_ids=tuple(map(str, range(1000))))


class Refusal(logging.Handler):
    """Set once the disk-full state begins (its warning is logged on the loop's thread)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.set()

    async def wait(self) -> None:
        async with asyncio.timeout(HANG_GUARD_SECONDS):  # a hang guard
            await self.seen.wait()


@pytest.fixture
def refusal() -> Iterator[Refusal]:
    """The state database's disk refusing a write, as its disk-full warning says."""
    logger = logging.getLogger(disk_state.__name__)
    handler = Refusal()
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


async def test_a_send_is_recorded_once_the_full_disk_has_room_again(
    db: StateDB, make_outbox: MakeOutbox, refusal: Refusal
) -> None:
    item, run_id = await queued_announce(db)
    assert item.id is not None
    channel = FillingChannel(db)
    settled = Settled()
    outbox = make_outbox({"memory": channel})
    outbox.subscribe(settled)
    await outbox.start()
    await refusal.wait()
    held = await db.outbox.get(item.id)
    await db.write(_limit(1_000_000_000))
    (delivered,) = await settled.wait()
    run = await db.runs.get(run_id)
    assert held is not None
    assert held.state == "sending"  # sent; its record waits for space
    # Left "sending", the next start would call it uncertain and its run's announce failed.
    assert (delivered.state, len(delivered.message_ids or ())) == ("delivered", 1000)
    assert run is not None
    assert run.delivery.announce_state == "delivered"
    assert len(channel.sent) == 1


async def test_a_failed_send_is_rescheduled_once_the_full_disk_has_room_again(
    db: StateDB, make_outbox: MakeOutbox, clock: FakeClock, refusal: Refusal
) -> None:
    item, _ = await queued_announce(db)
    assert item.id is not None
    channel = FillingChannel(db, failures=1)
    retries = Retries()
    outbox = make_outbox({"memory": channel})
    outbox.on_retry = retries
    await outbox.start()
    await refusal.wait()
    await db.write(_limit(1_000_000_000))
    (again,) = await follow_retries(db, outbox, clock, retries, item.id, 1)
    # Left "sending", this announce would never be tried again: it never reached the chat.
    assert again.state == "pending"
    assert (again.last_error or "").startswith("chat overloaded")


async def test_a_stop_does_not_wait_for_the_full_disk(
    db: StateDB, make_outbox: MakeOutbox, caplog: pytest.LogCaptureFixture
) -> None:
    item, _ = await queued_announce(db)
    assert item.id is not None
    outbox = make_outbox({"memory": FillingChannel(db)})
    caplog.set_level(logging.WARNING)
    # The send goes out; its record is refused; the stop goes on without it.
    async with asyncio.timeout(HANG_GUARD_SECONDS):  # a hang guard
        assert await outbox.flush(HANG_GUARD_SECONDS) == 0
    held = await db.outbox.get(item.id)
    assert held is not None
    assert held.state == "sending"  # the next start settles it as uncertain: never sent twice
    lines = [r.getMessage() for r in caplog.records if r.name == "gateway.delivery.outbox"]
    assert lines == ["outbox: flush at stop ended by a full disk"]
