"""Issue 26: scheduled runs, beside a bare ``asyncio`` timer (``python -m bench.schedules``).

``jobs`` jobs fire every minute, their due times spread evenly over the minute, held by one
process: the real :class:`~gateway.schedules.scheduler.Scheduler` and
:class:`~gateway.schedules.store.JobsTable` on a SQLite state database. Each occurrence is
recorded with its run in the run's own transaction, as in the gateway; the spawn door here
writes the run and its session but starts no model (the figure is the scheduler's, not a
turn's). The baseline holds the same due times as ``loop.call_at`` handles that do nothing
but note when they ran.

Figures, over ``minutes`` minutes: the delay from an occurrence's due time to its run being
recorded (p50, p99, ms); the RSS each job adds (bytes); the CPU seconds per minute of wall
time, which is all the scheduler's: nothing else runs. And with those jobs in the table, the
time to read one chat's jobs (the web chat page and ``/schedules`` ask after each turn) by
the chat's own query, beside reading every job and keeping the chat's.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench._common import Row, format_table, percentile, row, rss_bytes, settle_memory
from gateway.schedules.scheduler import Scheduler
from gateway.schedules.service import ChatScope
from gateway.schedules.store import JobRecord, JobsTable
from gateway.schema.targets import ChatTarget, parse_target
from gateway.state import (
    RunProgress,
    RunRecord,
    RunRequest,
    SessionRecord,
    SqliteStateDB,
    StateDB,
)
from gateway.subagents.spawn import Occurrence, SpawnAccepted, SpawnRequest

PERIOD = 60.0
QUICK: dict[str, Any] = {"jobs": 1000, "minutes": 0.5}
#: Reads of one chat's jobs timed, for the p50.
CHAT_READS = 20


class RecordingDoor:
    """Writes the run and its session with the occurrence's records, as the spawn door does
    for an occurrence, and notes when each run was recorded."""

    def __init__(self, db: StateDB) -> None:
        self._db = db
        self.delays: list[float] = []

    def target(self, text: str) -> ChatTarget:
        return parse_target(text, {"webchat": "default"})

    async def spawn(
        self,
        target: ChatTarget | None,
        request: SpawnRequest,
        *,
        agent_id: str | None = None,
        occurrence: Occurrence | None = None,
    ) -> SpawnAccepted:
        assert occurrence is not None
        now = time.time()
        run_id = str(uuid.uuid4())
        key = f"agent:main:subagent:{run_id}"
        session = SessionRecord(
            key=key,
            session_id=run_id,
            agent_id="main",
            kind="subagent",
            created_at=now,
            updated_at=now,
        )
        run = RunRecord(
            run_id=run_id,
            child_session_key=key,
            child_session_id=run_id,
            request=RunRequest(
                requester_agent_id="main",
                agent_id="main",
                task=request.task,
                job_id=occurrence.job_id,
                occurrence_at=occurrence.at,
            ),
            # ended at once: the next minute's occurrence is not skipped
            progress=RunProgress(created_at=now, status="done"),
        )
        write = occurrence.write
        await self._db.runs.insert_spawn(
            run, session, max_live_siblings=1 << 30, also=lambda conn: write(conn, run_id)
        )
        self.delays.append(time.time() - occurrence.at)
        return SpawnAccepted(run_id, key)


def _jobs(count: int, start: float) -> list[JobRecord]:
    """``count`` jobs every minute, the first due ``start``, the rest spread over the minute."""
    out = []
    for n in range(count):
        due = start + PERIOD * n / count
        out.append(
            JobRecord(
                job_id=f"job-{n:05d}",
                trigger_kind="every",
                trigger_value="1m",
                timezone="UTC",
                anchor=due,
                agent_id="main",
                task="tick",
                to_target="webchat:bench",
                created_at=start,
                next_run_at=due,
            )
        )
    return out


async def _insert_all(db: StateDB, jobs: list[JobRecord]) -> None:
    table = JobsTable(db)
    for start in range(0, len(jobs), 500):
        await asyncio.gather(*(table.insert(job) for job in jobs[start : start + 500]))


async def _chat_reads(db: StateDB) -> tuple[float, float]:
    """p50 ms of reading a chat's jobs (a chat with none of the table's): by its query, and
    by reading every job and keeping the chat's."""
    table = JobsTable(db)
    chat = ChatScope("agent:main:webchat:someone", "webchat:someone")
    own: list[float] = []
    every: list[float] = []
    for _ in range(CHAT_READS):
        start = time.perf_counter()
        _ = [job for job in await table.of_chat(chat.session_key, chat.chat) if chat.owns(job)]
        own.append(time.perf_counter() - start)
        start = time.perf_counter()
        _ = [job for job in await table.list() if chat.owns(job)]
        every.append(time.perf_counter() - start)
    return percentile(own, 50) * 1000, percentile(every, 50) * 1000


