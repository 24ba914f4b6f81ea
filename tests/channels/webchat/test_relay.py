"""Web chat channels of two replicas sharing one history directory, joined by a relay in
memory (the gateway's is LISTEN/NOTIFY: tests/gateway/cluster/test_notify.py): a page gets
what the other replica sent once, and a notice that could not be sent never shows a
message twice."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from aiohttp import web

from channels import ChannelSendError, InboundMessage, OutboundKind, OutboundMessage
from channels.webchat import WebchatChannel, WebchatConfig
from channels.webchat.relay import ChangeHandler, DeltaHandler, RelayedDelta
from channels.webchat.streams import RELAY_INTERVAL, WebchatStream
from tests.channels.webchat.conftest import AiohttpClient, Inbox, Page
from tests.channels.webchat.test_streams import RECORDED, text_of

CLIENT = "alice"


class Bus:
    """The replicas' notices in memory: a publish reaches every other started channel."""

    def __init__(self) -> None:
        self.listeners: dict[int, ChangeHandler] = {}
        self.delta_listeners: dict[int, DeltaHandler] = {}
        self.deltas: list[RelayedDelta] = []
        self.times: list[float] = []
        self.failing = False

    def relay(self) -> BusRelay:
        return BusRelay(self)


class BusRelay:
    def __init__(self, bus: Bus) -> None:
        self._bus = bus

    async def start(self, on_change: ChangeHandler, on_delta: DeltaHandler) -> None:
        self._bus.listeners[id(self)] = on_change
        self._bus.delta_listeners[id(self)] = on_delta

    async def publish(self, client_id: str) -> None:
        if self._bus.failing:
            raise ChannelSendError("the other replicas could not be told", retryable=True)
        for key, listener in list(self._bus.listeners.items()):
            if key != id(self):
                await listener(client_id)

    async def publish_delta(self, delta: RelayedDelta) -> None:
        if self._bus.failing:
            raise ChannelSendError("the other replicas could not be told", retryable=True)
        self._bus.deltas.append(delta)
        self._bus.times.append(time.monotonic())
        for key, listener in list(self._bus.delta_listeners.items()):
            if key != id(self):
                await listener(delta)

    async def stop(self) -> None:
        self._bus.listeners.pop(id(self), None)
        self._bus.delta_listeners.pop(id(self), None)


def announce(text: str, outbox_id: int | None) -> OutboundMessage:
    kind: OutboundKind = "announce" if outbox_id is not None else "reply"
    return OutboundMessage(
        "webchat", "local", CLIENT, None, text, kind=kind, run_id="r1", outbox_id=outbox_id
    )


@pytest.fixture
def bus() -> Bus:
    return Bus()


@asynccontextmanager
async def replicas(
    aiohttp_client: AiohttpClient, tmp_path: Path, bus: Bus, count: int
) -> AsyncIterator[tuple[Page, list[WebchatChannel]]]:
    """``count`` started replicas' channels joined by ``bus``, and a page of :data:`CLIENT`
    open on the first; all stopped on the way out."""
    config = WebchatConfig()
    channels = [
        WebchatChannel(config, history_dir=tmp_path, relay=bus.relay()) for _ in range(count)
    ]
    app = web.Application()
    channels[0].add_routes(app)
    client = await aiohttp_client(app)
    for channel in channels:
        await channel.start(Inbox())
    try:
        page = Page(await client.ws_connect("/webchat/ws"))
        await page.send({"type": "hello", "clientId": CLIENT})
        assert (await page.next())["type"] == "ready"
        yield page, channels
        await page.close()
    finally:
        for channel in channels:
            await channel.stop()


async def test_a_page_gets_what_the_other_replica_sent_once_and_failed_notices_never_repeat(
    aiohttp_client: AiohttpClient, tmp_path: Path, bus: Bus
) -> None:
    async with replicas(aiohttp_client, tmp_path, bus, 2) as (page, (_, there)):
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


def asked() -> InboundMessage:
    return InboundMessage("webchat", "local", CLIENT, None, "u1", "tea?")


async def test_a_reply_written_on_the_other_replica_grows_on_the_page_then_ends(
    aiohttp_client: AiohttpClient, tmp_path: Path, bus: Bus
) -> None:
    async with replicas(aiohttp_client, tmp_path, bus, 2) as (page, (_, there)):
        stream = there.open_reply(asked(), RECORDED, stream=True)
        assert isinstance(stream, WebchatStream)
        for word in ("Tea ", "came ", "to ", "Europe."):
            stream.append(word)
            await asyncio.sleep(0)  # pieces in several loop turns: frames, then notices
        assert await text_of(page, stream.turn_id, "Tea came to Europe.") == "Tea came to Europe."
        stream.replace("Using web_fetch…")
        assert await text_of(page, stream.turn_id, "Using web_fetch…") == "Using web_fetch…"

        sent = await stream.finish("Tea came to Europe.")
        message = await page.next_of("message")
        assert (message["id"], message["text"]) == (sent.message_ids[0], "Tea came to Europe.")
        await stream.close()
        end = await page.next_of("delta")
        assert (end["turnId"], end.get("end")) == (stream.turn_id, True)

        # Each notice carries only what is new (or, reset, what replaces it), in order.
        shown = ""
        for delta in bus.deltas[:-1]:
            assert delta.at == (0 if delta.reset else len(shown))
            shown = delta.text if delta.reset else shown + delta.text
        assert shown == "Using web_fetch…"
        assert bus.deltas[-1].end
        # Never more than one notice an interval per reply, the end included.
        assert all(b - a >= RELAY_INTERVAL for a, b in itertools.pairwise(bus.times))


async def test_a_piece_after_a_missed_notice_is_not_shown(
    aiohttp_client: AiohttpClient, tmp_path: Path, bus: Bus
) -> None:
    elsewhere = bus.relay()  # another replica writing a reply
    async with replicas(aiohttp_client, tmp_path, bus, 1) as (page, _):
        await elsewhere.publish_delta(RelayedDelta(CLIENT, "turn-1", 0, "Tea came"))
        await elsewhere.publish_delta(RelayedDelta(CLIENT, "turn-1", 20, " and more"))  # a gap
        await elsewhere.publish_delta(RelayedDelta(CLIENT, "turn-1", 29, " and so on"))
        await elsewhere.publish_delta(RelayedDelta(CLIENT, "turn-1", 39, "", end=True))
        first = await page.next_of("delta")
        assert (first["text"], first.get("reset")) == ("Tea came", True)
        end = await page.next_of("delta")  # nothing shown between: the end
        assert (end["text"], end.get("end")) == ("", True)
