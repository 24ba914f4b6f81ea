"""What the browser tests share: the gateway's config, the session factory's type, and the
steps a person takes on the page (send a message, wait until connected)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

from playwright.async_api import Page, ViewportSize, expect

from tests.browser.chromium import Tab, launch
from tests.gateway.daemon_process import Daemon, free_port, herald, write_config

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
TOKEN = "s3cret-token-123"
SPAWN_REQUEST = "research the history of tea in the background"
COMPARE_REQUEST = "compare the history of tea and coffee"
NARROW = ViewportSize(width=375, height=740)
DESKTOP = ViewportSize(width=1280, height=800)
#: Guard against a hung page; never an assertion about speed. Playwright's 5 s default is
#: too tight for a sub-agent run announced on a busy 2-core CI machine.
HANG_GUARD_MS = 30_000

#: ``session(token=None, port=None)``: a healthy gateway plus a browser, closed on exit.
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


@asynccontextmanager
async def gateway(config: Path, port: int) -> AsyncIterator[Daemon]:
    """``herald run`` on ``config``, healthy; killed on exit, and its log free of tracebacks."""
    async with herald("run", "--config", str(config), port=port) as daemon:
        await daemon.wait_healthy()
        yield daemon
    assert all("Traceback" not in line for line in daemon.raw), "\n".join(daemon.raw)


def session_factory(tmp_path: Path, executable: str) -> Session:
    @asynccontextmanager
    async def start(
        token: str | None = None, port: int | None = None
    ) -> AsyncIterator[tuple[Daemon, Tab]]:
        chosen = port or free_port()
        config = demo_config(tmp_path, chosen, token)
        async with gateway(config, chosen) as daemon, launch(executable, tmp_path) as tab:
            yield daemon, tab

    return start


async def send(page: Page, text: str) -> None:
    await page.locator("#input").fill(text)
    await page.locator("#send").click()
    # The box empties only when the page actually sent the message over its socket.
    await expect(page.locator("#input")).to_have_value("")


async def wait_online(page: Page) -> None:
    await expect(page.locator("#status")).to_have_attribute("data-state", "online")
    await expect(page.locator("#send")).to_be_enabled()


async def no_sideways_scroll(page: Page) -> bool:
    return bool(
        await page.evaluate(
            "() => document.documentElement.scrollWidth <= document.documentElement.clientWidth"
        )
    )


async def shot(page: Page, path: Path) -> Path:
    """A screenshot of the page as it is now, for people to look at (named in the output)."""
    await page.screenshot(path=path)
    print(f"screenshot: {path}")
    assert path.read_bytes().startswith(PNG_SIGNATURE)
    return path
