"""Storage faults during runs: the disk full under transcript writes, the database locked.

Disk full. There are no root mounts in tests (no tiny tmpfs), so ENOSPC is injected where
the gateway meets the disk: the transcript writer's module sees an ``os`` whose ``write``
fails like a full disk does — a short write of part of the data, then ``ENOSPC`` on the next
call — and whose ``open`` notes which descriptor is which file. Nothing else in the process
is touched. Whether a write fails is drawn from a seeded ``Random``.

Database locked. A second ``sqlite3`` connection holds ``BEGIN IMMEDIATE`` on ``herald.db``
while runs progress, until the gateway has been refused writes several times (it logs each
refusal before it retries), so every test knows the lock was hit rather than hoping a timer
overlapped a write. The busy timeout is lowered from 5 s to 0.1 s for these tests: what is
under test is what the gateway does once a write gives up, not how long it waits first.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import errno
import logging
import os
import random
import sqlite3
import types
from collections import Counter
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

import pytest

import gateway.sessions.writer as transcript_writer
import gateway.state.diskfull as disk_state
import gateway.state.sqlite.database as state_db
from channels import OutboundMessage, SentMessage
from channels.memory import MemoryChannel
from gateway.agent import DISK_FULL_REPLY
from gateway.constants import STATE_DB_NAME
from gateway.state import FINISHED_STATUSES, Origin, OutboxRecord, OutboxTable, RunRecord
from gateway.subagents import SpawnRequest
from lanes import Lane
from tests.faults._support import (
    audit_transcripts,
    chat_context,
    duplicates,
    fault_seed,
    spawn_runs,
)
from tests.gateway.harness import TEST_SCRIPT, Harness, running_gateway

ORIGIN = Origin(channel="memory", account="default", chat_id="c1", chat_type="channel")
#: Guard against a hung gateway; never an assertion about speed.
GUARD_SECONDS = 20.0
#: Busy timeout of the gateway's connections in these tests (see the module docstring).
BUSY_TIMEOUT_MS = 100
#: Refused writes the gateway must log before the outside connection lets go of the lock:
#: about a second of busy timeouts, several retries of one write among them.
REFUSALS = 10
#: Refusals of the one write that records a delivery: its first try and a retry.
RECORD_REFUSALS = 2


def script_with_jobs(delay: float) -> dict[str, Any]:
    """The harness script plus ``job <x>`` tasks answering ``did <x>`` after ``delay``."""
    script = copy.deepcopy(TEST_SCRIPT)
    rule = {"match": r"^job (.+)$", "reply": "did $1", "delaySeconds": delay}
    script["rules"].insert(0, rule)
    return script


async def finished_runs(gw: Harness, run_ids: Sequence[str]) -> list[RunRecord]:
    """The runs as recorded once the sub-agent lane is idle, each asserted finished.

    An idle lane means every run's job has returned, so the database holds all this process
    will record for them: a run left unfinished (its job failed, or is waiting to be retried)
    is reported here as it stands, rather than found by waiting for a deadline to pass.
    """
    async with asyncio.timeout(GUARD_SECONDS):  # a hang guard
        await gw.lanes.subagent.join()
    runs = [await gw.db.runs.get(run_id) for run_id in run_ids]
    assert None not in runs, runs
    recorded = [run for run in runs if run is not None]
    unfinished = [
        f"{r.run_id[:8]}={r.progress.status}" for r in recorded if not r.progress.finished
    ]
    assert unfinished == [], f"runs without a final status once no job is left: {unfinished}"
    return recorded


# -- disk full ---------------------------------------------------------------------------


class DiskFullOS(types.ModuleType):
    """``os`` for the transcript writer's module: writes fail as on a full disk.

    ``fails(path)`` decides per write; a failing write stores a random prefix of its data
    (possibly nothing) and the next write to that descriptor raises ``ENOSPC``, which is what
    ``write(2)`` does when the disk fills mid-write.
    """

    def __init__(self, fails: Callable[[Path], bool], rng: random.Random) -> None:
        super().__init__("os")
        self.fails = fails
        self.rng = rng
        self.counts: Counter[str] = Counter()
        self._paths: dict[int, Path] = {}
        self._full: set[int] = set()

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def open(self, path: Any, flags: int, mode: int = 0o777) -> int:
        fd = os.open(path, flags, mode)
        self._paths[fd] = Path(path)
        return fd

    def write(self, fd: int, data: Any) -> int:
        path = self._paths.get(fd)
        if fd in self._full:
            self._full.discard(fd)
            self.counts["enospc"] += 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        if path is not None and self.fails(path):
            size = self.rng.randrange(len(data))
            if size == 0:
                self.counts["enospc"] += 1
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
            self.counts["short"] += 1
            self._full.add(fd)
            return os.write(fd, bytes(data[:size]))
        return os.write(fd, data)


async def test_disk_full_during_transcript_writes_loses_no_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed = fault_seed(777)
    rng = random.Random(seed)
    disk = DiskFullOS(lambda _: rng.random() < 0.2, rng)
    state = tmp_path / "state"
    # Every run comes from one chat session, faster than they finish.
    config = {"agent": {"subagents": {"maxConcurrent": 4, "maxChildrenPerSession": 1000}}}
    script = script_with_jobs(0.01)
    run_ids: list[str] = []
    refused: list[str] = []
    async with running_gateway(tmp_path, config=config, script=script, state_dir=state) as gw:
        ctx = await chat_context(gw, ORIGIN)
        monkeypatch.setattr(transcript_writer, "os", disk)
        for n in range(30):
            # A spawn whose child transcript cannot be created is refused with an error
            # result, and no run is recorded for it.
            run_ids += await spawn_runs(gw, ctx, [f"job {n}"], refusals=refused)
        runs = await finished_runs(gw, run_ids)
        deliveries = [await gw.delivery(run_id) for run_id in run_ids]
        announces = Counter(m.run_id for m in gw.channel.sent if m.kind == "announce")
        recorded = await gw.db.runs.list(limit=100)
        monkeypatch.undo()

    assert disk.counts["short"] > 0, disk.counts
    assert all("No space left on device" in error for error in refused), refused
    assert len(run_ids) > 0
    assert len(recorded) == len(run_ids)
    # A run whose transcript lost a line ends "error" (never "done" over a gap); every run
    # ends, and each is announced once.
    assert {run.progress.status for run in runs} <= {"done", "error"}
    assert all(
        (run.progress.error or "").startswith("transcript:")
        for run in runs
        if run.progress.status == "error"
    ), [run.progress.error for run in runs if run.progress.status == "error"]
    assert duplicates(announces) == {}
    assert set(announces) == set(run_ids)
    assert {d.state for d in deliveries} == {"delivered"}
    # A failed write may leave a torn last line, never a bad line in the middle: the writer
    # cuts a torn tail before it appends again.
    audit = audit_transcripts(state)
    assert audit.invalid == []
    assert audit.headless == []
    print(f"disk faults {dict(disk.counts)}; spawns refused {len(refused)}; torn {len(audit.torn)}")

    # The next start repairs every torn transcript it appends to.
    async with running_gateway(tmp_path, state_dir=state) as gw:
        sessions = await gw.store.list(include_subagents=True)
        for session in sessions:
            await gw.store.append_event(session, "checked", {})
        await gw.store.flush()
        ids = {s.session_id for s in sessions}
    audit = audit_transcripts(state)
    assert audit.invalid == []
    # Only orphans stay torn: header fragments of sessions whose creation failed.
    assert [name for name in audit.torn if name.removesuffix(".jsonl") in ids] == []


async def test_a_run_whose_transcript_cannot_be_written_does_not_end_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doomed: set[Path] = set()
    disk = DiskFullOS(lambda path: path in doomed, random.Random(1))
    async with running_gateway(tmp_path, script=script_with_jobs(0.05)) as gw:
        ctx = await chat_context(gw, ORIGIN)
        monkeypatch.setattr(transcript_writer, "os", disk)
        result = await gw.spawn(ctx, SpawnRequest(task="job lost"))
        child = await gw.store.require(result["childSessionKey"])
        doomed.add(gw.store.transcript_path(child))
        (run,) = await finished_runs(gw, [result["runId"]])
        delivery = await gw.delivery(run.run_id)
        monkeypatch.undo()
    assert disk.counts["enospc"] > 0
    assert delivery.state == "delivered"
    assert run.progress.status == "error", run


# -- database locked ---------------------------------------------------------------------


@contextlib.asynccontextmanager
async def database_locked(state_dir: Path) -> AsyncIterator[None]:
    """Hold the write lock of ``herald.db`` from another connection while inside."""
    conn = sqlite3.connect(
        state_dir / STATE_DB_NAME, timeout=10, isolation_level=None, check_same_thread=False
    )
    try:
        await asyncio.to_thread(conn.execute, "BEGIN IMMEDIATE")
        try:
            yield
        finally:
            await asyncio.to_thread(conn.execute, "ROLLBACK")
    finally:
        conn.close()


class LockRefusals(logging.Handler):
    """Counts the state database's "is locked; retrying" warnings: each is one write that
    gave up after the busy timeout and will be tried again."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(logging.WARNING)
        self.count = 0
        self._loop = loop
        self._seen = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "is locked; retrying" in record.getMessage():
            self.count += 1
            # Logged on the loop's thread today; thread-safe in case that ever changes.
            self._loop.call_soon_threadsafe(self._seen.set)

    async def reach(self, count: int) -> None:
        """Wait until ``count`` writes have been refused."""
        try:
            async with asyncio.timeout(GUARD_SECONDS):  # a hang guard
                while self.count < count:
                    self._seen.clear()
                    await self._seen.wait()
        except TimeoutError:
            raise AssertionError(
                f"the gateway logged {self.count} refused writes under the lock, not {count}:"
                " no write kept retrying while the database was locked"
            ) from None


