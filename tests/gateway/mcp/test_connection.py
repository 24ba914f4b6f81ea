"""One server's client session: calls, timeouts cancelled the MCP way, ``isError``, a crash
and the restart after it, images, ``tools/list_changed``, a command that does not exist and
the environment a stdio server sees — against the SDK-written fake, over stdio and HTTP."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import types

from gateway.mcp.connection import McpCallError, ServerConnection, ServerState
from gateway.mcp.results import result_text
from gateway.schema.mcp import McpServerConfig
from tests.gateway.mcp.conftest import HttpServer, fake_stdio, free_port, until

Published = list[list[str]]


@asynccontextmanager
async def connected(
    config: dict[str, Any],
    *,
    environ: dict[str, str] | None = None,
    ping_seconds: float = 30.0,
) -> AsyncIterator[tuple[ServerConnection, Published]]:
    """A started connection (first attempt settled) and every tool list it published."""
    published: Published = []

    def on_tools(_server: str, tools: Sequence[types.Tool]) -> None:
        published.append([tool.name for tool in tools])

    connection = ServerConnection(
        "fake",
        McpServerConfig.model_validate(config),
        on_tools=on_tools,
        environ=os.environ if environ is None else environ,
        ping_seconds=ping_seconds,
    )
    connection.start()
    try:
        await asyncio.wait_for(connection.settled(), 30)
        yield connection, published
    finally:
        await connection.stop()


ConfigFor = Callable[[Path], Awaitable[dict[str, Any]]]


@pytest.fixture(params=["stdio", "http"])
async def config_for(request: pytest.FixtureRequest, http_server: HttpServer) -> ConfigFor:
    """The fake server's config (with its marks directory) over each transport."""
    transport: str = request.param

    async def config(marks: Path) -> dict[str, Any]:
        if transport == "stdio":
            return fake_stdio(marks)
        return {"url": await http_server(marks)}

    return config


async def test_tools_are_listed_and_called(tmp_path: Path, config_for: ConfigFor) -> None:
    async with connected(await config_for(tmp_path)) as (server, published):
        assert server.state is ServerState.READY
        assert server.status() == "ready"
        assert "echo" in published[-1]
        result = await server.call("echo", {"text": "hi"})
    assert result_text(result) == "echo: hi"


async def test_a_slow_call_times_out_and_is_cancelled_on_the_server(
    tmp_path: Path, config_for: ConfigFor
) -> None:
    async with connected(await config_for(tmp_path)) as (server, _):
        with pytest.raises(McpCallError) as raised:
            await server.call("slow", {"seconds": 60, "tag": "t1"}, limit_seconds=0.3)
        assert raised.value.outcome == "timeout"
        assert "MCP server 'fake'" in str(raised.value)
        assert "cancelled" in str(raised.value)
        # notifications/cancelled reached the server: its handler was interrupted.
        await until(lambda: (tmp_path / "t1.cancelled").exists(), "the server's cancellation")
        # The session is still usable.
        assert result_text(await server.call("echo", {"text": "after"})) == "echo: after"


async def test_calls_share_one_session_concurrently_and_a_cancelled_caller_cancels_its_call(
    tmp_path: Path, config_for: ConfigFor
) -> None:
    async with connected(await config_for(tmp_path)) as (server, _):
        calls = [
            asyncio.ensure_future(server.call("slow", {"seconds": 60, "tag": f"c{i}"}))
            for i in range(8)
        ]
        # Every call runs on the server at once: none waits for another to end.
        await until(
            lambda: all((tmp_path / f"c{i}.started").exists() for i in range(8)),
            "eight concurrent calls",
        )
        for call in calls:
            call.cancel()
        await asyncio.gather(*calls, return_exceptions=True)
        await until(
            lambda: all((tmp_path / f"c{i}.cancelled").exists() for i in range(8)),
            "the server's cancellations",
        )


async def test_is_error_is_an_error_result(tmp_path: Path, config_for: ConfigFor) -> None:
    async with connected(await config_for(tmp_path)) as (server, _):
        result = await server.call("fail", {"message": "no such issue"})
    assert result.is_error
    assert "no such issue" in result_text(result)


