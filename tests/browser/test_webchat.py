"""The web chat in a real headless Chromium against a real ``herald run`` (issue 8 item 6).

The page is driven the way a person uses it: typed text, a mouse click on Send, and the
DOM read back until the reply, the sub-agent run and its announce show up.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.browser.cdp import Browser, Page, find_chromium, launch
from tests.gateway.daemon_process import Daemon, free_port, herald, write_config

pytestmark = pytest.mark.slow

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
TOKEN = "s3cret-token-123"
SPAWN_REQUEST = "research the history of tea in the background"

Session = Callable[..., AbstractAsyncContextManager[tuple[Daemon, Browser]]]


def chromium_or_skip() -> str:
    path = find_chromium()
    if path is not None:
        return path
    if os.environ.get("CI"):
        pytest.fail("chromium is not installed; .ci/run installs it with apt-get")
    pytest.skip("chromium is not installed (Debian: apt-get install chromium)")


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
    chromium = chromium_or_skip()

    @asynccontextmanager
    async def start(token: str | None = None) -> AsyncIterator[tuple[Daemon, Browser]]:
        port = free_port()
        config = demo_config(tmp_path, port, token)
        async with herald("run", "--config", str(config), port=port) as daemon:
            await daemon.wait_healthy()
            async with launch(chromium, tmp_path / "profile") as browser:
                yield daemon, browser
        assert all("Traceback" not in line for line in daemon.raw), "\n".join(daemon.raw)

    return start


def count(selector: str) -> str:
    return f"document.querySelectorAll({json.dumps(selector)}).length"


def last_text(selector: str) -> str:
    return (
        f"(() => {{ const all = document.querySelectorAll({json.dumps(selector)});"
        " return all.length ? all[all.length - 1].innerText : null; })()"
    )


async def send(page: Page, text: str) -> None:
    await page.type_text("#input", text)
    await page.click("#send")
    # The box empties only when the page actually sent the message over its socket.
    await page.wait_for("document.querySelector('#input').value === ''", "the input to clear")


async def wait_online(page: Page) -> None:
    await page.wait_for(
        "document.querySelector('#status').dataset.state === 'online'"
        " && !document.querySelector('#send').disabled",
        "the status to turn online",
    )


async def test_chat_spawn_and_announce_with_stats(session: Session, tmp_path: Path) -> None:
    async with session() as (daemon, browser):
        page = await browser.new_page()
        await page.navigate(f"{daemon.url}/")
        await wait_online(page)

        await send(page, "hello")
        await page.wait_for(count(".msg.user") + " === 1", "the user's message")
        greeting = await page.wait_for(last_text(".msg.reply"), "the greeting")
        assert "Hello" in greeting

        await send(page, SPAWN_REQUEST)
        reply = await page.wait_for(
            f"(() => {{ const t = {last_text('.msg.reply')};"
            " return t && t.includes('history of tea') ? t : null; })()",
            "the reply that starts the run",
        )
        run_id = await page.wait_for(
            "document.querySelector('#runs li.run')?.dataset.runId", "the run in the runs panel"
        )
        assert f"(run {run_id})" in reply
        assert await page.evaluate("document.querySelector('#runs-empty').hidden") is True

        announce = await page.wait_for(last_text(".msg.announce"), "the announce")
        assert "Notes on the history of tea" in announce
        stats = await page.evaluate("document.querySelector('.msg.announce .stats').innerText")
        assert stats.startswith("Stats: runtime ")
        assert "est $" in stats
        assert "sessionKey agent:main:subagent:" in stats
        assert (
            await page.evaluate("document.querySelector('.msg.announce').dataset.runId") == run_id
        )
        await page.wait_for(
            f"document.querySelector('#runs li.run[data-run-id={json.dumps(run_id)}]')"
            ".dataset.status === 'done'",
            "the run to be marked done",
        )
        assert await page.evaluate(count("#runs li.run")) == 1
        # The emptied message box is sized to its text: no scrollbar of its own.
        assert await page.evaluate(
            "(() => { const box = document.querySelector('#input');"
            " return box.scrollHeight <= box.clientHeight; })()"
        )
        assert page.exceptions == []

        shot = await page.screenshot(tmp_path / "webchat.png")
        print(f"screenshot: {shot}")
    assert shot.read_bytes().startswith(PNG_SIGNATURE)


async def test_token_from_the_fragment_unlocks_the_chat(session: Session, tmp_path: Path) -> None:
    async with session(token=TOKEN) as (daemon, browser):
        page = await browser.new_page()
        await page.navigate(f"{daemon.url}/")
        await page.wait_for(
            "document.querySelector('#status').dataset.state === 'auth'"
            " && !document.querySelector('#auth').hidden",
            "the token form",
        )
        assert await page.evaluate("document.querySelector('#send').disabled") is True

        await page.navigate(f"{daemon.url}/#token={TOKEN}")
        await wait_online(page)
        assert await page.evaluate("document.querySelector('#auth').hidden") is True
        # The token leaves the address bar once it is stored.
        assert TOKEN not in await page.evaluate("window.location.href")

        await send(page, "hello")
        greeting = await page.wait_for(last_text(".msg.reply"), "the greeting")
        assert "Hello" in greeting
        assert page.exceptions == []
        shot = await page.screenshot(tmp_path / "webchat-token.png")
        print(f"screenshot: {shot}")
    assert shot.read_bytes().startswith(PNG_SIGNATURE)
    assert all(TOKEN not in line for line in daemon.raw)
