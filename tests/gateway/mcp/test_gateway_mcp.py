"""MCP servers in a running gateway: the official ``mcp-server-time`` called through a chat
turn on the OpenAI wire fake; a server that cannot start leaves the rest working and shows on
``/readyz``; ``/metrics``; the tool policy's ``group:mcp`` and ``mcp:<server>``; a sub-agent's
set; config mistakes."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from gateway.api.keys import DATABASE, DISK_FULL, MCP_STATES, READINESS, SCRAPE
from gateway.api.routes import route_defs
from gateway.cli import main
from gateway.config import load_settings
from gateway.constants import EXIT_CONFIG
from gateway.errors import ConfigError
from gateway.mcp.setup import MCP
from gateway.tools import tools_for_agent, tools_for_subagent
from tests.fakes.openai import FakeOpenAI, openai_server
from tests.gateway.harness import Harness, fake_model_config, hang_guard, running_gateway
from tests.gateway.mcp.conftest import ROOT, fake_stdio, time_stdio


@pytest.fixture
async def model() -> Any:
    async with openai_server() as fake:
        yield fake


async def settled(gw: Harness) -> None:
    async with hang_guard("the MCP servers' start"):
        await gw.app[MCP].settled()


def probe_app(gw: Harness) -> web.Application:
    """``/readyz`` and ``/metrics`` over ``gw``'s probes."""
    app = web.Application()
    app.add_routes(route_defs("/readyz", "/metrics"))
    for key in (READINESS, DATABASE, DISK_FULL, SCRAPE, MCP_STATES):
        app[key] = gw.app[key]  # type: ignore[misc]
    return app


async def test_a_reference_server_is_called_through_a_chat_turn(
    tmp_path: Path, model: FakeOpenAI
) -> None:
    model.reply_tool_calls([("call_1", "time__get_current_time", {"timezone": "UTC"})])
    model.reply_text("It is now.")
    config = fake_model_config(model, {"mcp": {"servers": {"time": time_stdio()}}})
    async with running_gateway(tmp_path, config=config) as gw:
        await settled(gw)
        await gw.say("what time is it in UTC?")
        reply = await gw.reply()
    assert reply.text == "It is now."
    offered = {t["function"]["name"]: t["function"] for t in model.requests[0].body["tools"]}
    tool = offered["time__get_current_time"]
    assert "(from MCP server time)" in tool["description"]
    assert "timezone" in tool["parameters"]["properties"]
    result = next(m for m in model.requests[1].body["messages"] if m["role"] == "tool")
    assert json.loads(result["content"])["timezone"] == "UTC"


async def test_a_server_that_cannot_start_leaves_the_gateway_and_the_others_working(
    tmp_path: Path, model: FakeOpenAI
) -> None:
    model.reply_tool_calls([("call_1", "fake__echo", {"text": "still here"})])
    model.reply_text("done")
    servers = {"fake": fake_stdio(), "broken": {"command": "herald-no-such-mcp-server"}}
    config = fake_model_config(model, {"mcp": {"servers": servers}})
    async with running_gateway(tmp_path, config=config) as gw:
        await settled(gw)
        await gw.say("echo something")
        assert (await gw.reply()).text == "done"
        async with TestClient(TestServer(probe_app(gw))) as client:
            ready = await client.get("/readyz")
            body = await ready.json()
            metrics = await (await client.get("/metrics")).text()
    result = next(m for m in model.requests[1].body["messages"] if m["role"] == "tool")
    assert result["content"] == "echo: still here"
    assert ready.status == 200  # chats work: an MCP server never makes the gateway unready
    assert body["mcp"] == {
        "fake": "ready",
        "broken": "failed: command not found: herald-no-such-mcp-server",
    }
    assert 'herald_mcp_server_up{server="fake"} 1.0' in metrics
    assert 'herald_mcp_server_up{server="broken"} 0.0' in metrics
    assert 'herald_mcp_calls_total{outcome="ok",server="fake"} 1.0' in metrics


async def test_an_error_result_reaches_the_model_as_a_tool_error(
    tmp_path: Path, model: FakeOpenAI
) -> None:
    model.reply_tool_calls([("call_1", "fake__fail", {"message": "issue 42 is locked"})])
    model.reply_text("sorry")
    config = fake_model_config(model, {"mcp": {"servers": {"fake": fake_stdio()}}})
    async with running_gateway(tmp_path, config=config) as gw:
        await settled(gw)
        await gw.say("lock it")
        await gw.reply()
    result = next(m for m in model.requests[1].body["messages"] if m["role"] == "tool")
    assert "fake__fail (MCP server 'fake') failed:" in result["content"]
    assert "issue 42 is locked" in result["content"]