async def first_of(*waits: Coroutine[Any, Any, object]) -> None:
    """Wait until one of ``waits`` ends (its exception raised here); cancel the others."""
    tasks = [asyncio.ensure_future(wait) for wait in waits]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            task.result()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


@pytest.fixture
async def refusals() -> AsyncIterator[LockRefusals]:
    """The state database's refused writes, counted while the test runs."""
    logger = logging.getLogger(state_db.__name__)
    level = logger.level
    if not logger.isEnabledFor(logging.WARNING):
        logger.setLevel(logging.WARNING)
    handler = LockRefusals(asyncio.get_running_loop())
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


async def spawn_then_lock(gw: Harness, state: Path, runs: int, refusals: LockRefusals) -> list[str]:
    """Spawn ``runs`` runs, then lock the database until :data:`REFUSALS` writes were
    refused, or until the sub-agent lane is idle: runs cannot finish under the lock, so an
    idle lane there means jobs gave up, which the test's checks of the runs then show."""
    ctx = await chat_context(gw, ORIGIN)
    run_ids = await spawn_runs(gw, ctx, [f"job {n}" for n in range(runs)])
    async with database_locked(state):
        await first_of(refusals.reach(REFUSALS), gw.lanes.subagent.join())
    return run_ids


@pytest.fixture
def short_busy_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(state_db, "BUSY_TIMEOUT_MS", BUSY_TIMEOUT_MS)