async def _herald(
    jobs: int, minutes: float, tmp: Path
) -> tuple[list[float], float, float, tuple[float, float]]:
    settle_memory()
    before = rss_bytes()
    db = await SqliteStateDB.open(tmp / "herald.db")
    try:
        await _insert_all(db, _jobs(jobs, time.time() + 2.0))
        spawner = RecordingDoor(db)
        scheduler = Scheduler(
            jobs=JobsTable(db),
            door=spawner,
            runs=db.runs,
            count=lambda job, outcome: None,
            grace=lambda: 3600.0,
        )
        cpu = time.process_time()
        scheduler.start()
        await asyncio.sleep(2.0 + minutes * PERIOD)
        cpu = time.process_time() - cpu
        await scheduler.close()
        settle_memory()
        rss = (rss_bytes() - before) / jobs
        reads = await _chat_reads(db)
    finally:
        await db.close()
    return spawner.delays, rss, cpu / max(minutes, 1 / PERIOD), reads


async def _baseline(jobs: int, minutes: float) -> tuple[list[float], float, float]:
    loop = asyncio.get_running_loop()
    settle_memory()
    before = rss_bytes()
    delays: list[float] = []
    start = time.time() + 2.0
    handles: list[asyncio.TimerHandle] = []

    def fire(due: float) -> None:
        delays.append(time.time() - due)
        following = due + PERIOD
        handles.append(loop.call_at(loop.time() + (following - time.time()), fire, following))

    for n in range(jobs):
        due = start + PERIOD * n / jobs
        handles.append(loop.call_at(loop.time() + (due - time.time()), fire, due))
    rss = (rss_bytes() - before) / jobs
    cpu = time.process_time()
    await asyncio.sleep(2.0 + minutes * PERIOD)
    cpu = time.process_time() - cpu
    for handle in handles:
        handle.cancel()
    return delays, rss, cpu / max(minutes, 1 / PERIOD)


async def _measure(jobs: int, minutes: float) -> list[Row]:
    with tempfile.TemporaryDirectory() as tmp:
        delays, rss, cpu, (own, every) = await _herald(jobs, minutes, Path(tmp))
    bare, bare_rss, bare_cpu = await _baseline(jobs, minutes)
    if not delays:
        raise SystemExit("bench.schedules: no occurrence ran")
    return [
        row(
            f"due to run recorded, p50 ({jobs} jobs/min, ms)",
            percentile(delays, 50) * 1000,
            percentile(bare, 50) * 1000,
            "report",
        ),
        row(
            f"due to run recorded, p99 ({jobs} jobs/min, ms)",
            percentile(delays, 99) * 1000,
            percentile(bare, 99) * 1000,
            "report",
        ),
        row("RSS per job (bytes)", rss, bare_rss, "report", digits=0),
        row("CPU seconds per minute", cpu, bare_cpu, "report"),
        row("occurrences run", float(len(delays)), float(len(bare)), ">= 1x", digits=0),
        row(
            f"one chat's jobs read among {jobs}, p50 ms (vs reading every job)",
            own,
            every,
            "<= 1x",
        ),
    ]


def run(jobs: int = 10_000, minutes: float = 1.0) -> list[Row]:
    """``jobs`` jobs every minute for ``minutes`` minutes, then the bare timer as long."""
    rows = asyncio.run(_measure(jobs, minutes))
    print(format_table(rows))
    return rows


if __name__ == "__main__":
    run()