async def test_policy_groups_and_a_subagents_set(tmp_path: Path, model: FakeOpenAI) -> None:
    config = fake_model_config(
        model,
        {
            "mcp": {"servers": {"fake": fake_stdio(), "time": time_stdio()}},
            "agent": {"subagents": {"tools": {"deny": ["mcp:time"]}}},
            "routing": {
                "agents": {
                    "helper": {"tools": {"allow": ["group:fs", "mcp:fake"]}},
                    "other": {"tools": {"deny": ["group:mcp"]}},
                }
            },
        },
    )
    async with running_gateway(tmp_path, config=config) as gw:
        await settled(gw)
        settings, registry = gw.settings, gw.tools
        main = tools_for_agent(settings, "main", registry)
        helper = tools_for_agent(settings, "helper", registry)
        other = tools_for_agent(settings, "other", registry)
        child = tools_for_subagent(settings, "main", "main", registry)
    assert {"fake__echo", "time__get_current_time", "time__convert_time"} <= main
    assert "fake__echo" in helper
    assert "read" in helper
    assert not any(name.startswith("time__") for name in helper)  # allow-only
    assert not any("__" in name for name in other)  # group:mcp denied
    assert "fake__echo" in child  # a sub-agent keeps what its parent has and is not denied
    assert not any(name.startswith("time__") for name in child)


def test_an_unknown_server_in_a_policy_is_a_config_error_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "herald.json5"
    path.write_text(
        "{\n"
        '  mcp: { servers: { time: { command: "uvx", args: ["mcp-server-time"] } } },\n'
        "  agent: { tools: {\n"
        '    deny: ["mcp:tiem", "issues__create"],\n'
        "  } },\n"
        "}\n"
    )
    with pytest.raises(ConfigError) as raised:
        load_settings(path, environ={})
    assert main(["config", "check", "--config", str(path)]) == EXIT_CONFIG  # 78
    text = str(raised.value)
    assert f"{path}:4" in text
    assert "'mcp:tiem' names MCP server 'tiem', which is not in mcp.servers" in text
    assert "'issues__create' names MCP server 'issues'" in text


def test_a_server_with_stdio_and_http_fields_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "herald.json5"
    path.write_text(
        "{\n"
        "  mcp: { servers: {\n"
        '    issues: { command: "issues-mcp", url: "https://mcp.example.com/mcp" },\n'
        "  } },\n"
        "}\n"
    )
    with pytest.raises(ConfigError) as raised:
        load_settings(path, environ={})
    text = str(raised.value)
    assert f"{path}:3" in text
    assert "mcp.servers.issues" in text
    assert "stdio" in text
    assert "not both" in text


def test_header_and_env_values_are_masked_in_config_show(tmp_path: Path) -> None:
    path = tmp_path / "herald.json5"
    path.write_text(
        "{ mcp: { servers: {\n"
        '  issues: { url: "https://mcp.example.com/mcp",\n'
        '            headers: { Authorization: "Bearer ${ISSUES_TOKEN}" } },\n'
        '  local: { command: "local-mcp", env: { API_KEY: "k-123456789" } },\n'
        "} } }\n"
    )
    loaded = load_settings(path, environ={"ISSUES_TOKEN": "tok-987654321"})
    secrets = loaded.settings.secret_values()
    assert "Bearer tok-987654321" in secrets
    assert "k-123456789" in secrets
    shown = loaded.settings.model_dump_json()
    assert "tok-987654321" not in shown
    assert "k-123456789" not in shown


def test_a_gateway_without_mcp_does_not_import_the_sdk() -> None:
    # The SDK is a large import: a gateway without MCP servers must not pay for it at start.
    code = (
        "import sys, gateway.app, gateway.cli, gateway.daemon\n"
        "loaded = sorted(m for m in sys.modules if m == 'mcp' or m.startswith('mcp.'))\n"
        "print(loaded)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert done.stdout.strip() == "[]"


async def test_a_policy_naming_a_tool_the_server_lacks_is_a_warning(
    tmp_path: Path, model: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    config = fake_model_config(
        model,
        {
            "mcp": {"servers": {"fake": fake_stdio()}},
            "agent": {"tools": {"deny": ["fake__no_such_tool", "fake__crash"]}},
        },
    )
    with caplog.at_level(logging.WARNING, logger="gateway.mcp.manager"):
        async with running_gateway(tmp_path, config=config) as gw:
            await settled(gw)
            offered = tools_for_agent(gw.settings, "main", gw.tools)
    warned = [r for r in caplog.records if "does not list" in r.getMessage()]
    assert [getattr(r, "tool", None) for r in warned] == ["fake__no_such_tool"]
    assert "fake__crash" not in offered  # a denied MCP tool is denied
    assert "fake__echo" in offered
