"""A read of a large transcript over HTTP costs what it returns: ``limit=1`` on a 48 MiB
transcript, four at once, and a 40 MiB window streamed, each within a few MiB of memory."""

from __future__ import annotations

import asyncio
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from gateway.api.routes import route_defs
from gateway.llm import ChatMessage
from gateway.parts.state import SESSION_STORE
from gateway.sessions import SessionStore, message_record
from tests.gateway.sessions.support import opened_store

Client = TestClient[web.Request, web.Application]
AiohttpClient = Callable[[web.Application], Awaitable[Client]]

LINES = 6000
CONTENT_CHARS = 8000  # ~48 MiB of transcript
#: Python memory a read may add, whatever the transcript's size (what the issue allows
#: the whole process is 64 MiB; a whole parse of this file takes several times its size).
PEAK_ALLOWED = 16 * 1024 * 1024
KEY = "agent:main:main"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SessionStore]:
    async with opened_store(tmp_path / "state") as opened:
        yield opened


@pytest.fixture
async def client(store: SessionStore, aiohttp_client: AiohttpClient) -> Client:
    app = web.Application()
    app.add_routes(route_defs("/v1/sessions"))
    app[SESSION_STORE] = store
    return await aiohttp_client(app)


async def _large_transcript(store: SessionStore) -> int:
    record = await store.ensure(KEY)
    await store.flush()
    lines = [
        orjson.dumps(
            message_record(ChatMessage(role="user", content=f"{n} " + "x" * CONTENT_CHARS))
        )
        + b"\n"
        for n in range(100)
    ]
    with store.transcript_path(record).open("ab") as file:
        for n in range(LINES):
            file.write(lines[n % len(lines)])
    return LINES + 1  # and the header


@pytest.fixture
def traced() -> Iterator[None]:
    tracemalloc.start()
    yield
    tracemalloc.stop()


def _peak_since_reset() -> int:
    return tracemalloc.get_traced_memory()[1]


async def test_the_last_record_and_the_last_message_of_a_large_transcript(
    client: Client, store: SessionStore, traced: None
) -> None:
    total = await _large_transcript(store)
    for url, check in (
        (f"/v1/sessions/{KEY}/transcript?limit=1", "records"),
        (f"/v1/sessions/{KEY}/history?limit=1", "messages"),
    ):
        tracemalloc.reset_peak()
        responses = await asyncio.gather(*(client.get(url) for _ in range(4)))
        for response in responses:
            assert response.status == 200
            body = await response.json()
            [last] = body[check]
            content = last["message"]["content"] if check == "records" else last["content"]
            assert content.startswith(f"{(LINES - 1) % 100} ")
            if check == "records":
                assert (body["start"], body["total"]) == (total - 1, total)
        assert _peak_since_reset() < PEAK_ALLOWED


async def test_a_large_window_is_streamed(
    client: Client, store: SessionStore, traced: None
) -> None:
    total = await _large_transcript(store)
    tracemalloc.reset_peak()
    response = await client.get(f"/v1/sessions/{KEY}/transcript?limit=5000")
    assert response.status == 200
    received, head, tail = 0, b"", b""
    async for chunk in response.content.iter_chunked(64 * 1024):
        received += len(chunk)
        head = head or chunk[:4096]
        tail = (tail + chunk)[-64:]
    assert received > 5000 * CONTENT_CHARS
    assert tail.endswith(b'],"badLines":[]}')
    assert f'"start":{total - 5000},"total":{total}'.encode() in head
    assert _peak_since_reset() < PEAK_ALLOWED
