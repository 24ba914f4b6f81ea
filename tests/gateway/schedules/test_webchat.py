"""The web chat's scheduled jobs over a real WebSocket on a real ``herald run``: a page lists
its chat's jobs (made by the API or by the agent's tool in that chat, aimed at it, or
declared for it) and never another chat's; it cannot cancel another chat's job or a declared
one; its own cancel deletes the job from the state database and every page of the chat gets
the new list."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.schedules.store import JobsTable
from gateway.sessions import iso_timestamp
from tests.gateway.daemon_process import (
    WebchatPage,
    daemon_state,
    free_port,
    herald,
    webchat_page,
    write_config,
)

pytestmark = pytest.mark.slow

MINE, THEIRS = "page-a", "page-b"
DECLARED, QUIET = "morning-brief", "quiet"


def config(tmp_path: Path, port: int) -> Path:
    return write_config(
        tmp_path / "herald.json",
        {
            "gateway": {
                "port": port,
                "stateDir": str(tmp_path / "state"),
                "shutdownDrainSeconds": 1,
            },
            "agent": {"model": "demo/scripted"},
            "models": {"providers": {"demo": {"api": "scripted", "models": [{"id": "scripted"}]}}},
            "channels": {"webchat": {"enabled": True}},
            "schedules": {
                "jobs": [
                    {
                        "id": DECLARED,
                        "cron": "0 9 * * 1-5",
                        "task": "Brief.",
                        "to": f"webchat:{MINE}",
                    },
                    {
                        "id": QUIET,
                        "every": "1h",
                        "task": "Q.",
                        "to": f"webchat:{MINE}",
                        "enabled": False,
                    },
                ]
            },
        },
    )


async def ask(page: WebchatPage, frame: dict[str, Any]) -> dict[str, Any]:
    """Send ``frame``; the page's first ``jobs`` or ``error`` frame after it."""
    start = len(page.frames)
    await page.ws.send_json(frame)
    await page.wait(lambda fs: any(f["type"] in ("jobs", "error") for f in fs[start:]))
    return next(f for f in page.frames[start:] if f["type"] in ("jobs", "error"))


def by_id(frame: dict[str, Any]) -> dict[str, dict[str, Any]]:
    assert frame["type"] == "jobs", frame
    return {job["jobId"]: job for job in frame["jobs"]}


async def create(http: aiohttp.ClientSession, url: str, **job: Any) -> dict[str, Any]:
    async with http.post(f"{url}/v1/schedules", json=job) as response:
        body: dict[str, Any] = await response.json()
        assert response.status == 201, body
        return body


async def test_a_page_lists_and_cancels_only_its_chats_jobs(tmp_path: Path) -> None:
    port = free_port()
    async with (
        herald("run", "--config", str(config(tmp_path, port)), port=port) as daemon,
        aiohttp.ClientSession() as http,
    ):
        await daemon.wait_healthy()
        tea = await create(
            http, daemon.url, every="1h", task="Reminder: tea", label="tea", to=f"webchat:{MINE}"
        )
        other = await create(http, daemon.url, every="2h", task="Other", to=f"webchat:{THEIRS}")
        async with (
            webchat_page(http, daemon.url, MINE) as page,
            webchat_page(http, daemon.url, MINE) as tab,
            webchat_page(http, daemon.url, THEIRS) as stranger,
        ):
            # The agent's tool in this chat makes a job too (the demo model's reminder rule).
            await page.ws.send_json({"type": "message", "text": "remind me every 3h to stretch"})
            await page.wait(
                lambda fs: any(f.get("kind") == "reply" and "job " in f["text"] for f in fs)
            )
            listed = by_id(await ask(page, {"type": "jobs"}))
            made = next(j for j in listed if j not in (tea["id"], DECLARED, QUIET))
            assert set(listed) == {tea["id"], DECLARED, QUIET, made}
            assert listed[QUIET]["nextRunAt"] is None  # disabled: it will not run
            assert listed[made]["trigger"] == {"every": "3h"}
            assert listed[made]["label"] == "stretch"
            assert listed[tea["id"]] == {
                "jobId": tea["id"],
                "label": "tea",
                "task": "Reminder: tea",
                "trigger": {"every": "1h"},
                "nextRunAt": listed[tea["id"]]["nextRunAt"],
                "paused": False,
                "declared": False,
            }
            async with http.get(f"{daemon.url}/v1/schedules/{tea['id']}") as response:
                shown = await response.json()
            # The same next run as the API's (ISO there, Unix seconds on the socket).
            assert shown["nextRunAt"] == iso_timestamp(listed[tea["id"]]["nextRunAt"])
            assert listed[DECLARED]["declared"] is True
            assert listed[DECLARED]["trigger"] == {"cron": "0 9 * * 1-5", "timezone": "UTC"}

            # Another chat sees only its own job.
            assert set(by_id(await ask(stranger, {"type": "jobs"}))) == {other["id"]}

            refused = await ask(page, {"type": "unschedule", "jobId": other["id"]})
            assert refused == {
                "type": "error",
                "code": "job_not_found",
                "message": f"this chat has no job {other['id']!r}",
                "jobId": other["id"],
            }
            refused = await ask(page, {"type": "unschedule", "jobId": DECLARED})
            assert refused["code"] == "job_declared"
            assert refused["jobId"] == DECLARED
            assert "declared in the config file" in refused["message"]

            start = len(tab.frames)
            after = by_id(await ask(page, {"type": "unschedule", "jobId": tea["id"]}))
            assert set(after) == {DECLARED, QUIET, made}
            # The chat's other tab is shown the new list too; the other chat is not.
            await tab.wait(lambda fs: any(f["type"] == "jobs" for f in fs[start:]))
            assert [f["type"] for f in stranger.frames].count("jobs") == 1

        db = await daemon_state(tmp_path / "state", None)
        try:
            jobs = JobsTable(db)
            assert await jobs.get(tea["id"]) is None
            for kept in (other["id"], DECLARED, made):
                assert await jobs.get(kept) is not None
        finally:
            await db.close()
