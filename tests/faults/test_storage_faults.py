"""Storage faults during runs: the disk full under transcript writes, the database locked.

Disk full. There are no root mounts in tests (no tiny tmpfs), so ENOSPC is injected where
the gateway meets the disk: the transcript writer's module sees an ``os`` whose ``write``
fails like a full disk does — a short write of part of the data, then ``ENOSPC`` on the next
call — and whose ``open`` notes which descriptor is which file. Nothing else in the process
is touched. Whether a write fails is drawn from a seeded ``Random``.

Database locked. A second ``sqlite3`` connection holds ``BEGIN IMMEDIATE`` on ``herald.db``
for several times the busy timeout while runs progress. The busy timeout is lowered from
5 s to 0.1 s for these tests: what is under test is what the gateway does once a write gives
up, not how long it waits first.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import errno
import os
import random
import sqlite3
import types
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

import gateway.sessions.writer as transcript_writer
import gateway.state.db as state_db
from channels import OutboundMessage, SentMessage
from channels.memory import MemoryChannel
from gateway.constants import STATE_DB_NAME
from gateway.state import FINISHED_STATUSES, Origin
from gateway.subagents import SpawnRequest
from tests.faults._support import (
    audit_transcripts,
    chat_context,
    duplicates,
    fault_seed,
    spawn_runs,
    wait_final,
)
from tests.gateway.harness import TEST_SCRIPT, Harness, running_gateway

ORIGIN = Origin(channel="memory", account="default", chat_id="c1", chat_type="channel")
GUARD_SECONDS = 20.0
#: Busy timeout of the gateway's connections in these tests (see the module docstring).
BUSY_TIMEOUT_MS = 100
#: How long the outside connection holds the write lock: many busy timeouts.
LOCK_SECONDS = 1.0
LOCK_BUG = (
    "gateway/subagents/manager.py:232: the runs.update(status='announcing') after the run's "
    "try/except is unguarded; a 'database is locked' there escapes the lane job (logged at "
    "debug level by the lane) and the run stays 'queued'/'running' until the next restart"
)
SENDING_BUG = (
    "gateway/subagents/outbox.py:158: when recording 'delivered' fails (database locked), "
    "the exception reaches the loop's catch-all and the item stays 'sending': never retried "
    "in this process, run.announce_state stays 'queued', and the next start records the "
    "delivered announce as failed/uncertain"
)
SURFACE_BUG = (
    "transcript appends do not wait for their write and nothing calls store.flush(), so a "
    "run whose transcript lost lines to ENOSPC ends 'done' with the failure only logged "
    "(gateway/sessions/writer.py:254-257 only logs it; gateway/subagents/manager.py:194-241 "
    "never asks)"
)


def script_with_jobs(delay: float) -> dict[str, Any]:
    """The harness script plus ``job <x>`` tasks answering ``did <x>`` after ``delay``."""
    script = copy.deepcopy(TEST_SCRIPT)
    rule = {"match": r"^job (.+)$", "reply": "did $1", "delaySeconds": delay}
    script["rules"].insert(0, rule)
    return script


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
    config = {"agent": {"subagents": {"maxConcurrent": 4}}}
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
        runs = await wait_final(gw, run_ids, GUARD_SECONDS)
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
    assert {run.status for run in runs} <= {"done", "error"}
    assert all(
        (run.error or "").startswith("transcript:") for run in runs if run.status == "error"
    ), [run.error for run in runs if run.status == "error"]
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
        (run,) = await wait_final(gw, [result["runId"]], GUARD_SECONDS)
        delivery = await gw.delivery(run.run_id)
        monkeypatch.undo()
    assert disk.counts["enospc"] > 0
    assert delivery.state == "delivered"
    assert run.status == "error", run


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


async def spawn_then_lock(gw: Harness, state: Path, runs: int) -> list[str]:
    """Spawn ``runs`` runs, then lock the database for :data:`LOCK_SECONDS` while they run."""
    ctx = await chat_context(gw, ORIGIN)
    run_ids = await spawn_runs(gw, ctx, [f"job {n}" for n in range(runs)])
    async with database_locked(state):
        await asyncio.sleep(LOCK_SECONDS)
    return run_ids


@pytest.fixture
def short_busy_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(state_db, "BUSY_TIMEOUT_MS", BUSY_TIMEOUT_MS)


@pytest.mark.usefixtures("short_busy_timeout")
async def test_runs_hit_by_a_locked_database_finish_after_a_restart(tmp_path: Path) -> None:
    state = tmp_path / "state"
    config = {"agent": {"subagents": {"maxConcurrent": 4}}}
    script = script_with_jobs(0.2)
    async with running_gateway(tmp_path, config=config, script=script, state_dir=state) as gw:
        run_ids = await spawn_then_lock(gw, state, 8)
        # The outbox loop outlived the lock: a run spawned now is announced.
        ctx = await chat_context(gw, ORIGIN)
        (late,) = await spawn_runs(gw, ctx, ["job late"])
        assert (await gw.delivery(late)).state == "delivered"
        first = Counter(m.run_id for m in gw.channel.sent if m.kind == "announce")
        left = [r.run_id for r in await gw.db.runs.list() if not r.finished]
    async with running_gateway(tmp_path, config=config, script=script, state_dir=state) as gw:
        runs = await wait_final(gw, [*run_ids, late], GUARD_SECONDS)
        for item in await gw.db.outbox.list(states=["pending"]):
            await gw.delivery(item.run_id or "")
        second = Counter(m.run_id for m in gw.channel.sent if m.kind == "announce")
        outbox = await gw.db.outbox.list()
    print(f"runs left unfinished by the lock until the restart: {len(left)} of {len(run_ids)}")
    assert {run.status for run in runs} <= FINISHED_STATUSES
    assert {item.state for item in outbox} <= {"delivered", "failed"}
    assert duplicates(first + second) == {}
    delivered = {item.run_id for item in outbox if item.state == "delivered"}
    assert set(first + second) == delivered
    assert delivered | {i.run_id for i in outbox if i.state == "failed"} == {*run_ids, late}
    audit = audit_transcripts(state)
    assert (audit.invalid, audit.torn, audit.headless) == ([], [], [])


@pytest.mark.usefixtures("short_busy_timeout")
async def test_runs_reach_a_final_status_once_a_database_lock_is_released(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    config = {"agent": {"subagents": {"maxConcurrent": 4}}}
    script = script_with_jobs(0.2)
    async with running_gateway(tmp_path, config=config, script=script, state_dir=state) as gw:
        run_ids = await spawn_then_lock(gw, state, 8)
        await wait_final(gw, run_ids, 3.0)


class LockingChannel(MemoryChannel):
    """A memory channel whose first send locks the database as it returns."""

    def __init__(self, state: Path) -> None:
        super().__init__()
        self.state = state
        self.lock: contextlib.AbstractAsyncContextManager[None] | None = None
        self.unlocked = asyncio.Event()

    async def send(self, message: OutboundMessage) -> SentMessage:
        sent = await super().send(message)
        if self.lock is None:
            self.lock = database_locked(self.state)
            await self.lock.__aenter__()
            asyncio.get_running_loop().call_later(LOCK_SECONDS, self.unlocked.set)
        return sent


@pytest.mark.usefixtures("short_busy_timeout")
async def test_a_delivery_recorded_under_a_locked_database_is_not_left_sending(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    async with running_gateway(tmp_path, script=script_with_jobs(0.0), state_dir=state) as gw:
        channel = LockingChannel(state)
        gw.channels["memory"] = channel
        ctx = await chat_context(gw, ORIGIN)
        (run_id,) = await spawn_runs(gw, ctx, ["job once"])
        try:
            async with asyncio.timeout(GUARD_SECONDS):
                await channel.unlocked.wait()
        finally:
            if channel.lock is not None:
                await channel.lock.__aexit__(None, None, None)
        await asyncio.sleep(LOCK_SECONDS)  # time for a retry of the record, were there one
        item = await gw.db.outbox.get_by_run(run_id)
        run = await gw.db.runs.get(run_id)
    assert [m.run_id for m in channel.sent if m.kind == "announce"] == [run_id]
    assert item is not None
    assert item.state == "delivered", item
    assert run is not None
    assert run.announce_state == "delivered", run
