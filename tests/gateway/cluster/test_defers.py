"""Deferring the cluster's jobs: a burst of defers goes in few statements, each job keeps
its own lock and the order it was submitted in, and a job whose run waits already is
refused alone — the others of its statement are deferred all the same."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from procrastinate import App, PsycopgConnector
from procrastinate.jobs import Job
from procrastinate.manager import JobManager

from gateway.cluster.defers import Defers
from gateway.state.postgres import PgStateDB

pytestmark = pytest.mark.postgres

QUEUE = "defers-test"


@pytest.fixture
async def app(pg_url: str, tmp_path: Path) -> AsyncIterator[App]:
    db = await PgStateDB.connect(pg_url, replica_id="defers", state_dir=tmp_path)  # the schema
    await db.close()
    queue_app = App(connector=PsycopgConnector(conninfo=pg_url))
    await queue_app.open_async()
    try:
        yield queue_app
    finally:
        await queue_app.close_async()


def job_of(app: App, run_id: str) -> Job:
    task = app.tasks.get("test.run") or app.task(name="test.run", queue=QUEUE)(_run)
    return task.configure(lock=run_id, queueing_lock=run_id).make_new_job(run_id=run_id)


def _run(run_id: str) -> None:
    """The test task (never executed: no worker runs here)."""


def waiting_jobs(pg_url: str) -> list[str]:
    """The locks of the waiting jobs, in job id order."""
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute(
            "SELECT lock FROM procrastinate_jobs WHERE status = 'todo' ORDER BY id"
        ).fetchall()
    return [str(row[0]) for row in rows]


async def test_a_burst_of_defers_goes_in_few_statements_in_order(
    app: App, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    statements: list[int] = []
    real = JobManager.batch_defer_jobs_async

    async def counted(self: JobManager, jobs: list[Job], *args: Any, **kwargs: Any) -> Any:
        statements.append(len(jobs))
        return await real(self, jobs, *args, **kwargs)

    monkeypatch.setattr(JobManager, "batch_defer_jobs_async", counted)
    defers = Defers(app.job_manager)
    names = [f"run-{n:02d}" for n in range(30)]
    outcomes = await asyncio.gather(*(defers.defer(job_of(app, name)) for name in names))
    assert outcomes == [True] * 30
    # Submitted before the loop's next turn, they go in one statement, not thirty.
    assert statements == [30]
    assert waiting_jobs(pg_url) == names  # ids in the order submitted


async def test_a_run_with_a_waiting_job_is_refused_alone(app: App, pg_url: str) -> None:
    defers = Defers(app.job_manager)
    assert await defers.defer(job_of(app, "run-taken"))
    names = ["run-a", "run-taken", "run-b"]
    outcomes = await asyncio.gather(
        defers.defer(job_of(app, "run-first")),  # in flight while the three wait
        *(defers.defer(job_of(app, name)) for name in names),
    )
    assert outcomes == [True, True, False, True]
    assert waiting_jobs(pg_url) == ["run-taken", "run-first", "run-a", "run-b"]


async def test_a_defer_the_database_refuses_raises_for_its_own_jobs(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def refused(self: JobManager, jobs: list[Job], *args: Any, **kwargs: Any) -> Any:
        raise psycopg.OperationalError("the server is gone")

    monkeypatch.setattr(JobManager, "batch_defer_jobs_async", refused)
    defers = Defers(app.job_manager)
    with pytest.raises(psycopg.OperationalError, match="gone"):
        await defers.defer(job_of(app, "run-x"))
