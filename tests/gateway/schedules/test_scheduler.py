"""Occurrences on the wire fakes: a due job starts a sub-agent run whose announce reaches the
job's Slack chat and thread with ``• job <id>`` on its stats line and ``jobId`` on the run;
missed times are recorded ``missed`` (the latest runs once while younger than the grace);
an occurrence whose previous run still runs is ``skipped``; five failed runs in a row pause
the job and tell its chat once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson

from gateway.metrics import METRICS
from gateway.schedules.setup import SCHEDULER, SCHEDULES
from gateway.schedules.store import JobRecord, JobsTable, OccurrenceRecord
from gateway.subagents import run_view
from tests.fakes.slack import FakeSlack
from tests.gateway.harness import Harness, hang_guard, running_gateway
from tests.gateway.slack_fake import slack_on_fake

CHANNEL = "C0123456789"
THREAD = "1700000000.000100"


@asynccontextmanager
async def gateway(
    tmp_path: Path, *, grace: float = 3600
) -> AsyncIterator[tuple[Harness, FakeSlack, JobsTable]]:
    """A gateway whose Slack channel talks to the fake."""
    config = {"schedules": {"misfireGraceSeconds": grace}}
    async with (
        slack_on_fake({CHANNEL}) as (fake, slack),
        running_gateway(tmp_path, config=config, channels={"slack": slack}) as gw,
    ):
        yield gw, fake, JobsTable(gw.db)


def job(job_id: str, task: str, *, every: str = "1h", due: float, **extra: Any) -> JobRecord:
    return JobRecord(
        job_id=job_id,
        trigger_kind="every",
        trigger_value=every,
        timezone="UTC",
        anchor=due,
        agent_id="main",
        task=task,
        to_target=f"slack:{CHANNEL}/{THREAD}",
        created_at=due,
        next_run_at=due,
        **extra,
    )


async def until(what: str, check: Callable[[], Awaitable[bool]]) -> None:
    """Wait for a condition (never for a time)."""
    async with hang_guard(what):
        while not await check():  # noqa: ASYNC110 - the database has no event to wait on
            await asyncio.sleep(0.02)


async def occurrences(jobs: JobsTable, job_id: str) -> list[OccurrenceRecord]:
    return sorted(await jobs.occurrences(job_id, limit=100), key=lambda o: o.occurrence_at)


async def make_due(gw: Harness, job_id: str) -> float:
    """Bring ``job_id``'s next fire time to now (as the clock would) and wake the scheduler."""
    now = time.time()
    await gw.db.write(
        lambda c: c.execute(
            "UPDATE schedule_jobs SET next_run_at = ? WHERE job_id = ?", (now, job_id)
        )
    )
    gw.app[SCHEDULER].wake()
    return now


async def test_an_occurrence_announces_in_its_chat_and_thread_naming_the_job(
    tmp_path: Path,
) -> None:
    async with gateway(tmp_path) as (gw, fake, jobs):
        due = float(int(time.time()) - 1)
        await jobs.insert(job("brief", "task: the brief", due=due))
        gw.app[SCHEDULER].wake()
        (post,) = await fake.wait_posts(1)
        assert (post.channel, post.thread_ts) == (CHANNEL, THREAD)
        assert post.text.startswith("ANNOUNCE: done: the brief")
        assert post.text.endswith("• job brief")
        (ran,) = await occurrences(jobs, "brief")
        assert (ran.occurrence_at, ran.outcome) == (due, "ran")
        assert ran.run_id is not None
        run = await gw.db.runs.get(ran.run_id)
        assert run is not None
        assert (run.request.job_id, run.request.occurrence_at, run.request.depth) == (
            "brief",
            due,
            1,
        )
        thread_key = THREAD.replace(".", "_")
        assert (
            run.request.parent_session_key
            == f"agent:main:slack:channel:c0123456789:thread:{thread_key}"
        )
        shown = orjson.loads(run_view(run).wire_json())
        assert shown["jobId"] == "brief"
        assert shown["occurrenceAt"] is not None
        after = await jobs.get("brief")
        assert after is not None
        assert after.next_run_at == due + 3600
        assert after.last_run_id == run.run_id
        counted = gw.app[METRICS].registry.get_sample_value(
            "herald_schedule_occurrences_total", {"job": "brief", "outcome": "ran"}
        )
        assert counted == 1


async def test_missed_times_are_recorded_and_the_latest_runs_within_the_grace(
    tmp_path: Path,
) -> None:
    async with gateway(tmp_path, grace=3600) as (gw, fake, jobs):
        now = float(int(time.time()))
        # Down for 2.5 hours: an hourly job missed three times, the latest 30 minutes ago.
        hourly = now - 2.5 * 3600
        await jobs.insert(job("hourly", "task: hourly", due=hourly))
        # A daily job whose one due time is 1.5 hours old: older than the grace.
        daily = now - 1.5 * 3600
        await jobs.insert(job("daily", "task: daily", every="1d", due=daily))
        gw.app[SCHEDULER].wake()
        await fake.wait_posts(1)

        async def both_recorded() -> bool:
            return len(await occurrences(jobs, "hourly")) == 3 and bool(
                await occurrences(jobs, "daily")
            )

        await until("occurrences recorded", both_recorded)
        hourly_seen = await occurrences(jobs, "hourly")
        assert [(o.occurrence_at, o.outcome) for o in hourly_seen] == [
            (hourly, "missed"),
            (hourly + 3600, "missed"),
            (hourly + 7200, "ran"),
        ]
        assert [(o.occurrence_at, o.outcome) for o in await occurrences(jobs, "daily")] == [
            (daily, "missed")
        ]
        await gw.runs_idle()
        runs = await gw.db.runs.list(limit=10)
        assert [(r.request.job_id, r.request.occurrence_at) for r in runs] == [
            ("hourly", hourly + 7200)
        ]
        daily_job = await jobs.get("daily")
        assert daily_job is not None
        assert daily_job.next_run_at == daily + 86400


