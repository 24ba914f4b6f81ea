"""The chat's scheduled jobs in a real headless Chromium against a real ``herald run``: a job
the agent's tool makes in this chat shows up in the jobs list with its next run (the
browser's local time), on a phone behind the runs badge too, and its Cancel button (with a
confirming second click) deletes it: the list empties and the gateway has no such job."""

from __future__ import annotations

from datetime import datetime

import aiohttp
import pytest
from playwright.async_api import expect

from tests.browser.support import NARROW, Session, no_sideways_scroll, send, wait_online

pytestmark = pytest.mark.slow


async def test_a_job_is_listed_with_its_next_run_and_cancelled(session: Session) -> None:
    async with session() as (daemon, tab), aiohttp.ClientSession() as http:
        page = tab.page
        await page.goto(f"{daemon.url}/")
        await wait_online(page)
        await expect(page.locator("#jobs")).to_be_hidden()
        await send(page, "remind me every 2h to stretch")

        job = page.locator("#jobs-list .job")
        await expect(job).to_have_count(1)
        await expect(job.locator(".job-name")).to_have_text("stretch")
        await expect(job.locator(".job-trigger")).to_have_text("every 2h")
        async with http.get(f"{daemon.url}/v1/schedules") as response:
            (listed,) = (await response.json())["jobs"]
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
        await expect(page.locator("#jobs-badge")).to_be_visible()
        await expect(page.locator("#jobs-count")).to_have_text("1")
        await page.locator("#runs-toggle").click()
        cancel = job.get_by_role("button", name="Cancel the scheduled job “stretch”")
        await expect(cancel).to_be_visible()
        assert await no_sideways_scroll(page)

        await cancel.click()
        confirm = job.get_by_role("button", name="Confirm: cancel the scheduled job “stretch”")
        await confirm.click()
        await expect(page.locator("#jobs-list .job")).to_have_count(0)
        await expect(page.locator("#jobs")).to_be_hidden()
        await expect(page.locator("#jobs-badge")).to_be_hidden()
        async with http.get(f"{daemon.url}/v1/schedules") as response:
            assert (await response.json())["jobs"] == []
        assert tab.errors == []
