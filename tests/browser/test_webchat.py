"""The web chat in a real headless Chromium against a real ``herald run`` (issue 8 item 6).

The page is driven the way a person uses it: typed text, a mouse click on Send, and the
DOM read back until the reply, the sub-agent run and its announce show up.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Page, expect

from tests.browser.chromium import Tab, chromium, launch
from tests.gateway.daemon_process import Daemon, free_port, herald, write_config

pytestmark = pytest.mark.slow

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
TOKEN = "s3cret-token-123"
SPAWN_REQUEST = "research the history of tea in the background"
#: Guard against a hung page; never an assertion about speed. Playwright's 5 s default is
#: too tight for a sub-agent run announced on a busy 2-core CI machine.
HANG_GUARD_MS = 30_000

Session = Callable[..., AbstractAsyncContextManager[tuple[Daemon, Tab]]]

expect.set_options(timeout=HANG_GUARD_MS)


def demo_config(tmp_path: Path, port: int, token: str | None = None) -> Path:
    """Web chat on, the packaged demo script as the model (``script`` left out)."""
    gateway: dict[str, Any] = {
        "port": port,
        "stateDir": str(tmp_path / "state"),
        "shutdownDrainSeconds": 1,
    }
    if token is not None:
        gateway["auth"] = {"token": token}
    return write_config(
        tmp_path / "herald.json",
        {
            "gateway": gateway,
            "agent": {"model": "demo/scripted"},
            "models": {
                "providers": {
                    "demo": {
                        "api": "scripted",
                        "models": [{"id": "scripted", "cost": {"input": 0.15, "output": 0.6}}],
                    }
                }
            },
            "channels": {"webchat": {"enabled": True}},
        },
    )


@pytest.fixture
def session(tmp_path: Path) -> Session:
    """A factory: a healthy gateway plus a browser; both are closed when the block ends."""
    executable = chromium()

    @asynccontextmanager
    async def start(token: str | None = None) -> AsyncIterator[tuple[Daemon, Tab]]:
        port = free_port()
        config = demo_config(tmp_path, port, token)
        async with herald("run", "--config", str(config), port=port) as daemon:
            await daemon.wait_healthy()
            async with launch(executable, tmp_path) as tab:
                yield daemon, tab
        assert all("Traceback" not in line for line in daemon.raw), "\n".join(daemon.raw)

    return start


async def send(page: Page, text: str) -> None:
    await page.locator("#input").fill(text)
    await page.locator("#send").click()
    # The box empties only when the page actually sent the message over its socket.
    await expect(page.locator("#input")).to_have_value("")


async def wait_online(page: Page) -> None:
    await expect(page.locator("#status")).to_have_attribute("data-state", "online")
    await expect(page.locator("#send")).to_be_enabled()


async def test_chat_spawn_and_announce_with_stats(session: Session, tmp_path: Path) -> None:
    async with session() as (daemon, tab):
        page = tab.page
        await page.goto(f"{daemon.url}/")
        await wait_online(page)

        await send(page, "hello")
        await expect(page.locator(".msg.user")).to_have_count(1)
        await expect(page.locator(".msg.reply").last).to_contain_text("Hello")

        await send(page, SPAWN_REQUEST)
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
        assert tab.errors == []
        shot = tmp_path / "webchat-token.png"
        await page.screenshot(path=shot)
        print(f"screenshot: {shot}")
    assert shot.read_bytes().startswith(PNG_SIGNATURE)
    assert all(TOKEN not in line for line in daemon.raw)
