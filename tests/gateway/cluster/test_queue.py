"""The cluster's sub-agent lane on procrastinate: two real gateways (replicas ``a`` and
``b``) in the test's loop, one PostgreSQL schema, one state directory."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from procrastinate.manager import JobManager

from gateway.state import RunRecord, StateDB
from gateway.subagents import SpawnRequest
from tests.gateway.harness import HANG_GUARD_SECONDS, TEST_SCRIPT, Harness, running_gateway

pytestmark = pytest.mark.postgres

#: Runs that take a moment (so both replicas get some), and one that takes long.
SCRIPT: dict[str, Any] = {
    "rules": [
        {"match": r"^task-short: (.+)$", "reply": "short $1", "delaySeconds": 0.05},
        {"match": r"^task-long: (.+)$", "reply": "long $1", "delaySeconds": 600},
        *TEST_SCRIPT["rules"],
    ],
    "default": TEST_SCRIPT["default"],
}


@asynccontextmanager
async def replicas(
    tmp_path: Path, pg_url: str, names: Iterable[str], *, width: int = 2
) -> AsyncIterator[dict[str, Harness]]:
    """Gateways sharing ``pg_url`` and one state directory, each with its own config dir."""
    state = tmp_path / "state"
    async with AsyncExitStack() as stack:
        started: dict[str, Harness] = {}
        for name in names:
            folder = tmp_path / name
            folder.mkdir()
            started[name] = await stack.enter_async_context(
                running_gateway(
                    folder,
                    script=SCRIPT,
                    state_dir=state,
                    database_url=pg_url,
                    replica_id=name,
                    config={"agent": {"subagents": {"maxConcurrent": width}}},
                )
            )
        yield started


async def until_final(db: StateDB, run_ids: Iterable[str]) -> dict[str, RunRecord]:
    """Poll the shared database until every run is final (another replica may end it, and
    this replica's run feed only hears of the runs it ends itself)."""
    waiting = set(run_ids)
    found: dict[str, RunRecord] = {}
    async with asyncio.timeout(HANG_GUARD_SECONDS):
        while waiting:
            for run_id in list(waiting):
                run = await db.runs.get(run_id)
                if run is not None and run.progress.finished:
                    found[run_id] = run
                    waiting.discard(run_id)
            await asyncio.sleep(0.05)
    return found


async def until(check: Callable[[], Awaitable[bool]]) -> None:
    """Poll ``check`` (the shared database: no event reaches this replica) until true."""
    async with asyncio.timeout(HANG_GUARD_SECONDS):
        while True:
            if await check():
                return
            await asyncio.sleep(0.05)


async def until_running(db: StateDB, run_id: str) -> None:
    async def running() -> bool:
        run = await db.runs.get(run_id)
        return run is not None and run.progress.status == "running"

    await until(running)


async def announce_events(gw: Harness, run: RunRecord) -> int:
    records = (await gw.store.read(run.child_session_key)).records
    return sum(1 for r in records if r["type"] == "event" and r.get("event") == "announce")


async def job_statuses(pg_url: str, run_id: str) -> list[str]:
    async with await psycopg.AsyncConnection.connect(pg_url) as conn:
        cursor = await conn.execute(
            "SELECT status::text FROM procrastinate_jobs WHERE lock = %s ORDER BY id", [run_id]
        )
        return [str(row[0]) for row in await cursor.fetchall()]


async def test_two_replicas_share_the_runs_each_executed_and_announced_once(
    tmp_path: Path, pg_url: str
) -> None:
    async with replicas(tmp_path, pg_url, ["a", "b"]) as gws:
        a, b = gws["a"], gws["b"]
        run_ids: list[str] = []
        for n in range(40):  # every chat reaches replica a; both execute runs
            chat = f"c{n}"
            await a.say(f"bg task-short: {n}", chat_id=chat)
            run_ids.append((await a.reply(chat)).text.split()[-1])
        runs = await until_final(a.db, run_ids)
        await a.runs_idle()
        await b.runs_idle()

        assert {run.progress.status for run in runs.values()} == {"done"}
        # Each run was one lane job on exactly one replica, and both replicas worked.
        executed = {name: gw.lanes.subagent.stats().done for name, gw in gws.items()}
        assert sum(executed.values()) == 40, executed
        assert all(count > 0 for count in executed.values()), executed
        # Announced once: one outbox item and one announce step per run.
        items = [item.run_id or "" for item in await a.db.outbox.list()]
        assert sorted(items) == sorted(run_ids)
        for run in runs.values():
            assert await announce_events(a, run) == 1
            assert (run.progress.result_text or "").startswith("short ")


async def test_abort_from_another_replica_ends_the_run_cancelled_where_it_runs(
    tmp_path: Path, pg_url: str
) -> None:
    async with replicas(tmp_path, pg_url, ["b"], width=1) as gws:
        b = gws["b"]
        ctx = await b.context()
        running = str((await b.spawn(ctx, SpawnRequest(task="task-long: x")))["runId"])
        await until_running(b.db, running)
        # Queued behind it (b is full): withdrawn, its job never starts.
        queued = str((await b.spawn(ctx, SpawnRequest(task="task-long: y")))["runId"])

        async def job_waits() -> bool:
            return await job_statuses(pg_url, queued) == ["todo"]

        await until(job_waits)
        await b.runs.abort(queued)
        assert (await job_statuses(pg_url, queued))[0] == "cancelled"  # (then its announce's)
        (tmp_path / "a").mkdir()
        async with running_gateway(
            tmp_path / "a",
            script=SCRIPT,
            state_dir=tmp_path / "state",
            database_url=pg_url,
            replica_id="a",
            config={"agent": {"subagents": {"maxConcurrent": 1}}},
        ) as a:
            # From replica a, which does not execute it: the run stops on b.
            tree = await a.runs.abort_tree(running)
            assert tree.run.run_id == running
            runs = await until_final(a.db, [running, queued])
            await b.runs_idle()
            await a.runs_idle()
            assert runs[running].progress.status == "cancelled"
            assert runs[queued].progress.status == "cancelled"
            assert runs[queued].progress.started_at is None
            # b stopped its run as an abort, not a shutdown: ended, announced once.
            assert b.lanes.subagent.active == 0
            for run in runs.values():
                assert await announce_events(b, run) == 1
                # Nothing changed it later (but its completion, handed on to the requester).
                later = await b.db.runs.get(run.run_id)
                assert later is not None
                delivery = dataclasses.replace(later.delivery, state=run.delivery.state)
                assert dataclasses.replace(later, delivery=delivery) == run
            assert "doing" not in await job_statuses(pg_url, running)


async def test_a_run_left_without_a_job_is_swept_and_run(tmp_path: Path, pg_url: str) -> None:
    async with replicas(tmp_path, pg_url, ["a"]) as gws:
        a = gws["a"]
        ctx = await a.context()
        manager = a.runs
        submit = manager.submit
        # As a crash between recording the run and queueing its job leaves it.
        manager.submit = lambda run_id: None  # type: ignore[method-assign]
        try:
            run_id = str((await a.spawn(ctx, SpawnRequest(task="task: swept")))["runId"])
        finally:
            manager.submit = submit  # type: ignore[method-assign]
        assert await job_statuses(pg_url, run_id) == []
        run = (await until_final(a.db, [run_id]))[run_id]
        assert run.progress.status == "done"
        assert run.progress.result_text == "done: swept"


async def test_runs_start_in_the_order_they_were_spawned_however_their_defers_go(
    tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job's id decides when it runs: the first spawn's defer, slow on its connection,
    must still give it the first job, or a width-1 replica runs the spawns out of order."""
    real_defer = JobManager.batch_defer_jobs_async
    calls = 0

    async def defer(self: JobManager, *args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            await asyncio.sleep(0.3)  # the later spawn's defer would overtake this one
        return await real_defer(self, *args, **kwargs)

    monkeypatch.setattr(JobManager, "batch_defer_jobs_async", defer)
    async with replicas(tmp_path, pg_url, ["a"], width=1) as gws:
        gw = gws["a"]
        ctx = await gw.context("agent:main:memory:channel:c1")
        run_ids = [
            (await gw.spawn(ctx, SpawnRequest(task=f"task: {name}")))["runId"]
            for name in ("first", "second", "third")
        ]
        runs = await until_final(gw.db, run_ids)

    started = sorted(run_ids, key=lambda run_id: runs[run_id].progress.started_at or 0.0)
    assert started == run_ids
