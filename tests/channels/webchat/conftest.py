"""Fixtures: a web chat channel on a real aiohttp app, and pages that speak its WebSocket."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import pytest
from aiohttp import ClientWebSocketResponse, WSMsgType, web
from aiohttp.test_utils import TestClient

from channels.base import InboundMessage
from channels.webchat import ChatJobs, WebchatChannel, WebchatConfig
from gateway.api.auth import auth_middleware

#: Seconds any single wait may take before a test fails (loopback answers in milliseconds).
WAIT = 5.0

Client = TestClient[web.Request, web.Application]
AiohttpClient = Callable[[web.Application], Awaitable[Client]]
Frame = dict[str, Any]


class Inbox:
    """The inbound handler under test: collects what the channel hands over."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[InboundMessage] = asyncio.Queue()
        self.fail = False

    async def __call__(self, message: InboundMessage) -> None:
        if self.fail:
            raise OSError("state database unavailable")
        await self.queue.put(message)

    async def next(self) -> InboundMessage:
        async with asyncio.timeout(WAIT):
            return await self.queue.get()


@dataclass
class Webchat:
    channel: WebchatChannel
    client: Client
    inbox: Inbox
    pages: list[ClientWebSocketResponse] = field(default_factory=list)

    async def connect(self, *, path: str = "/webchat/ws") -> ClientWebSocketResponse:
        """Open a socket without saying hello."""
        ws = await self.client.ws_connect(path)
        self.pages.append(ws)
        return ws

    async def page(self, client_id: str, *, path: str = "/webchat/ws") -> Page:
        """Open a socket, say hello as ``client_id`` and read the ``ready`` answer."""
        page = Page(await self.connect(path=path))
        await page.send({"type": "hello", "clientId": client_id})
        assert await page.next() == {"type": "ready", "clientId": client_id}
        return page


@dataclass
class Page:
    """One browser page's socket, read frame by frame."""

    ws: ClientWebSocketResponse

    async def send(self, frame: Frame) -> None:
        await self.ws.send_str(json.dumps(frame))

    async def next(self) -> Frame:
        msg = await self.ws.receive(timeout=WAIT)
        assert msg.type is WSMsgType.TEXT, msg
        frame = json.loads(msg.data)
        assert isinstance(frame, dict)
        return frame

    async def next_of(self, kind: str) -> Frame:
        """The next frame of ``type`` ``kind``, skipping others (echoes, typing)."""
        while (frame := await self.next())["type"] != kind:
            pass
        return frame

    async def close(self) -> None:
        await self.ws.close()


class MakeWebchat(Protocol):
    async def __call__(
        self,
        *,
        token: str | None = None,
        start: bool = True,
        jobs: ChatJobs | None = None,
        **config: Any,
    ) -> Webchat: ...


@pytest.fixture
async def make_webchat(aiohttp_client: AiohttpClient) -> AsyncIterator[MakeWebchat]:
    """A channel with its routes on an app (behind the gateway's token middleware when
    ``token`` is given; ``jobs`` its scheduled jobs), a test client for it, and an inbox as
    the handler."""
    made: list[Webchat] = []

    async def make(
        *,
        token: str | None = None,
        start: bool = True,
        jobs: ChatJobs | None = None,
        **config: Any,
    ) -> Webchat:
        channel = WebchatChannel(WebchatConfig.model_validate(config), jobs=jobs)
        app = web.Application(middlewares=[auth_middleware(lambda: token)])
        channel.add_routes(app)
        inbox = Inbox()
        chat = Webchat(channel, await aiohttp_client(app), inbox)
        made.append(chat)
        if start:
            await channel.start(inbox)
        return chat

    yield make
    for chat in made:
        for ws in chat.pages:
            await ws.close()
        await chat.channel.stop()


@pytest.fixture
async def webchat(make_webchat: MakeWebchat) -> Webchat:
    return await make_webchat()
