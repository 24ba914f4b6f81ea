"""A streamed reply in a real headless Chromium against a real ``herald run``: the text
shows while the model is still writing (the fake model is held mid-stream), then exactly
one final message stands in its place."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from playwright.async_api import expect

from tests.browser.chromium import chromium, launch
from tests.browser.support import gateway, send, wait_online
from tests.fakes.openai import openai_server
from tests.gateway.daemon_process import free_port, write_config

pytestmark = pytest.mark.slow

BEGINNING = "Tea reached Europe in the seventeenth century,"
STORY = f"{BEGINNING} first sold as a medicine and later drunk as a daily habit."


async def test_reply_grows_while_written_then_one_final_message(tmp_path: Path) -> None:
    executable = chromium()
    async with openai_server() as fake:
        port = free_port()
        config = write_config(
            tmp_path / "herald.json",
            {
                "gateway": {
                    "port": port,
                    "stateDir": str(tmp_path / "state"),
                    "shutdownDrainSeconds": 1,
                },
                "agent": {"model": "fake/gpt-4o-mini"},
                "models": {
                    "providers": {
                        "fake": {
                            "api": "openai-completions",
                            "baseUrl": fake.base_url,
                            "apiKey": fake.api_key,
                            "models": [{"id": "gpt-4o-mini"}],
                        }
                    }
                },
                "channels": {"webchat": {"enabled": True}},
            },
        )
        gate = asyncio.Event()
        # Held after the role chunk and the first pieces (two words each): the beginning.
        fake.reply_stream(STORY, hold=gate, hold_at=5)
        async with gateway(config, port) as daemon, launch(executable, tmp_path) as tab:
            page = tab.page
            await page.goto(f"{daemon.url}/")
            await wait_online(page)
            await send(page, "tell me about tea")

            growing = page.locator(".msg.reply.streaming")
            await expect(growing).to_contain_text("Tea reached Europe in the seventeenth")
            assert not gate.is_set()  # the model is still writing
            assert await page.locator(".msg.reply:not(.streaming)").count() == 0

            gate.set()
            final = page.locator(".msg.reply")
            await expect(final).to_have_count(1)
            await expect(final).not_to_have_class("msg reply streaming")
            await expect(final.locator(".msg-body")).to_have_text(STORY)
            await expect(page.locator(".msg.reply.streaming")).to_have_count(0)
            # The newest text is in view: the conversation stayed at the bottom.
            assert await page.locator("#messages").evaluate(
                "m => m.scrollHeight - m.scrollTop - m.clientHeight < 80"
            )
            assert tab.errors == []