@pytest.mark.usefixtures("short_busy_timeout")
async def test_runs_hit_by_a_locked_database_finish_after_a_restart(
    tmp_path: Path, refusals: LockRefusals
) -> None:
    state = tmp_path / "state"
    config = {"agent": {"subagents": {"maxConcurrent": 4}}}
    script = script_with_jobs(0.2)
    async with running_gateway(tmp_path, config=config, script=script, state_dir=state) as gw:
        run_ids = await spawn_then_lock(gw, state, 8, refusals)
        # The outbox loop outlived the lock: a run spawned now is announced.
        ctx = await chat_context(gw, ORIGIN)
        (late,) = await spawn_runs(gw, ctx, ["job late"])
        assert (await gw.delivery(late)).state == "delivered"
        first = Counter(m.run_id for m in gw.channel.sent if m.kind == "announce")
        left = [r.run_id for r in await gw.db.runs.list() if not r.progress.finished]
    async with running_gateway(tmp_path, config=config, script=script, state_dir=state) as gw:
        runs = await finished_runs(gw, [*run_ids, late])
        for item in await gw.db.outbox.list(states=["pending"]):
            await gw.delivery(item.run_id or "")
        second = Counter(m.run_id for m in gw.channel.sent if m.kind == "announce")
        outbox = await gw.db.outbox.list()
    print(f"runs left unfinished by the lock until the restart: {len(left)} of {len(run_ids)}")
    assert refusals.count >= REFUSALS  # the lock met writes, and the gateway retried them
    assert {run.progress.status for run in runs} <= FINISHED_STATUSES
    assert {item.state for item in outbox} <= {"delivered", "failed"}
    assert duplicates(first + second) == {}
    delivered = {item.run_id for item in outbox if item.state == "delivered"}
    assert set(first + second) == delivered
    assert delivered | {i.run_id for i in outbox if i.state == "failed"} == {*run_ids, late}
    audit = audit_transcripts(state)
    assert (audit.invalid, audit.torn, audit.headless) == ([], [], [])


