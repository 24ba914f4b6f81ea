"""``/v1/schedules`` over HTTP on a running gateway: create (each mistake a 400 naming the
field), list, show with occurrences, run now (the run announces in the job's Slack thread),
pause and resume, delete; a declared job cannot be deleted or its id taken."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.sessions import iso_timestamp
from tests.fakes.slack import FakeSlack
from tests.gateway.harness import Harness, running_gateway
from tests.gateway.slack_fake import slack_on_fake

CHANNEL = "C0123456789"
THREAD = "1700000000.000100"
DECLARED = {
    "id": "declared-brief",
    "cron": "0 9 * * 1-5",
    "task": "task: brief",
    "to": "webchat:abc",
}


@asynccontextmanager
async def api(tmp_path: Path) -> AsyncIterator[tuple[Harness, FakeSlack, aiohttp.ClientSession]]:
    config = {"channels": {"webchat": {"enabled": True}}, "schedules": {"jobs": [DECLARED]}}
    async with (
        slack_on_fake({CHANNEL}) as (fake, slack),
        running_gateway(tmp_path, config=config, channels={"slack": slack}, listen=True) as gw,
        aiohttp.ClientSession(base_url=gw.base_url) as http,
    ):
        yield gw, fake, http


async def call(
    http: aiohttp.ClientSession, method: str, path: str, body: dict[str, Any] | None = None
) -> tuple[int, dict[str, Any]]:
    async with http.request(method, path, json=body) as response:
        return response.status, await response.json()


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"cron": "0 9 * * *", "every": "1h"}, "cron", "exactly one of cron, every and at"),
        ({}, "cron", "(this one has none)"),
        ({"cron": "0 9 * *"}, "cron", "is no crontab"),
        ({"every": "10s"}, "every", "shorter than schedules.minEverySeconds"),
        ({"at": "2020-01-01T00:00:00Z"}, "at", "is in the past"),
        ({"every": "1h", "timezone": "Mars/Olympus"}, "timezone", "unknown time zone"),
        ({"every": "1h", "to": "discord:123456789012345678"}, "to", "is not enabled"),
        ({"every": "1h", "to": "slack:nope"}, "to", "is no slack chat id"),
        ({"every": "1h", "agentId": "nobody"}, "agentId", "unknown agent 'nobody'"),
        ({"every": "1h", "id": "declared-brief"}, "id", "declared in the config file"),
        ({"every": "1h", "colour": "red"}, "colour", "unknown field"),
        # Hostile values: each a 400 naming its field, never a 500.
        ({"every": "3000000d"}, "every", "'3000000d' is longer than 366d"),
        ({"every": "9" * 40 + "d"}, "every", "at most 16 characters"),
        ({"at": "9999-12-31T23:59:59-14:00"}, "at", "is out of the range of times"),
        ({"at": "0001-01-01T00:00:00+14:00"}, "at", "is out of the range of times"),
        ({"at": "2999-01-01T00:00:00Z"}, "at", "is more than 10 years ahead"),
        ({"every": "1h", "timezone": "America"}, "timezone", "unknown time zone 'America'"),
        ({"every": "1h", "timezone": "x" * 300}, "timezone", "at most 64 characters"),
        ({"cron": "0 9 * * *", "timezone": "Etc/../../x"}, "timezone", "unknown time zone"),
        ({"cron": "0 0 30 2 *"}, "cron", "'0 0 30 2 *' never fires"),
        ({"cron": "1 " * 200}, "cron", "at most 200 characters"),
        ({"every": "1h", "runTimeoutSeconds": 1e300}, "runTimeoutSeconds", "less than or equal"),
        ({"every": "1h", "to": f"  slack:{CHANNEL}  x"}, "to", "is no slack chat id"),
    ],
)
async def test_a_bad_job_is_a_400_naming_the_field(
    tmp_path: Path, body: dict[str, Any], field: str, words: str
) -> None:
    async with api(tmp_path) as (_gw, _fake, http):
        job = {"task": "task: x", "to": f"slack:{CHANNEL}", **body}
        status, answer = await call(http, "POST", "/v1/schedules", job)
        assert status == (409 if field == "id" else 400), answer
        assert answer["error"]["field"] == field
        assert words in answer["error"]["message"]


async def test_a_job_is_created_listed_run_paused_resumed_and_deleted(tmp_path: Path) -> None:
    async with api(tmp_path) as (gw, fake, http):
        body = {"every": "1h", "task": "task: tides", "to": f"slack:{CHANNEL}/{THREAD}"}
        job_created_after = iso_timestamp(time.time() + 3500)
        status, job = await call(http, "POST", "/v1/schedules", body)
        assert status == 201, job
        job_id = job["id"]
        assert job_id.startswith("task-tides-")
        assert job["trigger"] == {"every": "1h"}
        assert job["nextRunAt"] > job_created_after  # one period on, not at once
        assert (job["declared"], job["paused"]) == (False, False)

        status, listed = await call(http, "GET", "/v1/schedules")
        assert status == 200
        assert {j["id"] for j in listed["jobs"]} == {job_id, "declared-brief"}
        declared = next(j for j in listed["jobs"] if j["id"] == "declared-brief")
        assert declared["declared"] is True
        assert declared["trigger"] == {"cron": "0 9 * * 1-5", "timezone": "UTC"}

        status, started = await call(http, "POST", f"/v1/schedules/{job_id}/run")
        assert status == 202, started
        run = await gw.finished(started["runId"])
        assert run.request.job_id == job_id
        (post,) = await fake.wait_posts(1)
        assert (post.channel, post.thread_ts) == (CHANNEL, THREAD)
        assert post.text.endswith(f"• job {job_id}")
        status, runs = await call(http, "GET", "/v1/runs")
        assert [r["jobId"] for r in runs["runs"]] == [job_id]

        status, shown = await call(http, "GET", f"/v1/schedules/{job_id}")
        assert status == 200
        assert shown["lastRunId"] == run.run_id
        assert [(o["outcome"], o["runId"]) for o in shown["occurrences"]] == [("ran", run.run_id)]

        status, paused = await call(http, "POST", f"/v1/schedules/{job_id}/pause")
        assert (status, paused["paused"]) == (200, True)
        status, resumed = await call(http, "POST", f"/v1/schedules/{job_id}/resume")
        assert (status, resumed["paused"]) == (200, False)

        status, gone = await call(http, "DELETE", f"/v1/schedules/{job_id}")
        assert (status, gone["id"]) == (200, job_id)
        status, missing = await call(http, "GET", f"/v1/schedules/{job_id}")
        assert (status, missing["error"]["code"]) == (404, "job_not_found")


async def test_a_declared_job_is_paused_and_resumed_but_not_deleted(tmp_path: Path) -> None:
    async with api(tmp_path) as (_gw, _fake, http):
        status, refused = await call(http, "DELETE", "/v1/schedules/declared-brief")
        assert (status, refused["error"]["code"]) == (409, "job_declared")
        status, paused = await call(http, "POST", "/v1/schedules/declared-brief/pause")
        assert (status, paused["paused"]) == (200, True)
