"""A fake Slack on loopback and a Socket Mode Slack channel aimed at it: what a gateway test
whose chats are on Slack is given (the gateway starts and stops the channel)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from channels.slack import SlackChannel, SlackConfig
from tests.fakes.slack import APP_TOKEN, BOT_TOKEN, FakeSlack


@asynccontextmanager
async def slack_on_fake(
    channels: set[str], **config: Any
) -> AsyncIterator[tuple[FakeSlack, SlackChannel]]:
    """The started fake, knowing the conversations ``channels``, and a channel (not started)
    whose config is the socket-mode one with ``config``'s keys (camelCase, as in the file)
    over it; the fake is closed on the way out."""
    fake = FakeSlack(channels=channels)
    await fake.start()
    try:
        values: dict[str, Any] = {
            "enabled": True,
            "mode": "socket",
            "botToken": BOT_TOKEN,
            "appToken": APP_TOKEN,
            "apiBaseUrl": fake.api_base_url,
        }
        yield fake, SlackChannel(SlackConfig.model_validate(values | config))
    finally:
        await fake.close()
