"""The web chat on a phone (375 px) and at desktop width, in a real headless Chromium against
a real ``herald run`` (issue 15 item 7).

A run never takes the conversation's room on a phone (the runs panel is a sheet opened from
a badge), the conversation stays at its newest message while it was there, the suggestions
leave with the first message, the placeholder fits one line, run cards say what the run was
asked, on which model and for how long, and a "not connected" error clears on reconnect.
"""

from __future__ import annotations

import re
from pathlib import Path

import aiohttp
import pytest
from playwright.async_api import FloatRect, Page, expect

from tests.browser.chromium import launch
from tests.browser.support import (
    DESKTOP,
    NARROW,
    SPAWN_REQUEST,
    Session,
    demo_config,
    gateway,
    no_sideways_scroll,
    send,
    shot,
    wait_online,
)
from tests.gateway.daemon_process import free_port

pytestmark = pytest.mark.slow

#: The conversation counts as at its newest message within this many pixels of the bottom.
AT_BOTTOM_PX = 2
AT_BOTTOM_JS = f"""() => {{
  const m = document.getElementById("messages");
  return m.scrollHeight - m.scrollTop - m.clientHeight <= {AT_BOTTOM_PX};
}}"""


async def messages_box(page: Page) -> FloatRect:
    box = await page.locator("#messages").bounding_box()
    assert box is not None
    return box


async def test_on_a_phone_runs_wait_behind_a_badge_and_never_move_the_conversation(
    session: Session, tmp_path: Path
) -> None:
    async with session() as (daemon, tab):
        page = tab.page
        await page.set_viewport_size(NARROW)
        await page.goto(f"{daemon.url}/")
        await wait_online(page)
        await expect(page.locator("#runs-panel")).to_be_hidden()
        toggle = page.locator("#runs-toggle")
        await expect(toggle).to_be_visible()
        await expect(page.locator("#runs-count")).to_have_text("0")

        await send(page, "hello")
        await expect(page.locator(".msg.reply").last).to_contain_text("Hello")
        await expect(page.locator("#typing")).to_be_hidden()
        before = await messages_box(page)
        await send(page, SPAWN_REQUEST)
        announce = page.locator(".msg.announce").last
        await expect(announce).to_contain_text("Notes on the history of tea")
        await expect(page.locator("#runs-count")).to_have_text("1")
        await expect(toggle).to_have_attribute("data-active", "0")
        await expect(page.locator("#typing")).to_be_hidden()
        # The run came and went without taking any of the conversation's room, and the
        # announce, the newest message, is in view.
        assert await messages_box(page) == before
        await page.wait_for_function(AT_BOTTOM_JS)
        box = await announce.bounding_box()
        assert box is not None
        assert box["y"] + box["height"] <= before["y"] + before["height"] + AT_BOTTOM_PX
        await shot(page, tmp_path / "phone-announce.png")
        # The stats line breaks at its " • " separators: every figure short enough for a
        # line stays on one (a long path may break, and is the only part that does).
        stats = announce.locator(".stats")
        assert (await stats.inner_text()).startswith("Stats: runtime ")
        parts = await stats.locator(".stats-part").evaluate_all(
            "spans => spans.map(s => [s.textContent, s.classList.contains('long'),"
            " s.getClientRects().length])"
        )
        assert len(parts) >= 5
        whole = [(text, lines) for text, long, lines in parts if not long]
        assert whole
        assert all(lines == 1 for _, lines in whole), whole
        # The long parts (key, id, path) are cut to one line each until the line is tapped.
        heights = "spans => spans.map(s => s.getBoundingClientRect().height)"
        rects = "spans => spans.map(s => s.getClientRects().length)"
        text_height = max(await stats.locator(".stats-part:not(.long)").evaluate_all(heights))
        cut = await stats.locator(".stats-part.long").evaluate_all(heights)
        assert cut
        assert max(cut) < 2 * text_height, (cut, text_height)
        await stats.click()
        assert max(await stats.locator(".stats-part.long").evaluate_all(rects)) > 1
        await stats.click()

        # A tap on the badge opens the runs as a sheet over the conversation.
        await toggle.click()
        panel = page.locator("#runs-panel")
        await expect(panel).to_be_visible()
        await expect(toggle).to_have_attribute("aria-expanded", "true")
        card = page.locator("#runs li.run").first
        await expect(card.locator(".run-name")).to_have_text("research")
        await expect(card.locator(".run-task")).to_have_text("Research the history of tea")
        await expect(card.locator(".run-model")).to_have_text("demo/scripted")
        await expect(card.locator(".run-runtime")).to_have_text(re.compile(r"^\d+s$"))
        panel_box = await panel.bounding_box()
        assert panel_box is not None
        assert panel_box["x"] >= 0
        assert panel_box["x"] + panel_box["width"] <= NARROW["width"]
        assert await no_sideways_scroll(page)
        await shot(page, tmp_path / "phone-runs-sheet.png")

        # "Show result" closes the sheet to show the run's announce.
        await card.locator(".run-show").click()
        await expect(panel).to_be_hidden()
        await expect(toggle).to_have_attribute("aria-expanded", "false")
        await expect(announce).to_be_in_viewport()
        assert await messages_box(page) == before
        assert tab.errors == []