@pytest.mark.usefixtures("short_busy_timeout")
async def test_runs_reach_a_final_status_once_a_database_lock_is_released(
    tmp_path: Path, refusals: LockRefusals
) -> None:
    state = tmp_path / "state"
    config = {"agent": {"subagents": {"maxConcurrent": 4}}}
    script = script_with_jobs(0.2)
    async with running_gateway(tmp_path, config=config, script=script, state_dir=state) as gw:
        run_ids = await spawn_then_lock(gw, state, 8, refusals)
        # No restart: a run the lock stranded (its job failed, its row left "running")
        # shows here as unfinished.
        await finished_runs(gw, run_ids)
        deliveries = [await gw.delivery(run_id) for run_id in run_ids]
        # Read once every announce has settled: a run's announce state is written with its
        # delivery, after the run became final.
        runs = [run for run in [await gw.db.runs.get(r) for r in run_ids] if run is not None]
        announces = Counter(m.run_id for m in gw.channel.sent if m.kind == "announce")
    # The lock made writes wait, never fail a run: every run is done, and announced once.
    assert [run.progress.status for run in runs] == ["done"] * len(run_ids), runs
    assert refusals.count >= REFUSALS  # the lock met writes, and the gateway retried them
    assert [run.delivery.announce_state for run in runs] == ["delivered"] * len(run_ids), runs
    assert {d.state for d in deliveries} == {"delivered"}
    assert duplicates(announces) == {}
    assert set(announces) == set(run_ids)
    audit = audit_transcripts(state)
    assert (audit.invalid, audit.torn, audit.headless) == ([], [], [])


class LockingChannel(MemoryChannel):
    """A memory channel whose first send locks the database as it returns.

    It first waits for ``lane`` (the sub-agent lane) to go idle: the run's own bookkeeping
    is then done, so recording this delivery is the only write the lock meets, and every
    refusal counted is that record's.
    """

    def __init__(self, state: Path, lane: Lane) -> None:
        super().__init__()
        self.state = state
        self.lane = lane
        self.lock: contextlib.AbstractAsyncContextManager[None] | None = None
        self.locked = asyncio.Event()

    async def send(self, message: OutboundMessage) -> SentMessage:
        sent = await super().send(message)
        if self.lock is None:
            await self.lane.join()
            self.lock = database_locked(self.state)
            await self.lock.__aenter__()
            self.locked.set()
        return sent


