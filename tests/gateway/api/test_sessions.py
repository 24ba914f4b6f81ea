"""``GET /v1/sessions`` and ``GET /v1/sessions/{sessionKey}/history`` over real HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from gateway.api.keys import SESSION_STORE
from gateway.api.routes import route_defs
from gateway.llm import ChatMessage, ToolCall
from gateway.sessions import SessionKey, SessionStore
from tests.gateway.sessions.support import opened_store

Client = TestClient[web.Request, web.Application]
AiohttpClient = Callable[[web.Application], Awaitable[Client]]


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


async def _json(client: Client, url: str, status: int = 200) -> Any:
    response = await client.get(url)
    assert response.status == status, await response.text()
    return await response.json()


async def test_list_hides_subagent_and_archived_sessions_unless_asked(
    client: Client, store: SessionStore
) -> None:
    main = await store.ensure("agent:main:main")
    child = await store.ensure(SessionKey.subagent("main"), parent_key=main.key)
    gone = await store.ensure("agent:main:webchat:old")
    await store.archive(gone.key)

    body = await _json(client, "/v1/sessions")
    assert [s["key"] for s in body["sessions"]] == [main.key]
    first = body["sessions"][0]
    assert first["sessionId"] == main.session_id
    assert first["kind"] == "main"
    assert first["transcriptPath"] == str(store.transcript_path(main))

    body = await _json(client, "/v1/sessions?includeSubagents=true")
    assert {s["key"] for s in body["sessions"]} == {main.key, child.key}
    body = await _json(client, "/v1/sessions?includeSubagents=1&includeArchived=TRUE")
    assert {s["key"] for s in body["sessions"]} == {main.key, child.key, gone.key}
    body = await _json(client, "/v1/sessions?includeArchived=false")
    assert len(body["sessions"]) == 1


async def test_list_rejects_a_bad_flag(client: Client) -> None:
    body = await _json(client, "/v1/sessions?includeSubagents=maybe", 400)
    assert body["error"]["code"] == "invalid_parameter"
    assert body["error"]["field"] == "includeSubagents"


async def _conversation(store: SessionStore) -> str:
    record = await store.ensure("agent:main:slack:channel:c1:thread:1712345678_123456")
    call = ToolCall(id="c1", name="ls", arguments={})
    messages = [
        ChatMessage(role="user", content="what is here?"),
        ChatMessage(role="assistant", content="", tool_calls=(call,)),
        ChatMessage(role="tool", content="a.txt", tool_call_id="c1", tool_name="ls"),
        ChatMessage(role="assistant", content="One file: a.txt"),
    ]
    for message in messages:
        await store.append_message(record, message)
    return record.key


async def test_history_with_a_raw_or_encoded_key(client: Client, store: SessionStore) -> None:
    key = await _conversation(store)
    for url_key in (key, quote(key, safe="")):
        body = await _json(client, f"/v1/sessions/{url_key}/history")
        assert body["sessionKey"] == key
        assert body["archived"] is False
        assert [(m["role"], m["content"]) for m in body["messages"]] == [
            ("user", "what is here?"),
            ("assistant", "One file: a.txt"),
        ]


async def test_history_with_tools_and_limit(client: Client, store: SessionStore) -> None:
    key = await _conversation(store)
    body = await _json(client, f"/v1/sessions/{key}/history?includeTools=true&limit=3")
    assert [m["role"] for m in body["messages"]] == ["assistant", "tool", "assistant"]
    assert body["messages"][0]["toolCalls"] == [{"id": "c1", "name": "ls", "arguments": {}}]
    body = await _json(client, f"/v1/sessions/{key}/history?limit=1")
    assert [m["content"] for m in body["messages"]] == ["One file: a.txt"]


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("limit=ten", "limit"),
        ("limit=2.5", "limit"),
        ("includeTools=yes", "includeTools"),
    ],
)
async def test_history_rejects_bad_parameters(
    client: Client, store: SessionStore, query: str, field: str
) -> None:
    key = await _conversation(store)
    body = await _json(client, f"/v1/sessions/{key}/history?{query}", 400)
    assert body["error"]["code"] == "invalid_parameter"
    assert body["error"]["field"] == field


async def test_history_of_unknown_and_malformed_keys(client: Client) -> None:
    body = await _json(client, "/v1/sessions/agent:main:webchat:nobody/history", 404)
    assert body["error"]["code"] == "session_not_found"
    body = await _json(client, f"/v1/sessions/{quote('agent:main:../x', safe='')}/history", 400)
    assert body["error"] == {
        "code": "invalid_session_key",
        "message": body["error"]["message"],
        "field": "sessionKey",
    }


async def test_history_of_an_archived_session(client: Client, store: SessionStore) -> None:
    key = await _conversation(store)
    await store.archive(key)
    body = await _json(client, f"/v1/sessions/{key}/history")
    assert body["archived"] is True
    assert len(body["messages"]) == 2