async def test_the_conversation_stays_at_its_newest_message_when_its_box_shrinks(
    session: Session, tmp_path: Path
) -> None:
    async with session() as (daemon, tab):
        page = tab.page
        await page.set_viewport_size(NARROW)
        await page.goto(f"{daemon.url}/")
        await wait_online(page)
        for count in range(1, 4):
            await send(page, "hello")
            # The final reply, not the growing one: nothing may still be drawn below.
            await expect(page.locator(".msg.reply:not(.streaming)")).to_have_count(count)
        assert await page.locator("#messages").evaluate("m => m.scrollHeight > m.clientHeight")
        await page.wait_for_function(AT_BOTTOM_JS)
        height = (await messages_box(page))["height"]

        # A long draft grows the composer and shrinks the conversation's box: the newest
        # message stays in view.
        await page.locator("#input").fill("one\ntwo\nthree\nfour\nfive")
        assert (await messages_box(page))["height"] < height
        await page.wait_for_function(AT_BOTTOM_JS)
        await expect(page.locator(".msg").last).to_be_in_viewport()
        await shot(page, tmp_path / "phone-long-draft.png")

        # Scrolled up to read, the conversation stays put while the box changes, and when a
        # message arrives (an announce of a run started through the API): a button offers it.
        await page.locator("#messages").evaluate("m => { m.scrollTop = 0; }")
        await expect(page.locator(".msg").first).to_be_in_viewport()
        await page.locator("#input").fill("")
        client = await page.evaluate("localStorage.getItem('herald.webchat.clientId')")
        spawn = {
            "tool": "sessions_spawn",
            "args": {"task": "Research the history of tea", "label": "api"},
            "sessionKey": f"agent:main:webchat:{client}",
        }
        url = f"{daemon.url}/v1/tools/invoke"
        async with aiohttp.ClientSession() as http, http.post(url, json=spawn) as response:
            assert response.status == 200, await response.text()
        await expect(page.locator(".msg.announce")).to_have_count(1)
        assert await page.locator("#messages").evaluate("m => m.scrollTop") == 0
        await expect(page.locator(".msg").first).to_be_in_viewport()
        newest = page.locator("#to-newest")
        await expect(newest).to_be_visible()
        await shot(page, tmp_path / "phone-scrolled-up.png")
        await newest.click()
        await page.wait_for_function(AT_BOTTOM_JS)
        await expect(page.locator(".msg.announce")).to_be_in_viewport()
        await expect(newest).to_be_hidden()
        assert tab.errors == []


async def test_suggestions_leave_with_the_first_message_and_the_placeholder_fits_one_line(
    session: Session, tmp_path: Path
) -> None:
    async with session() as (daemon, tab):
        page = tab.page
        for viewport in (NARROW, DESKTOP):
            await page.set_viewport_size(viewport)
            await page.goto(f"{daemon.url}/")
            await wait_online(page)
            box = page.locator("#input")
            empty = await box.evaluate("b => b.offsetHeight")
            await box.fill("x")
            assert await box.evaluate("b => b.offsetHeight") == empty, viewport
            await box.fill("")
            if viewport == NARROW:
                await expect(page.locator("#intro")).to_be_visible()
                await shot(page, tmp_path / "phone-empty.png")
                await send(page, "hello")
                await expect(page.locator(".msg.reply").last).to_contain_text("Hello")
            # Gone after the first message, and after a reload that replays the conversation.
            await expect(page.locator("#intro")).to_be_hidden()
        await shot(page, tmp_path / "desktop-after-hello.png")
        assert tab.errors == []


async def test_a_not_connected_error_clears_when_the_page_reconnects(tmp_path: Path) -> None:
    from tests.browser.chromium import chromium

    executable = chromium()
    port = free_port()
    config = demo_config(tmp_path, port)
    async with launch(executable, tmp_path) as tab:
        page = tab.page
        # The page's timers run on a clock the test moves, so the error cannot fade on its
        # own (it used to after 8 s) before the reconnect this test is about.
        await page.clock.install()
        async with gateway(config, port) as first:
            await page.goto(f"{first.url}/")
            await wait_online(page)
            now = await page.evaluate("Date.now()")
            await page.clock.pause_at(now + 1000)
            await first.kill()
        await expect(page.locator("#status")).to_have_attribute("data-state", "offline")
        # Send is disabled while offline; Enter in the box still tries, and is told why not.
        await expect(page.locator("#send")).to_be_disabled()
        await page.locator("#input").fill("hello")
        await page.locator("#input").press("Enter")
        error = page.locator("#error")
        await expect(error).to_have_text(re.compile("Not connected yet"))
        async with gateway(config, port):
            # The page's retry is due within a second or so of the page's own time.
            await page.clock.run_for(5000)
            await wait_online(page)
            await expect(error).to_be_hidden()
            # The message stayed in the box and goes now.
            await expect(page.locator("#input")).to_have_value("hello")
            await page.locator("#send").click()
            await expect(page.locator(".msg.user")).to_have_count(1)
            await shot(page, tmp_path / "reconnected.png")
        assert tab.errors == []
