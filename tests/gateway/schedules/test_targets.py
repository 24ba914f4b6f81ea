"""A job's target is stored in its one written form, so the chat it posts to finds it: a job
aimed at a DM with its target padded with spaces (or its channel written in capitals) is in
that DM's ``/schedules`` and ``/unschedule`` stops it — whether it came through the HTTP API
or was stored raw by an earlier version (rewritten at start). The config file's jobs are in
``test_config``."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest

from gateway.schedules.store import JobRecord, JobsTable
from tests.fakes.slack import FakeSlack
from tests.gateway.harness import Harness, running_gateway
from tests.gateway.slack_fake import slack_on_fake

DM = "D0123456789"


@asynccontextmanager
async def victim(
    tmp_path: Path,
) -> AsyncIterator[tuple[Harness, FakeSlack]]:
    """A gateway whose Slack has the victim's DM."""
    async with (
        slack_on_fake({DM}) as (fake, slack),
        running_gateway(tmp_path, channels={"slack": slack}, listen=True) as gw,
    ):
        await fake.wait_connected()
        yield gw, fake


async def in_the_dm(fake: FakeSlack, text: str) -> str:
    """What the gateway answers a person typing ``text`` in the DM."""
    before = len(fake.posts)
    await fake.push_event(fake.message(text, channel=DM))
    return (await fake.wait_posts(before + 1))[before].text


async def the_dm_sees_and_stops(gw: Harness, fake: FakeSlack, job_id: str) -> None:
    listed = await in_the_dm(fake, "/schedules")
    assert f"{job_id} — every 1h → slack:{DM} —" in listed, listed
    assert await in_the_dm(fake, f"/unschedule {job_id}") == f"Cancelled scheduled job {job_id}."
    rows = await gw.db.read(
        lambda c: c.execute(
            "SELECT COUNT(*) FROM schedule_jobs WHERE job_id = ?", (job_id,)
        ).fetchone()[0]
    )
    assert rows == 0


@pytest.mark.parametrize("written", [f"  slack:{DM}\t", f"Slack:{DM}", f"slack: {DM} "])
async def test_a_job_posted_with_a_padded_target_is_the_dms(tmp_path: Path, written: str) -> None:
    async with victim(tmp_path) as (gw, fake), aiohttp.ClientSession(base_url=gw.base_url) as http:
        body = {"every": "1h", "task": "task: spam", "to": written, "id": "padded"}
        async with http.post("/v1/schedules", json=body) as response:
            job = await response.json()
            assert response.status == 201, job
        assert job["to"] == f"slack:{DM}"
        await the_dm_sees_and_stops(gw, fake, "padded")


async def test_a_target_stored_raw_is_rewritten_at_start(tmp_path: Path) -> None:
    async with victim(tmp_path) as (gw, _):
        now = time.time()
        await JobsTable(gw.db).insert(  # as an earlier version stored it
            JobRecord(
                job_id="raw",
                trigger_kind="every",
                trigger_value="1h",
                timezone="UTC",
                anchor=now,
                agent_id="main",
                task="task: spam",
                to_target=f"   slack:{DM}   ",
                created_at=now,
                created_by="agent:main:slack:channel:c0999999999",
                next_run_at=now + 3600,
            )
        )
    async with victim(tmp_path) as (gw, fake):
        await the_dm_sees_and_stops(gw, fake, "raw")
