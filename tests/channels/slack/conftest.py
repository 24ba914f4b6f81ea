"""Fixtures: a fake Slack on loopback and channels wired to it (factories that clean up)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from channels.base import InboundMessage
from channels.slack import SlackChannel, SlackConfig
from tests.fakes.slack import APP_TOKEN, BOT_TOKEN, SIGNING_SECRET, WAIT, FakeSlack


class Inbox:
    """The inbound handler under test: collects what the channel hands over."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[InboundMessage] = asyncio.Queue()

    async def __call__(self, message: InboundMessage) -> None:
        await self.queue.put(message)

    async def next(self) -> InboundMessage:
        async with asyncio.timeout(WAIT):
            return await self.queue.get()


class MakeChannel(Protocol):
    async def __call__(self, **config: Any) -> tuple[SlackChannel, Inbox]: ...


AiohttpClient = Callable[[web.Application], Awaitable[TestClient[web.Request, web.Application]]]


def slack_config(fake: FakeSlack, **overrides: Any) -> SlackConfig:
    values: dict[str, Any] = {
        "enabled": True,
        "mode": "socket",
        "botToken": BOT_TOKEN,
        "appToken": APP_TOKEN,
        "signingSecret": SIGNING_SECRET,
        "apiBaseUrl": fake.api_base_url,
    }
    values.update(overrides)
    return SlackConfig.model_validate(values)


@pytest.fixture
async def fake_slack() -> AsyncIterator[FakeSlack]:
    fake = FakeSlack()
    await fake.start()
    yield fake
    await fake.close()


@pytest.fixture
async def make_channel(fake_slack: FakeSlack) -> AsyncIterator[MakeChannel]:
    """Start a Socket Mode channel against the fake; config keys as in the file (camelCase)."""
    made: list[SlackChannel] = []

    async def make(**config: Any) -> tuple[SlackChannel, Inbox]:
        channel = SlackChannel(slack_config(fake_slack, **config))
        made.append(channel)
        inbox = Inbox()
        await channel.start(inbox)
        await fake_slack.wait_connected()
        return channel, inbox

    yield make
    for channel in made:
        await channel.stop()


@pytest.fixture
async def http_channel(
    fake_slack: FakeSlack, aiohttp_client: AiohttpClient
) -> AsyncIterator[tuple[SlackChannel, Inbox, TestClient[web.Request, web.Application]]]:
    """An HTTP mode channel on an aiohttp app, as the gateway wires it, and a client for it."""
    channel = SlackChannel(slack_config(fake_slack, mode="http"))
    app = web.Application()
    channel.add_routes(app)
    client = await aiohttp_client(app)
    inbox = Inbox()
    await channel.start(inbox)
    yield channel, inbox, client
    await channel.stop()
