"""The chat's scheduled jobs in a real headless Chromium against a real ``herald run``: a job
the agent's tool makes in this chat shows up in the jobs list with its next run (the
browser's local time), beside the chat's declared job (no Cancel button), on a phone behind
the runs badge too; its Cancel button (with a confirming second click) deletes it: it leaves
the list and the gateway has no such job."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import aiohttp
import pytest
from playwright.async_api import expect

from tests.browser.chromium import chromium, launch
from tests.browser.support import (
    NARROW,
    demo_config,
    gateway,
    no_sideways_scroll,
    send,
    wait_online,
)
from tests.gateway.daemon_process import free_port

pytestmark = pytest.mark.slow

CLIENT_ID = "jobs-browser-1"
DECLARED = {
    "id": "morning-brief",
    "cron": "0 9 * * 1-5",
    "task": "Brief.",
    "to": f"webchat:{CLIENT_ID}",
}


async def test_a_job_is_listed_with_its_next_run_and_cancelled(tmp_path: Path) -> None:
    executable = chromium()
    port = free_port()
    config = demo_config(tmp_path, port)
    data = json.loads(config.read_text(encoding="utf-8"))
    data["schedules"] = {"jobs": [DECLARED]}
    config.write_text(json.dumps(data), encoding="utf-8")
    async with (
        gateway(config, port) as daemon,
        launch(executable, tmp_path) as tab,
        aiohttp.ClientSession() as http,
    ):
        page = tab.page
        # The page's client id, so that the declared job is this chat's.
        await page.add_init_script(
            f"localStorage.setItem('herald.webchat.clientId', '{CLIENT_ID}')"
        )
        await page.goto(f"{daemon.url}/")
        await wait_online(page)
        declared = page.locator("#jobs-list .job", has_text="Brief.")
        await expect(declared.locator(".job-declared")).to_be_visible()
        await expect(declared.get_by_role("button")).to_have_count(0)

        await send(page, "remind me every 2h to stretch")
        job = page.locator("#jobs-list .job", has_text="stretch")
        await expect(job).to_have_count(1)
        await expect(job.locator(".job-trigger")).to_have_text("every 2h")
        async with http.get(f"{daemon.url}/v1/schedules") as response:
            (listed,) = [j for j in (await response.json())["jobs"] if not j["declared"]]
        due = datetime.fromisoformat(listed["nextRunAt"])
        shown = job.locator(".job-next time")
        at = await shown.get_attribute("datetime")
        assert at is not None
        # Milliseconds: the API rounds them, the browser cuts them.
        assert abs((datetime.fromisoformat(at) - due).total_seconds()) < 0.002
        # In the browser's own local time and format.
        local = await page.evaluate(
            """(iso) => new Date(iso).toLocaleString([], {weekday: "short", day: "numeric",
                 month: "short", hour: "2-digit", minute: "2-digit"})""",
            listed["nextRunAt"],
        )
        await expect(shown).to_have_text(local)

        # A phone: the list waits in the runs sheet, its count on the badge.
        await page.set_viewport_size(NARROW)
        await expect(page.locator("#jobs-count")).to_have_text("2")
        await page.locator("#runs-toggle").click()
        cancel = job.get_by_role("button", name="Cancel the scheduled job “stretch”")
        await expect(cancel).to_be_visible()
        assert await no_sideways_scroll(page)

        await cancel.click()
        confirm = job.get_by_role("button", name="Confirm: cancel the scheduled job “stretch”")
        await confirm.click()
        await expect(job).to_have_count(0)
        await expect(page.locator("#jobs-count")).to_have_text("1")
        await expect(declared).to_be_visible()
        async with http.get(f"{daemon.url}/v1/schedules") as response:
            assert [j["id"] for j in (await response.json())["jobs"]] == [DECLARED["id"]]
        assert tab.errors == []
