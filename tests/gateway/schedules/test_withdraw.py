"""Deleting or pausing a job withdraws its runs that have not started: a storm of queued
occurrences, then their jobs deleted (or paused) through the HTTP API, and none of them runs
or posts — each ends ``cancelled`` before it started, its announce ``skipped``, its result
taken (no conversation is told), and its error says why."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp

from tests.gateway.harness import Harness, hang_guard, running_gateway
from tests.gateway.slack_fake import slack_on_fake

CHANNEL = "C0123456789"
#: Occurrences queued behind the one running run: deleted, then paused.
DELETED = 10
PAUSED = 3


async def call(
    http: aiohttp.ClientSession, method: str, path: str, body: dict[str, Any] | None = None
) -> dict[str, Any]:
    async with http.request(method, path, json=body) as response:
        data: dict[str, Any] = await response.json()
        assert response.status in (200, 201, 202), data
        return data


async def started_job(http: aiohttp.ClientSession, job_id: str, task: str) -> str:
    """Create an hourly job for the channel and start an occurrence now; its run id."""
    body = {"id": job_id, "every": "1h", "task": task, "to": f"slack:{CHANNEL}"}
    await call(http, "POST", "/v1/schedules", body)
    return str((await call(http, "POST", f"/v1/schedules/{job_id}/run"))["runId"])


async def run_status(gw: Harness, run_id: str, status: str) -> None:
    async with hang_guard(f"run {run_id} {status}"):
        while (run := await gw.db.runs.get(run_id)) is None or run.progress.status != status:  # noqa: ASYNC110 - no event for a run starting
            await asyncio.sleep(0.02)


async def test_deleting_or_pausing_a_job_withdraws_its_queued_runs(tmp_path: Path) -> None:
    # One sub-agent slot; room for the whole storm under the chat's session.
    config = {"agent": {"subagents": {"maxConcurrent": 1, "maxChildrenPerSession": 20}}}
    async with (
        slack_on_fake({CHANNEL}) as (fake, slack),
        running_gateway(tmp_path, config=config, channels={"slack": slack}, listen=True) as gw,
        aiohttp.ClientSession(base_url=gw.base_url) as http,
    ):
        # One run holds the only sub-agent slot; every occurrence after it waits, queued.
        blocker = await started_job(http, "blocker", "task-slow: hold the lane")
        await run_status(gw, blocker, "running")
        storm = {
            f"storm-{n}": await started_job(http, f"storm-{n}", f"task: storm {n}")
            for n in range(DELETED + PAUSED)
        }
        for run_id in storm.values():
            run = await gw.db.runs.get(run_id)
            assert run is not None
            assert run.progress.status == "queued"

        for n, job_id in enumerate(storm):
            if n < DELETED:
                await call(http, "DELETE", f"/v1/schedules/{job_id}")
            else:
                await call(http, "POST", f"/v1/schedules/{job_id}/pause")
        # The slot is free again: a withdrawn run that were still queued would start now.
        await call(http, "POST", f"/v1/runs/{blocker}/abort")
        await gw.finished(blocker)

        for n, (job_id, run_id) in enumerate(storm.items()):
            run = await gw.finished(run_id)
            why = "deleted" if n < DELETED else "paused"
            assert (run.progress.status, run.progress.started_at) == ("cancelled", None), job_id
            assert run.progress.error == f"its scheduled job was {why}"
            assert (run.delivery.announce_state, run.delivery.state) == ("skipped", "consumed")
            assert await gw.db.outbox.get_by_run(run_id) is None
        await gw.runs_idle()
        queued = await gw.db.read(lambda c: c.execute("SELECT run_id FROM outbox").fetchall())
        assert [row[0] for row in queued] == [blocker]  # its own "was cancelled", only
        posts = await fake.wait_posts(1)
        assert not any("storm" in post.text for post in posts)
        # A paused job keeps its place: resumed, it runs again on its schedule.
        shown = await call(http, "GET", f"/v1/schedules/storm-{DELETED}")
        assert shown["paused"] is True


async def test_a_run_withdrawn_as_the_lane_takes_it_never_starts(tmp_path: Path) -> None:
    """The withdrawal's mark lands, but its stop does not reach the lane first (under load the
    lane takes the run between the two): the run must still never start, rather than run to
    its end and then post nothing (a finished run silently dropped)."""
    config = {"agent": {"subagents": {"maxConcurrent": 1}}}
    async with (
        slack_on_fake({CHANNEL}) as (_fake, slack),
        running_gateway(tmp_path, config=config, channels={"slack": slack}, listen=True) as gw,
        aiohttp.ClientSession(base_url=gw.base_url) as http,
    ):
        blocker = await started_job(http, "blocker", "task-slow: hold the lane")
        await run_status(gw, blocker, "running")
        queued = await started_job(http, "late", "task: withdrawn late")
        # Only the mark: the lane still holds the run, and takes it when the slot frees.
        assert await gw.db.runs.withdraw_queued(queued, "its scheduled job was paused")
        await call(http, "POST", f"/v1/runs/{blocker}/abort")
        run = await gw.finished(queued)
        assert (run.progress.status, run.progress.started_at) == ("cancelled", None)
        assert run.progress.error == "its scheduled job was paused"
        assert await gw.db.outbox.get_by_run(queued) is None
