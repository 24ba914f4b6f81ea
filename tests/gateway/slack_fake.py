"""A fake Slack on loopback and a Socket Mode Slack channel aimed at it: what a gateway test
whose chats are on Slack is given, and how a channel joins a gateway already running."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from channels.slack import SlackChannel, SlackConfig
from tests.fakes.slack import APP_TOKEN, BOT_TOKEN, FakeSlack
from tests.gateway.harness import Harness


@asynccontextmanager
async def slack_on_fake(
    channels: set[str] | None = None, **config: Any
) -> AsyncIterator[tuple[FakeSlack, SlackChannel]]:
    """The started fake, knowing the conversations ``channels`` (the fake's own when None),
    and a channel (not started) whose config is the socket-mode one with ``config``'s keys
    (camelCase, as in the file) over it; the fake is closed on the way out."""
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


@asynccontextmanager
async def joined(gw: Harness, channel: SlackChannel, fake: FakeSlack) -> AsyncIterator[None]:
    """``channel`` started as the running gateway's ``slack`` channel, connected to ``fake``;
    stopped on the way out."""
    gw.channels["slack"] = channel
    await channel.start(gw.router.handle_inbound)
    await fake.wait_connected()
    try:
        yield
    finally:
        await channel.stop()
