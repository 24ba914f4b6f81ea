"""Headless Chromium for the browser tests: Debian's ``chromium``, driven by Playwright.

Playwright's own browser builds are never downloaded (no ``playwright install``): the
machine's ``chromium`` is launched through ``executable_path``, with a fresh profile.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.async_api import Page, ViewportSize, async_playwright

INSTALL = "apt-get install chromium"
#: Headless and offline: no sandbox (CI runs as root), no GPU, and none of the background
#: traffic to Google hosts, which this machine's closed network refuses anyway.
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    # Containers often have a small /dev/shm; a renderer that runs out of it crashes.
    "--disable-dev-shm-usage",
]
VIEWPORT = ViewportSize(width=1280, height=800)


def chromium() -> str:
    """The path of Debian's ``chromium``.

    When it is missing the test fails, never skips (a skip would hide a browser test that
    never ran): ``make test`` installs it, or stops with the line that says how.
    """
    path = shutil.which("chromium")
    if path is None:
        pytest.fail(
            f"chromium is not installed; install it with `{INSTALL}` (Debian; as root), "
            "or run `make test`, which installs it when it can",
            pytrace=False,
        )
    return path


@dataclass
class Tab:
    """The browser's one page, and the uncaught JavaScript exceptions it has thrown."""

    page: Page
    errors: list[str] = field(default_factory=list)


@asynccontextmanager
async def launch(executable: str, parent: Path) -> AsyncIterator[Tab]:
    """Start headless ``executable`` with a new profile directory under ``parent``; close
    the browser, and with it every process it started, on exit."""
    profile = tempfile.mkdtemp(prefix="chromium-profile-", dir=parent)
    async with async_playwright() as playwright:
        context = await playwright.chromium.launch_persistent_context(
            profile, executable_path=executable, headless=True, args=FLAGS, viewport=VIEWPORT
        )
        try:
            page = context.pages[0] if context.pages else await context.new_page()
            tab = Tab(page)
            page.on("pageerror", lambda error: tab.errors.append(error.stack or str(error)))
            yield tab
        finally:
            await context.close()