class RecordWatch:
    """Wraps the outbox table's ``settle``, the write that records how a delivery ended,
    and signals when each call ends, returned or raised."""

    def __init__(self, table: OutboxTable) -> None:
        self._settle = table.settle
        self.errors: list[Exception] = []
        self.ended = asyncio.Event()

    async def settle(
        self, item_id: int, changes: dict[str, Any], run_changes: dict[str, Any]
    ) -> OutboxRecord:
        try:
            return await self._settle(item_id, changes, run_changes)
        except Exception as exc:
            self.errors.append(exc)
            raise
        finally:
            self.ended.set()


@pytest.mark.usefixtures("short_busy_timeout")
async def test_a_delivery_recorded_under_a_locked_database_is_not_left_sending(
    tmp_path: Path, refusals: LockRefusals, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state"
    async with running_gateway(tmp_path, script=script_with_jobs(0.0), state_dir=state) as gw:
        channel = LockingChannel(state, gw.lanes.subagent)
        gw.channels["memory"] = channel
        record = RecordWatch(gw.db.outbox)
        monkeypatch.setattr(gw.db.outbox, "settle", record.settle)
        ctx = await chat_context(gw, ORIGIN)
        (run_id,) = await spawn_runs(gw, ctx, ["job once"])
        try:
            async with asyncio.timeout(GUARD_SECONDS):  # a hang guard
                await channel.locked.wait()
            # Until the record was refused twice (its first try and a retry), or gave up:
            # then it ended while locked, and the checks below say so at once.
            await first_of(refusals.reach(RECORD_REFUSALS), record.ended.wait())
            # WAL readers pass the lock: the announce is out, its record still waiting.
            held = await gw.db.outbox.get_by_run(run_id)
        finally:
            if channel.lock is not None:
                await channel.lock.__aexit__(None, None, None)
        # The record ends either way: written once the lock is gone, or given up (the item
        # would then stay "sending", never retried in this process).
        async with asyncio.timeout(GUARD_SECONDS):  # a hang guard
            await record.ended.wait()
        assert record.errors == []
        # The outbox tells its listeners once the final state is recorded; nothing after
        # that sends the item again (only pending items are due).
        settled = await gw.delivery(run_id)
        item = await gw.db.outbox.get_by_run(run_id)
        run = await gw.db.runs.get(run_id)
    assert held is not None
    assert held.state == "sending", held
    assert settled.state == "delivered", settled
    assert [m.run_id for m in channel.sent if m.kind == "announce"] == [run_id]
    assert item is not None
    assert item.state == "delivered", item
    assert run is not None
    assert run.delivery.announce_state == "delivered", run


async def test_chats_get_the_apology_while_transcripts_cannot_be_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    disk = DiskFullOS(lambda _: True, random.Random(fault_seed(13)))
    async with running_gateway(tmp_path) as gw:
        await gw.say("hello", chat_id="regular")
        first = await gw.reply("regular")
        # The fake disk fails files it sees opened: let the writer open this one again.
        regular = await gw.store.require("agent:main:memory:channel:regular")
        await gw.store.writer.release([gw.store.transcript_path(regular)])
        monkeypatch.setattr(transcript_writer, "os", disk)
        await gw.say("hello", chat_id="regular")  # its turn's lines are refused
        refused_turn = await gw.reply("regular", count=2)
        await gw.say("hello", chat_id="newcomer")  # its session's header is refused
        refused_session = await gw.reply("newcomer")
        monkeypatch.undo()
        await gw.say("hello", chat_id="newcomer")
        later = await gw.reply("newcomer", count=2)

    assert disk.counts["enospc"] > 0
    assert first.text == later.text == "hi there"
    assert refused_turn.text == refused_session.text == DISK_FULL_REPLY
    # The full disk is logged by the disk-full state; no line per refused write or turn.
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert errors == []
    states = [r for r in caplog.records if r.name == disk_state.__name__]
    assert states[0].levelname == "WARNING"
    assert "the transcript writer refused a write" in states[0].getMessage()
