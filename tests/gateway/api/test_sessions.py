"""``GET /v1/sessions`` and ``GET /v1/sessions/{sessionKey}/history`` over real HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from gateway.api.routes import route_defs
from gateway.llm import ChatMessage, ToolCall, Usage
from gateway.parts.state import SESSION_STORE
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


async def _transcript_session(store: SessionStore) -> str:
    """A conversation with a tool round, a reply with usage and an event."""
    record = await store.ensure("agent:main:webchat:reader", model="demo/scripted")
    call = ToolCall(id="c1", name="ls", arguments={"path": "."})
    await store.append_message(record, ChatMessage(role="user", content="what is here?"))
    await store.append_message(
        record, ChatMessage(role="assistant", content="", tool_calls=(call,)), usage=Usage(90, 7)
    )
    await store.append_message(
        record, ChatMessage(role="tool", content="a.txt", tool_call_id="c1", tool_name="ls")
    )
    await store.append_event(record, "spawned", {"runId": "r1"})
    await store.append_message(
        record,
        ChatMessage(role="assistant", content="One file: a.txt"),
        model="demo/scripted",
        usage=Usage(120, 12),
    )
    await store.add_usage(record.key, Usage(210, 19), 0.0012)
    return record.key


async def test_transcript_answers_every_record_as_written(
    client: Client, store: SessionStore
) -> None:
    key = await _transcript_session(store)
    body = await _json(client, f"/v1/sessions/{quote(key, safe='')}/transcript")
    records = body["records"]
    assert [r["type"] for r in records] == [
        "session",
        "message",
        "message",
        "message",
        "event",
        "message",
    ]
    assert (body["start"], body["total"], body["tornBytes"], body["badLines"]) == (0, 6, 0, [])
    assert records[0]["key"] == key
    assert records[2]["message"]["toolCalls"] == [
        {"id": "c1", "name": "ls", "arguments": {"path": "."}}
    ]
    assert records[2]["message"]["usage"]["input"] == 90
    assert records[3]["message"] == {
        "role": "tool",
        "content": "a.txt",
        "toolCallId": "c1",
        "toolName": "ls",
    }
    assert (records[4]["event"], records[4]["data"]) == ("spawned", {"runId": "r1"})
    assert records[5]["message"]["model"] == "demo/scripted"
    assert records[5]["message"]["usage"]["total"] == 132
    session = body["session"]
    assert (session["key"], session["usage"]["total"], session["costUsd"]) == (key, 229, 0.0012)
    assert session["origin"] is None
    assert session["title"] == "Web chat — what is here?"
    listed = await _json(client, "/v1/sessions")
    assert [s["title"] for s in listed["sessions"]] == ["Web chat — what is here?"]


async def test_transcript_pages_back_from_the_end(client: Client, store: SessionStore) -> None:
    key = await _transcript_session(store)
    body = await _json(client, f"/v1/sessions/{key}/transcript?limit=2")
    assert (body["start"], body["total"]) == (4, 6)
    assert [r["type"] for r in body["records"]] == ["event", "message"]
    body = await _json(client, f"/v1/sessions/{key}/transcript?limit=3&before=4")
    assert body["start"] == 1
    assert [r["message"]["role"] for r in body["records"]] == ["user", "assistant", "tool"]
    body = await _json(client, f"/v1/sessions/{key}/transcript?before=99")
    assert (body["start"], len(body["records"])) == (0, 6)
    body = await _json(client, f"/v1/sessions/{key}/transcript?before=0")
    assert (body["start"], body["records"]) == (0, [])


async def test_transcript_of_an_archived_session_and_of_a_torn_file(
    client: Client, store: SessionStore
) -> None:
    key = await _transcript_session(store)
    path = await store.archive(key)
    assert path is not None
    with path.open("ab") as file:
        file.write(b'{"type":"message","id":7}\nnot json\n{"type":"mess')
    body = await _json(client, f"/v1/sessions/{key}/transcript")
    assert body["session"]["archived"] is True
    assert body["session"]["transcriptPath"] == str(path)
    assert body["total"] == 8
    # A hand-edited line that does not fit is passed on whole, not dropped; one that does
    # not parse keeps its place (and the indices of the records after it) as "unknown".
    assert body["records"][-2] == {"type": "unknown", "line": {"type": "message", "id": 7}}
    assert body["records"][-1] == {"type": "unknown"}
    assert body["badLines"] == [8]
    assert body["tornBytes"] == len(b'{"type":"mess')


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("limit=0", "limit"),
        ("limit=5001", "limit"),
        ("before=-1", "before"),
        ("before=x", "before"),
    ],
)
async def test_transcript_rejects_bad_parameters(
    client: Client, store: SessionStore, query: str, field: str
) -> None:
    key = await _transcript_session(store)
    body = await _json(client, f"/v1/sessions/{key}/transcript?{query}", 400)
    assert (body["error"]["code"], body["error"]["field"]) == ("invalid_parameter", field)


async def test_transcript_of_unknown_and_malformed_keys(client: Client) -> None:
    body = await _json(client, "/v1/sessions/agent:main:webchat:nobody/transcript", 404)
    assert body["error"]["code"] == "session_not_found"
    for bad in ("agent:main:../x", "../../etc/passwd", "agent:Main:main/../x"):
        body = await _json(client, f"/v1/sessions/{quote(bad, safe='')}/transcript", 400)
        assert body["error"]["code"] == "invalid_session_key"
