"""Jobs and occurrences on both backends: an occurrence is recorded with its run in one
transaction that moves the job on only from the fire time it read, so a second writer of
the same due time rolls back whole; one run per job and due time, ever. A run's end is
counted for its job in the write that makes the run final, once."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gateway.schedules.bookkeeping import PAUSE_AFTER_FAILURES, run_ended
from gateway.schedules.store import JobRecord, JobsTable, OccurrenceTakenError, advance
from gateway.state import (
    Connection,
    Origin,
    RecordConflictError,
    RunProgress,
    RunRecord,
    RunRequest,
    SessionRecord,
    StateDB,
)

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
        request=RunRequest(
            requester_agent_id="main", agent_id="main", task="t", job_id=job_id, occurrence_at=at
        ),
        progress=RunProgress(created_at=at),
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


async def test_one_run_per_job_and_due_time(db: StateDB) -> None:
    first, first_session = run_of(1)
    await db.runs.insert_spawn(first, first_session, max_live_siblings=10)
    again, again_session = run_of(2)
    with pytest.raises(RecordConflictError):
        await db.runs.insert_spawn(again, again_session, max_live_siblings=10)


def count(conn: Connection, run: RunRecord) -> None:
    run_ended(conn, run)


async def test_each_end_is_counted_once_in_its_final_write_and_five_failures_pause(
    db: StateDB,
) -> None:
    jobs = JobsTable(db)
    await jobs.insert(job())
    last = None
    for n in range(PAUSE_AFTER_FAILURES):
        run, session = run_of(n + 1, at=DUE + n)
        origin = Origin(channel="webchat", account="default", chat_id="room")
        last = run = replace(run, request=replace(run.request, origin=origin))
        await db.runs.insert_spawn(run, session, max_live_siblings=10)
        await db.ends.finish_run(run.run_id, {"status": "error"}, now=DUE + n, also=count)
        current = await jobs.get("brief")
        assert current is not None
        assert (current.last_status, current.consecutive_failures) == ("error", n + 1)
        assert current.paused == (n == PAUSE_AFTER_FAILURES - 1)
    assert last is not None
    # A final run never changes: a second end of it is refused, and counts nothing.
    with pytest.raises(RecordConflictError):
        await db.ends.finish_run(last.run_id, {"status": "error"}, now=DUE + 9, also=count)
    final = await jobs.get("brief")
    assert final is not None
    assert (final.consecutive_failures, final.paused) == (PAUSE_AFTER_FAILURES, True)
    # The chat is told once, by the write that paused the job, where its runs announce.
    (notice,) = [item for item in await db.outbox.list() if item.kind == "notice"]
    assert (notice.channel, notice.chat_id) == ("webchat", "room")
    assert "brief is paused" in notice.text


async def test_another_end_starts_the_count_again_and_an_at_job_goes_with_its_run(
    db: StateDB,
) -> None:
    jobs = JobsTable(db)
    await jobs.insert(replace(job(), consecutive_failures=3))
    run, session = run_of(1)
    await db.runs.insert_spawn(run, session, max_live_siblings=10)
    await db.ends.finish_run(run.run_id, {"status": "cancelled"}, now=DUE, also=count)
    current = await jobs.get("brief")
    assert current is not None
    assert (current.last_status, current.consecutive_failures) == ("cancelled", 0)
    once = replace(job("once"), trigger_kind="at", trigger_value="2027-01-15T08:00:00+00:00")
    await jobs.insert(replace(once, next_run_at=None))
    run, session = run_of(2, job_id="once")
    await db.runs.insert_spawn(run, session, max_live_siblings=10)
    await db.ends.finish_run(run.run_id, {"status": "done"}, now=DUE, also=count)
    assert await jobs.get("once") is None