async def test_an_occurrence_is_skipped_while_the_previous_run_is_live(tmp_path: Path) -> None:
    async with gateway(tmp_path) as (gw, _fake, jobs):
        await jobs.insert(job("slow", "task-slow: report", due=time.time() - 1))
        gw.app[SCHEDULER].wake()

        async def started() -> bool:
            return len(await occurrences(jobs, "slow")) == 1

        await until("the first occurrence", started)
        second = await make_due(gw, "slow")

        async def recorded() -> bool:
            return len(await occurrences(jobs, "slow")) == 2

        await until("the second occurrence", recorded)
        first, skipped = await occurrences(jobs, "slow")
        assert (first.outcome, skipped.outcome) == ("ran", "skipped")
        assert (skipped.occurrence_at, skipped.run_id) == (second, None)
        assert [r.run_id for r in await gw.db.runs.list(limit=10)] == [first.run_id]


async def test_five_failed_runs_in_a_row_pause_the_job_and_tell_its_chat_once(
    tmp_path: Path,
) -> None:
    async with gateway(tmp_path) as (gw, fake, jobs):
        await jobs.insert(job("flaky", "task-fail: fetch", due=time.time() - 1))
        gw.app[SCHEDULER].wake()
        for attempt in range(1, 6):

            async def ran(count: int = attempt) -> bool:
                return len(await occurrences(jobs, "flaky")) == count

            await until(f"occurrence {attempt}", ran)
            run_id = (await occurrences(jobs, "flaky"))[-1].run_id
            assert run_id is not None
            assert (await gw.finished(run_id)).progress.status == "error"
            if attempt < 5:
                await make_due(gw, "flaky")

        async def paused() -> bool:
            found = await jobs.get("flaky")
            return found is not None and found.paused

        gw.app[SCHEDULER].wake()
        await until("the pause", paused)
        await make_due(gw, "flaky")  # a paused job does not fire
        notices = await fake.wait_posts(6)
        await gw.app[SCHEDULER].run_pass()
        assert len(await occurrences(jobs, "flaky")) == 5
        told = [p for p in fake.posts if "is paused" in p.text]
        assert len(told) == 1
        assert (told[0].channel, told[0].thread_ts) == (CHANNEL, THREAD)
        assert "flaky" in told[0].text
        assert len(notices) == 6
        found = await jobs.get("flaky")
        assert found is not None
        assert found.consecutive_failures == 5


async def test_a_resumed_job_starts_from_its_next_time_after_now(tmp_path: Path) -> None:
    async with gateway(tmp_path) as (gw, _fake, jobs):
        now = float(int(time.time()))
        await jobs.insert(job("held", "task: held", due=now - 2.5 * 3600, paused=True))
        await gw.app[SCHEDULER].run_pass()
        assert await occurrences(jobs, "held") == []  # paused: nothing fires, nothing missed
        resumed = await gw.app[SCHEDULES].set_paused("held", False)
        assert resumed.next_run_at == now + 0.5 * 3600
        await gw.app[SCHEDULER].run_pass()
        assert await occurrences(jobs, "held") == []


async def test_last_status_is_the_last_finished_runs_while_the_next_one_runs(
    tmp_path: Path,
) -> None:
    async with gateway(tmp_path) as (gw, _fake, jobs):
        await jobs.insert(job("often", "task: first", due=time.time() - 1))
        gw.app[SCHEDULER].wake()

        async def started(count: int) -> str:
            async def recorded() -> bool:
                return len(await occurrences(jobs, "often")) == count

            await until(f"occurrence {count}", recorded)
            run_id = (await occurrences(jobs, "often"))[-1].run_id
            assert run_id is not None
            return run_id

        first = await started(1)
        assert (await gw.finished(first)).progress.status == "done"
        # Heard in the write that made the run final: no pass has to count it first.
        ended = await jobs.get("often")
        assert ended is not None
        assert (ended.last_run_id, ended.last_status) == (first, "done")
        # The job fires again before that run could be counted by anyone else, and its
        # next run is slow: the job shows the run going and the last one that finished.
        await gw.db.write(
            lambda c: c.execute(
                "UPDATE schedule_jobs SET task = 'task-slow: second' WHERE job_id = 'often'"
            )
        )
        await make_due(gw, "often")
        second = await started(2)
        going = await jobs.get("often")
        assert going is not None
        assert (going.last_run_id, going.last_status) == (second, "done")
        run = await gw.db.runs.get(second)
        assert run is not None
        assert not run.progress.finished
