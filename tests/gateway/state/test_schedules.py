"""Jobs and occurrences on both backends: an occurrence is recorded with its run in one
transaction that moves the job on only from the fire time it read, so a second writer of
the same due time rolls back whole; one run per job and due time, ever."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.schedules.store import JobRecord, JobsTable, OccurrenceTakenError, advance
from gateway.state import RecordConflictError, RunRecord, SessionRecord, StateDB

DUE = 1_800_000_000.0


def job(job_id: str = "brief") -> JobRecord:
    return JobRecord(
        job_id=job_id,
        trigger_kind="every",
        trigger_value="1h",
        timezone="UTC",
        anchor=DUE,
        agent_id="main",
        task="t",
        to_target="webchat:room",
        created_at=DUE - 10,
        next_run_at=DUE,
    )


def run_of(n: int, job_id: str = "brief", at: float = DUE) -> tuple[RunRecord, SessionRecord]:
    key = f"agent:main:subagent:{n:08d}-0000-4000-8000-000000000000"
    session = SessionRecord(
        key=key, session_id=f"s{n}", agent_id="main", kind="subagent", created_at=at, updated_at=at
    )
    run = RunRecord(
        run_id=f"run-{n}",
        child_session_key=key,
        child_session_id=f"s{n}",
        requester_agent_id="main",
        agent_id="main",
        task="t",
        created_at=at,
        job_id=job_id,
        occurrence_at=at,
    )
    return run, session


async def test_one_writer_records_a_due_time_with_its_run(db: StateDB) -> None:
    jobs = JobsTable(db)
    read = await jobs.insert(job())
    first, first_session = run_of(1)
    await db.runs.insert_spawn(
        first,
        first_session,
        max_live_siblings=10,
        also=lambda conn: advance(
            conn, read, [(DUE, "ran")], DUE + 3600, DUE + 1, run_id=first.run_id
        ),
    )
    # A second writer that read the same fire time (another replica, its clock a second
    # on) rolls back whole: its run is not kept.
    second, second_session = run_of(2, at=DUE + 1)
    with pytest.raises(OccurrenceTakenError):
        await db.runs.insert_spawn(
            second,
            second_session,
            max_live_siblings=10,
            also=lambda conn: advance(
                conn, read, [(DUE + 1, "ran")], DUE + 3600, DUE + 2, run_id=second.run_id
            ),
        )
    assert await db.runs.get(second.run_id) is None
    (occurrence,) = await jobs.occurrences("brief")
    assert (occurrence.outcome, occurrence.run_id) == ("ran", first.run_id)
    now = await jobs.get("brief")
    assert now is not None
    assert (now.next_run_at, now.last_run_id, now.last_status) == (
        DUE + 3600,
        first.run_id,
        None,
    )
    ((unsettled, status),) = await jobs.unsettled()
    assert (unsettled.job_id, status) == ("brief", "queued")


async def test_one_run_per_job_and_due_time(db: StateDB) -> None:
    first, first_session = run_of(1)
    await db.runs.insert_spawn(first, first_session, max_live_siblings=10)
    again, again_session = run_of(2)
    with pytest.raises(RecordConflictError):
        await db.runs.insert_spawn(again, again_session, max_live_siblings=10)


async def test_five_failures_pause_once(db: StateDB) -> None:
    jobs = JobsTable(db)
    record = await jobs.insert(job())
    for n in range(5):

        def last_run(conn: Any, n: int = n) -> None:
            conn.execute(
                "UPDATE schedule_jobs SET last_run_id = ?, last_status = NULL WHERE job_id = ?",
                (f"run-{n}", "brief"),
            )

        await db.write(last_run)
        current = await jobs.get("brief")
        assert current is not None
        counted = await jobs.count_run(current, "error", pause_after=5)
        assert counted is not None
        assert counted.paused == (n == 4)
        # Counted once: a second count of the same run changes nothing.
        assert await jobs.count_run(current, "error", pause_after=5) is None
    final = await jobs.get(record.job_id)
    assert final is not None
    assert (final.consecutive_failures, final.paused) == (5, True)