async def test_images_become_a_one_line_note(tmp_path: Path, config_for: ConfigFor) -> None:
    async with connected(await config_for(tmp_path)) as (server, _):
        result = await server.call("picture", {})
    assert result_text(result) == "[image/png, 70 bytes]"


async def test_list_changed_refreshes_the_tools(tmp_path: Path, config_for: ConfigFor) -> None:
    async with connected(await config_for(tmp_path)) as (server, published):
        assert "lookup" not in published[-1]
        await server.call("grow", {"tool": "lookup"})
        await until(lambda: "lookup" in published[-1], "the refreshed tool list")
        assert result_text(await server.call("lookup", {})) == "lookup here"


async def test_a_crash_is_an_error_result_then_the_server_restarts(tmp_path: Path) -> None:
    async with connected(fake_stdio(tmp_path)) as (server, published):
        with pytest.raises(McpCallError) as raised:
            await server.call("crash", {})
        assert raised.value.outcome == "failed"
        assert "MCP server 'fake'" in str(raised.value)
        # Its tools are withdrawn while it is down, then it is back with them.
        await until(lambda: [] in published, "the tools' withdrawal")
        await until(lambda: server.state is ServerState.READY, "the restart")
        assert server.restarts == 1
        assert "echo" in published[-1]
        assert result_text(await server.call("echo", {"text": "back"})) == "echo: back"


async def test_an_http_server_that_goes_away_is_noticed_and_reconnected(
    tmp_path: Path, http_server: HttpServer
) -> None:
    port = free_port()
    url = await http_server(tmp_path, port=port)
    async with connected({"url": url}, ping_seconds=0.2) as (server, published):
        with pytest.raises(McpCallError) as raised:  # the server's process ends mid-call
            await server.call("crash", {}, limit_seconds=10)
        assert "MCP server 'fake'" in str(raised.value)
        # Noticed (the broken call, or the next ping), its tools withdrawn...
        await until(lambda: server.state is not ServerState.READY, "the server's loss")
        await until(lambda: [] in published, "the tools' withdrawal")
        # ...and once it is back on its address, the connection is made again.
        await http_server(tmp_path, port=port)
        await until(lambda: server.state is ServerState.READY, "the reconnection")
        assert result_text(await server.call("echo", {"text": "back"})) == "echo: back"


async def test_a_command_that_does_not_exist_fails_and_says_so(tmp_path: Path) -> None:
    async with connected({"command": "herald-no-such-mcp-server"}) as (server, published):
        assert server.state is ServerState.FAILED
        assert server.status() == "failed: command not found: herald-no-such-mcp-server"
        assert published == []
        with pytest.raises(McpCallError, match="not connected"):
            await server.call("echo", {"text": "x"})


async def test_a_stdio_server_sees_only_the_neutral_variables_and_its_own_env(
    tmp_path: Path,
) -> None:
    environ = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "LANG": "C.UTF-8",
        "LC_TIME": "C",
        "TZ": "UTC",
        "OPENAI_API_KEY": "sk-secret-of-herald",
        "HERALD_GATEWAY__AUTH__TOKEN": "token-of-herald",
    }
    config = fake_stdio(env={"ISSUES_TOKEN": "for-this-server"})
    async with connected(config, environ=environ) as (server, _):
        seen = json.loads(result_text(await server.call("environment", {})))
    assert seen["ISSUES_TOKEN"] == "for-this-server"
    assert {seen[k] for k in ("LANG", "LC_TIME", "TZ")} == {"C.UTF-8", "C", "UTC"}
    assert "OPENAI_API_KEY" not in seen
    assert "HERALD_GATEWAY__AUTH__TOKEN" not in seen
    assert "sk-secret-of-herald" not in json.dumps(seen)
    # Only what Herald passes and what the SDK's stdio client always passes.
    neutral = {"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "LC_TIME", "TZ"}
    # The interpreter itself may add a few of its own (macOS: __CF_USER_TEXT_ENCODING).
    assert set(seen) - neutral - {"ISSUES_TOKEN"} <= {"LC_CTYPE"}
