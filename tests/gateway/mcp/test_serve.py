"""Herald's own MCP endpoint, driven by the SDK's own client over Streamable HTTP on the
gateway's port: ``spawn`` with a chat target announces in the (fake) Slack chat and thread it
names, ``run_wait`` answers the result, the session tools answer, a bad target is an error
naming it, and without the bearer token the endpoint answers 401."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from gateway.mcp.results import result_text
from tests.fakes.slack import FakeSlack
from tests.gateway.harness import Harness, running_gateway
from tests.gateway.slack_fake import joined, slack_on_fake

TOKEN = "herald-mcp-token-5551212"
CHANNEL = "C0123456789"


@asynccontextmanager
async def serving(tmp_path: Path) -> AsyncIterator[tuple[Harness, FakeSlack]]:
    """A listening gateway with ``mcp.serve`` on and the real Slack channel on the fake."""
    config = {"gateway": {"auth": {"token": TOKEN}}, "mcp": {"serve": {"enabled": True}}}
    async with (
        slack_on_fake({CHANNEL}) as (fake, slack),
        running_gateway(tmp_path, config=config, listen=True) as gw,
        joined(gw, slack, fake),
    ):
        yield gw, fake


@asynccontextmanager
async def client(gw: Harness, token: str | None = TOKEN) -> AsyncIterator[ClientSession]:
    """The SDK's client session with Herald's endpoint."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with AsyncExitStack() as stack:
        http = await stack.enter_async_context(create_mcp_http_client(headers=headers))
        read, write = await stack.enter_async_context(
            streamable_http_client(f"{gw.base_url}/mcp", http_client=http)
        )
        session = await stack.enter_async_context(ClientSession(read, write))
        await session.initialize()
        yield session


async def call(session: ClientSession, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    result = await session.call_tool(tool, args)
    assert not result.is_error, result_text(result)
    assert isinstance(result.structured_content, dict)
    return result.structured_content


async def test_spawn_with_a_chat_target_announces_there_and_run_wait_answers(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path) as (gw, fake), client(gw) as session:
        listed = {tool.name for tool in (await session.list_tools()).tools}
        assert listed == {
            "spawn",
            "runs_list",
            "run_get",
            "run_wait",
            "run_abort",
            "sessions_list",
            "session_history",
        }
        thread = "1700000000.000100"
        accepted = await call(
            session,
            "spawn",
            {"task": "task: tides", "label": "tides", "to": f"slack:{CHANNEL}/{thread}"},
        )
        assert accepted["status"] == "accepted"
        run_id = accepted["runId"]
        assert accepted["childSessionKey"].startswith("agent:main:subagent:")
        waited = await call(session, "run_wait", {"runId": run_id, "timeoutSeconds": 30})
        assert waited["status"] == "done"
        assert waited["result"] == "done: tides"
        (announce,) = await fake.wait_posts(1)
        assert (announce.channel, announce.thread_ts) == (CHANNEL, thread)
        assert announce.text.startswith("ANNOUNCE: done: tides")
        # The requester is the chat's own session: the completion is written there.
        run = await gw.db.runs.get(run_id)
        assert run is not None
        thread_key = thread.replace(".", "_")
        assert (
            run.request.parent_session_key
            == f"agent:main:slack:channel:c0123456789:thread:{thread_key}"
        )
        got = await call(session, "run_get", {"runId": run_id})
        assert got["runId"] == run_id
        runs = await call(session, "runs_list", {"status": "done"})
        assert [r["runId"] for r in runs["runs"]] == [run_id]
        sessions = await call(session, "sessions_list", {})
        assert run.request.parent_session_key in {s["key"] for s in sessions["sessions"]}


async def test_the_openapi_document_names_the_endpoint(tmp_path: Path) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        serving(tmp_path) as (gw, _),
        aiohttp.ClientSession(headers=headers) as http,
        http.get(f"{gw.base_url}/openapi.json") as resp,
    ):
        document = await resp.json()
    assert document["paths"]["/mcp"]["post"]["operationId"] == "mcp"


async def test_a_bad_target_is_an_error_naming_it(tmp_path: Path) -> None:
    async with serving(tmp_path) as (gw, _), client(gw) as session:
        for target, reason in [
            ("discord:123456789012345678", "channel 'discord' is not enabled"),
            ("teams:abc", "unknown channel 'teams'"),
            ("slack:not-an-id", "is no slack chat id"),
        ]:
            result = await session.call_tool("spawn", {"task": "x", "to": target})
            assert result.is_error
            assert reason in result_text(result)
        assert await gw.db.runs.list(limit=10) == []


async def test_spawn_without_a_target_uses_the_default_agents_main_session(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path) as (gw, _), client(gw) as session:
        accepted = await call(session, "spawn", {"task": "task: quiet"})
        waited = await call(session, "run_wait", {"runId": accepted["runId"]})
        history = await call(session, "session_history", {"sessionKey": "agent:main:main"})
        run = await gw.db.runs.get(accepted["runId"])
    assert waited["result"] == "done: quiet"
    assert history["sessionKey"] == "agent:main:main"
    assert run is not None
    assert run.request.parent_session_key == "agent:main:main"


@pytest.mark.parametrize("token", [None, "wrong-token"])
async def test_without_the_token_the_endpoint_answers_401(
    tmp_path: Path, token: str | None
) -> None:
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    async with serving(tmp_path) as (gw, _), aiohttp.ClientSession() as http:
        async with http.post(f"{gw.base_url}/mcp", json=body, headers=headers) as resp:
            assert resp.status == 401
        with pytest.raises(BaseException):  # noqa: B017,PT011 - the SDK's own refusal
            async with client(gw, token=token):
                pass
