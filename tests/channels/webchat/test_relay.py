"""Web chat channels of two replicas sharing one history directory, joined by a relay in
memory (the gateway's is LISTEN/NOTIFY: tests/gateway/cluster/test_notify.py): a page gets
what the other replica sent once, and a notice that could not be sent never shows a
message twice."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiohttp import web

from channels import ChannelSendError, OutboundKind, OutboundMessage
from channels.webchat import WebchatChannel, WebchatConfig
from channels.webchat.relay import ChangeHandler
from tests.channels.webchat.conftest import AiohttpClient, Inbox, Page

CLIENT = "alice"


class Bus:
    """The replicas' notices in memory: a publish reaches every other started channel."""

    def __init__(self) -> None:
        self.listeners: dict[int, ChangeHandler] = {}
        self.failing = False

    def relay(self) -> BusRelay:
        return BusRelay(self)


class BusRelay:
    def __init__(self, bus: Bus) -> None:
        self._bus = bus

    async def start(self, on_change: ChangeHandler) -> None:
        self._bus.listeners[id(self)] = on_change

    async def publish(self, client_id: str) -> None:
        if self._bus.failing:
            raise ChannelSendError("the other replicas could not be told", retryable=True)
        for key, listener in list(self._bus.listeners.items()):
            if key != id(self):
                await listener(client_id)

    async def stop(self) -> None:
        self._bus.listeners.pop(id(self), None)


def announce(text: str, outbox_id: int | None) -> OutboundMessage:
    kind: OutboundKind = "announce" if outbox_id is not None else "reply"
    return OutboundMessage(
        "webchat", "local", CLIENT, None, text, kind=kind, run_id="r1", outbox_id=outbox_id
    )


@pytest.fixture
def bus() -> Bus:
    return Bus()


async def test_a_page_gets_what_the_other_replica_sent_once_and_failed_notices_never_repeat(
    aiohttp_client: AiohttpClient, tmp_path: Path, bus: Bus
) -> None:
    config = WebchatConfig()
    here = WebchatChannel(config, history_dir=tmp_path, relay=bus.relay())
    there = WebchatChannel(config, history_dir=tmp_path, relay=bus.relay())
    app = web.Application()
    here.add_routes(app)
    client = await aiohttp_client(app)
    for channel in (here, there):
        await channel.start(Inbox())
    try:
        page = Page(await client.ws_connect("/webchat/ws"))
        await page.send({"type": "hello", "clientId": CLIENT})
        assert (await page.next())["type"] == "ready"

        await there.send(announce("first", outbox_id=1))
        assert (await page.next_of("message"))["text"] == "first"

        bus.failing = True
        with pytest.raises(ChannelSendError) as failed:
            await there.send(announce("second", outbox_id=2))
        assert failed.value.retryable
        reply = await there.send(announce("a reply", outbox_id=None))  # logged, not raised
        bus.failing = False
        again = await there.send(announce("second", outbox_id=2))  # the outbox's retry
        frames = [await page.next_of("message") for _ in range(2)]
        assert [f["text"] for f in frames] == ["second", "a reply"]
        assert frames[1]["id"] == reply.message_ids[0]
        assert frames[0]["id"] == again.message_ids[0]
        await there.send(announce("third", outbox_id=3))
        assert (await page.next_of("message"))["text"] == "third"  # nothing twice before it
        await page.close()
    finally:
        for channel in (here, there):
            await channel.stop()
