"""The web chat in a cluster: a client's page is on one replica, its announces may be
delivered by another; LISTEN/NOTIFY brings each to the page exactly once, and a notice
sent while the page's replica was not listening arrives once it listens again. Two real
apps on one database and one state directory."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

from channels import InboundMessage, OutboundMessage
from gateway.state import OutboxRecord
from tests.channels.webchat.conftest import Frame, Page
from tests.gateway.cluster.replicas import Replica, backends, replica, terminate, until
from tests.gateway.delivery._support import queued_announce
from tests.postgres import DATABASE, running

pytestmark = pytest.mark.postgres

CLIENT = "alice"


@asynccontextmanager
async def two_replicas(tmp_path: Path, pg_url: str) -> AsyncIterator[tuple[Replica, Replica]]:
    async with AsyncExitStack() as stack:
        pair = [
            await stack.enter_async_context(
                replica(
                    tmp_path, name, database_url=pg_url, channels={"webchat": {"enabled": True}}
                )
            )
            for name in ("a", "b")
        ]
        yield pair[0], pair[1]


async def page_on(gateway: Replica, client_id: str) -> Page:
    page = Page(await gateway.client.ws_connect("/webchat/ws"))
    await page.send({"type": "hello", "clientId": client_id})
    assert await page.next() == {"type": "ready", "clientId": client_id}
    return page


async def announce_from(gateway: Replica, text: str) -> str:
    """Queue an announce for the client on ``gateway`` and let its outbox deliver it; the
    web chat message id it got."""
    _, run_id = await queued_announce(gateway.db, channel="webchat", chat_id=CLIENT, text=text)
    gateway.outbox.kick()  # only this replica's outbox is woken: it delivers
    item = await gateway.delivered(run_id)
    assert item.state == "delivered"
    (message_id,) = item.message_ids
    return message_id


def outbound(item: OutboxRecord) -> OutboundMessage:
    """The message the outbox sends for ``item``."""
    return OutboundMessage(
        channel=item.channel,
        account=item.account,
        chat_id=item.chat_id,
        thread_id=item.thread_id,
        text=item.text,
        kind="announce",
        run_id=item.run_id,
        outbox_id=item.id,
    )


async def messages_until(page: Page, text: str) -> list[Frame]:
    """The page's message frames up to and including the one saying ``text``."""
    seen: list[Frame] = []
    while not seen or seen[-1]["text"] != text:
        seen.append(await page.next_of("message"))
    return seen


@contextmanager
def connections_refused() -> Iterator[None]:
    """New connections to the database are refused (open ones keep working), as while a
    replica is cut off from it."""
    with psycopg.connect(running().admin_url("postgres"), autocommit=True) as admin:
        admin.execute(f"ALTER DATABASE {DATABASE} WITH ALLOW_CONNECTIONS false")
        try:
            yield
        finally:
            admin.execute(f"ALTER DATABASE {DATABASE} WITH ALLOW_CONNECTIONS true")


def texts(frames: list[dict[str, Any]]) -> list[str]:
    return [f["text"] for f in frames]


async def test_an_announce_delivered_by_another_replica_reaches_the_page_once(
    tmp_path: Path, pg_url: str
) -> None:
    async with two_replicas(tmp_path, pg_url) as (a, b):
        await until(lambda: backends("a", "listen") == 1 or None)
        page = await page_on(a, CLIENT)
        first = await announce_from(b, "first from b")
        second = await announce_from(b, "second from b")
        frames = await messages_until(page, "second from b")
        assert texts(frames) == ["first from b", "second from b"]
        assert [f["id"] for f in frames] == [first, second]
        assert {f["kind"] for f in frames} == {"announce"}

        # A's LISTEN connection dies and cannot come back for now: B's next announce is
        # notified to nobody on A.
        with connections_refused():
            assert terminate("a", "listen") == 1
            await until(lambda: backends("a", "listen") == 0 or None)
            await announce_from(b, "while a was away")
        # Connections are allowed again: A listens again and reads what it missed, with no
        # further notice to prompt it.
        frames = await messages_until(page, "while a was away")
        assert texts(frames) == ["while a was away"]
        assert backends("a", "listen") == 1
        await announce_from(a, "from a")  # after everything before it on the page
        assert texts(await messages_until(page, "from a")) == ["from a"]
        await page.close()


async def test_a_page_replays_what_every_replica_sent(tmp_path: Path, pg_url: str) -> None:
    async with two_replicas(tmp_path, pg_url) as (a, b):
        page = await page_on(a, CLIENT)  # A now remembers the client and its history
        await page.close()
        message_id = await announce_from(b, "from b")  # while the client has no page
        # A's exactly-once lookup of that announce (after a crash) finds B's send.
        item = next(i for i in b.settled if i.message_ids == (message_id,))
        found = await a.channel("webchat").find_delivered(outbound(item), since=0.0)
        assert (found.outcome, found.message_ids) == ("found", (message_id,))
        again = await page_on(a, CLIENT)
        assert texts(await messages_until(again, "from b")) == ["from b"]
        await again.close()
        elsewhere = await page_on(b, CLIENT)
        assert texts(await messages_until(elsewhere, "from b")) == ["from b"]
        await elsewhere.close()


async def test_a_reply_written_on_one_replica_grows_on_a_page_held_by_the_other(
    tmp_path: Path, pg_url: str
) -> None:
    async with two_replicas(tmp_path, pg_url) as (a, b):
        await until(lambda: backends("b", "listen") == 1 or None)
        page = await page_on(b, CLIENT)
        asked = InboundMessage("webchat", "local", CLIENT, None, CLIENT, "tea?")
        stream = a.channel("webchat").open_reply(asked, "inbound-row-1", stream=True)
        assert stream.streams
        stream.append("Tea came")
        first = await page.next_of("delta")
        stream.append(" to Europe.")
        shown = first["text"]
        while shown != "Tea came to Europe.":
            frame = await page.next_of("delta")
            assert frame["turnId"] == first["turnId"]
            shown = frame["text"] if frame.get("reset") else shown + frame["text"]
        await stream.finish("Tea came to Europe.")
        message = await page.next_of("message")
        assert (message["id"], message["text"]) == (first["turnId"], "Tea came to Europe.")
        await stream.close()
        end = await page.next_of("delta")
        assert (end["turnId"], end.get("end")) == (first["turnId"], True)
        await page.close()
