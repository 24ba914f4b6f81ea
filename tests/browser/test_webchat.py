"""The web chat in a real headless Chromium against a real ``herald run`` (issue 8 item 6).

The page is driven the way a person uses it: typed text, a mouse click on Send, and the
DOM read back until the reply, the sub-agent run and its announce show up.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.async_api import Locator, expect

from gateway.state import Origin
from tests.browser.support import (
    COMPARE_REQUEST,
    NARROW,
    PNG_SIGNATURE,
    SPAWN_REQUEST,
    TOKEN,
    Session,
    no_sideways_scroll,
    send,
    wait_online,
)
from tests.gateway.nested import record_nested_run, record_run
from tests.gateway.sessions.support import opened_store

pytestmark = pytest.mark.slow


async def test_chat_spawn_and_announce_with_stats(session: Session, tmp_path: Path) -> None:
    async with session() as (daemon, tab):
        page = tab.page
        await page.goto(f"{daemon.url}/")
        await wait_online(page)

        await send(page, "hello")
        await expect(page.locator(".msg.user")).to_have_count(1)
        await expect(page.locator(".msg.reply").last).to_contain_text("Hello")

        await send(page, SPAWN_REQUEST)
        # The greeting names the history of tea too: wait for the second reply itself.
        # Final replies only: the text of one still being written is not all there yet.
        await expect(page.locator(".msg.reply:not(.streaming)")).to_have_count(2)
        started = page.locator(".msg.reply").last
        await expect(started).to_contain_text("history of tea")
        reply = await started.inner_text()
        run = page.locator("#runs li.run").first
        await expect(run).to_have_attribute("data-run-id", re.compile(r".+"))
        run_id = await run.get_attribute("data-run-id")
        assert run_id is not None
        assert f"(run {run_id})" in reply
        assert await page.locator("#runs-empty").evaluate("el => el.hidden") is True

        announce = page.locator(".msg.announce").last
        await expect(announce).to_contain_text("Notes on the history of tea")
        stats = await announce.locator(".stats").inner_text()
        assert stats.startswith("Stats: runtime ")
        assert "est $" in stats
        assert "sessionKey agent:main:subagent:" in stats
        assert await announce.get_attribute("data-run-id") == run_id
        marked = page.locator(f'#runs li.run[data-run-id="{run_id}"]')
        await expect(marked).to_have_attribute("data-status", "done")
        assert await page.locator("#runs li.run").count() == 1
        # The emptied message box is sized to its text: no scrollbar of its own.
        assert await page.locator("#input").evaluate("box => box.scrollHeight <= box.clientHeight")
        assert tab.errors == []

        shot = tmp_path / "webchat.png"
        await page.screenshot(path=shot)
        print(f"screenshot: {shot}")
    assert shot.read_bytes().startswith(PNG_SIGNATURE)


async def test_token_from_the_fragment_unlocks_the_chat(session: Session, tmp_path: Path) -> None:
    async with session(token=TOKEN) as (daemon, tab):
        page = tab.page
        await page.goto(f"{daemon.url}/")
        await expect(page.locator("#status")).to_have_attribute("data-state", "auth")
        await expect(page.locator("#auth")).to_have_js_property("hidden", False)
        assert await page.locator("#send").is_disabled()

        # Only the fragment changes: the loaded page takes the token without a reload.
        await page.goto(f"{daemon.url}/#token={TOKEN}")
        await wait_online(page)
        assert await page.locator("#auth").evaluate("el => el.hidden") is True
        # The token leaves the address bar once it is stored.
        assert TOKEN not in await page.evaluate("window.location.href")

        await send(page, "hello")
        await expect(page.locator(".msg.reply").last).to_contain_text("Hello")

        # A run's transcript is read from the API with the same token.
        await send(page, SPAWN_REQUEST)
        run = page.locator("#runs li.run").first
        await expect(run).to_have_attribute("data-status", "done")
        await run.locator(".run-open").click()
        transcript = run.locator(".run-transcript")
        await expect(transcript.locator(".tx-msg").first).to_contain_text(
            "Research the history of tea"
        )
        await expect(transcript.locator(".tx-call")).to_contain_text("→ ls(")
        # Without it the API refuses, and the page says why instead of failing.
        await run.locator(".run-open").click()
        await page.evaluate("window.localStorage.removeItem('herald.webchat.token')")
        await run.locator(".run-open").click()
        await expect(transcript).to_have_text("The gateway's token is needed to read transcripts.")
        assert tab.errors == []
        shot = tmp_path / "webchat-token.png"
        await page.screenshot(path=shot)
        print(f"screenshot: {shot}")
    assert shot.read_bytes().startswith(PNG_SIGNATURE)
    assert all(TOKEN not in line for line in daemon.raw)


def runs_in(parent: Locator) -> Locator:
    """The runs listed directly in ``parent`` (a run's children or a batch's runs)."""
    return parent.locator(":scope > ul > li.run")


async def test_compare_shows_the_batch_as_a_tree_and_opens_a_transcript_in_place(
    session: Session, tmp_path: Path
) -> None:
    async with session() as (daemon, tab):
        page = tab.page
        await page.goto(f"{daemon.url}/")
        await wait_online(page)
        await send(page, COMPARE_REQUEST)
        await expect(page.locator(".msg.reply").first).to_contain_text(
            "Two sub-agents are looking into tea and coffee in parallel."
        )
        followup = page.locator(".msg.reply").nth(1)
        await expect(followup).to_contain_text("Both sub-agents are done.")
        # One combined answer quoting both results, with the batch's stats line.
        await expect(followup.locator("strong")).to_have_text(["tea", "coffee"])
        await expect(followup).to_contain_text("coffee in brief: where it was first grown")
        stats = await followup.locator(".stats").inner_text()
        assert stats.startswith("Stats: 2 sub-agents (2 done) • runtime ")
        assert await page.locator(".msg.announce").count() == 0  # no announce of their own

        # The two runs sit in their batch, in spawn order, both done.
        batch = page.locator("#runs > li.batch")
        await expect(batch).to_have_count(1)
        batch_id = await batch.get_attribute("data-batch-id")
        assert batch_id is not None
        await expect(batch.locator(".batch-title")).to_have_text(f"Batch {batch_id[:8]}")
        runs = runs_in(batch)
        await expect(runs.locator(".run-name")).to_have_text(["tea", "coffee"])
        await expect(runs.nth(0)).to_have_attribute("data-status", "done")
        await expect(runs.nth(1)).to_have_attribute("data-status", "done")
        await expect(batch.locator(".batch-summary")).to_have_text("2 runs, 2 finished")
        assert stats.endswith(
            ", ".join([(await r.get_attribute("data-run-id") or "")[:8] for r in await runs.all()])
        )

        # The tea run's transcript opens inside its entry: its task and its answer.
        tea = runs.nth(0)
        opener = tea.locator(".run-open")
        await expect(opener).to_have_attribute("aria-expanded", "false")
        await opener.click()
        await expect(opener).to_have_attribute("aria-expanded", "true")
        transcript = tea.locator(".run-transcript")
        await expect(transcript).to_be_visible()
        entries = transcript.locator(".tx-msg")
        await expect(entries.first).to_contain_text("Write a short history of tea")
        await expect(entries.last).to_contain_text("tea in brief: where it was first grown")
        await expect(entries.locator(".tx-role")).to_have_text(["Task", "Sub-agent"])
        await opener.click()
        await expect(transcript).to_be_hidden()
        assert tab.errors == []
        shot = tmp_path / "webchat-compare.png"
        await page.screenshot(path=shot)
        print(f"screenshot: {shot}")

        # At phone width the panel is a sheet opened from the header's badge; it and an open
        # transcript fit without sideways scrolling.
        await page.set_viewport_size(NARROW)
        await expect(page.locator("#runs-panel")).to_be_hidden()
        await page.locator("#runs-toggle").click()
        await expect(page.locator("#runs-panel")).to_be_visible()
        await opener.click()
        await expect(entries.last).to_contain_text("tea in brief")
        assert await no_sideways_scroll(page)
        box = await transcript.bounding_box()
        assert box is not None
        assert box["x"] >= 0
        assert box["x"] + box["width"] <= NARROW["width"]
        narrow = tmp_path / "webchat-compare-375.png"
        await page.screenshot(path=narrow)
        print(f"screenshot: {narrow}")
        # Closed, the sheet gives the conversation and the composer back.
        await page.locator("#runs-close").click()
        await expect(page.locator("#runs-panel")).to_be_hidden()
        await expect(page.locator("#input")).to_be_visible()
        await expect(page.locator("#send")).to_be_visible()
        assert tab.errors == []
    assert shot.read_bytes().startswith(PNG_SIGNATURE)


TREE_CLIENT = "tree-client"


async def record_tree(state_dir: Path) -> list[str]:
    """Queued runs of the web chat client ``TREE_CLIENT``: ``lead``, which spawned
    ``helper``, which spawned ``sources``; they run when the gateway starts. Ids in that
    order."""
    origin = Origin(channel="webchat", account="local", chat_id=TREE_CLIENT, chat_type="dm")
    async with opened_store(state_dir) as store:
        chat = await store.ensure(f"agent:main:webchat:{TREE_CLIENT}", origin=origin)
        lead = await record_run(
            store.db,
            chat.key,
            "lead",
            status="queued",
            origin=origin,
            task="Write a short history of lead",
            store=store,
        )
        ids = [lead.run_id]
        parent = lead
        for label in ("helper", "sources"):
            parent = await record_nested_run(
                store.db,
                parent,
                label,
                status="queued",
                task=f"Write a short history of {label}",
                store=store,
            )
            ids.append(parent.run_id)
    return ids


async def test_runs_spawned_by_a_run_show_below_it_and_their_transcript_opens(
    session: Session, tmp_path: Path
) -> None:
    lead, helper, sources = await record_tree(tmp_path / "state")
    async with session() as (daemon, tab):
        page = tab.page
        await page.add_init_script(
            f"window.localStorage.setItem('herald.webchat.clientId', '{TREE_CLIENT}')"
        )
        await page.set_viewport_size(NARROW)
        await page.goto(f"{daemon.url}/")
        await wait_online(page)
        await expect(page.locator("#runs-count")).to_have_text("3")
        await page.locator("#runs-toggle").click()
        top = page.locator(f'#runs > li.run[data-run-id="{lead}"]')
        child = runs_in(top)
        await expect(child).to_have_attribute("data-run-id", helper)
        grandchild = runs_in(child)
        await expect(grandchild).to_have_attribute("data-run-id", sources)
        await expect(grandchild).to_have_attribute("data-depth", "3")
        await expect(grandchild).to_have_attribute("data-status", "done")
        await expect(page.locator("#runs li.run")).to_have_count(3)
        # Each level sits further in.
        boxes = [await run.bounding_box() for run in (top, child, grandchild)]
        xs = [box["x"] for box in boxes if box is not None]
        assert len(xs) == 3
        assert xs[0] < xs[1] < xs[2]
        await grandchild.locator(".run-open").click()
        await expect(grandchild.locator(".tx-msg").first).to_contain_text(
            "Write a short history of sources"
        )
        # Its task, its answer, then the gateway's announce request and the announce.
        await expect(grandchild.locator(".tx-role")).to_have_text(
            ["Task", "Sub-agent", "Gateway", "Sub-agent"]
        )
        assert await no_sideways_scroll(page)
        assert tab.errors == []
        shot = tmp_path / "webchat-tree-375.png"
        await page.screenshot(path=shot)
        print(f"screenshot: {shot}")
    assert shot.read_bytes().startswith(PNG_SIGNATURE)
