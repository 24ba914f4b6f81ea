"""Where Herald's MCP endpoint may live (``mcp.serve.path``), and that it asks for the bearer
token on its own route whatever that path is.

A path that shares its first segment with a route of the gateway (a probe, the web chat's
page or assets, Slack's events URL, the API) is a config error: ``herald config check`` and
``herald run`` exit 78 naming the file, the line and the key. Were such a path served anyway
(a test gateway skips those checks), the endpoint still refuses a request without the token:
the token check is the route's own, not the app's list of public paths. At an unusual path
of its own the endpoint works through the SDK's client with the token, and refuses without.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import aiohttp
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from gateway.api.paths import mcp_path_problem
from tests.gateway.daemon_process import free_port
from tests.gateway.harness import Harness, running_gateway
from tests.gateway.test_preflight import herald, refused_by_both

TOKEN = "herald-mcp-path-token-8675309"
#: The paths the red team opened /mcp at: each is another route's (or under one).
COLLIDING = ["/", "/healthz", "/readyz", "/static/mcp", "/slack/events"]
#: More of the gateway's own routes and trees.
ALSO_COLLIDING = ["/v1/mcp", "/webchat/ws", "/metrics", "/healthz/mcp"]
UNUSUAL = ["/static-mcp", "/x/mcp", "/mcpx"]
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
LIST_TOOLS = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
#: The line of ``path`` in :func:`config_file`'s file.
PATH_LINE = 6


def config_file(tmp_path: Path, path: str) -> Path:
    file = tmp_path / "herald.json5"
    file.write_text(
        "{\n"
        f'  gateway: {{ port: {free_port()}, stateDir: "{tmp_path / "state"}",\n'
        f'             auth: {{ token: "{TOKEN}" }} }},\n'
        "  channels: { webchat: { enabled: false } },\n"
        "  mcp: { serve: { enabled: true,\n"
        f'                 path: "{path}" }} }},\n'
        "}\n"
    )
    return file


@pytest.mark.parametrize("path", COLLIDING + ALSO_COLLIDING)
def test_a_path_colliding_with_a_gateway_route_exits_78(tmp_path: Path, path: str) -> None:
    file = config_file(tmp_path, path)
    refused_by_both(
        file,
        f"{file}:{PATH_LINE}:",
        f"mcp.serve.path: {path!r} collides with the gateway's own route",
    )
    assert not (tmp_path / "state").exists()


def test_every_path_of_the_gateway_collides_and_unusual_ones_do_not() -> None:
    for path in COLLIDING + ALSO_COLLIDING:
        assert mcp_path_problem(path) is not None, path
    for path in [*UNUSUAL, "/mcp"]:
        assert mcp_path_problem(path) is None, path


def test_an_unusual_path_of_its_own_passes_the_check(tmp_path: Path) -> None:
    file = config_file(tmp_path, "/x/mcp")
    done = herald("config", "check", "--config", str(file))
    assert done.returncode == 0, done.stdout + done.stderr


@asynccontextmanager
async def serving_at(tmp_path: Path, path: str) -> AsyncIterator[Harness]:
    """A listening gateway with the endpoint at ``path``, built without the start's checks
    (as if a collision had slipped past them)."""
    config = {
        "gateway": {"auth": {"token": TOKEN}},
        "mcp": {"serve": {"enabled": True, "path": path}},
    }
    async with running_gateway(tmp_path, config=config, listen=True) as gw:
        yield gw


async def post(url: str, token: str | None) -> int:
    headers = dict(HEADERS)
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    async with (
        aiohttp.ClientSession() as http,
        http.post(url, json=LIST_TOOLS, headers=headers) as resp,
    ):
        return resp.status


@pytest.mark.parametrize("path", COLLIDING)
async def test_at_a_colliding_path_the_endpoint_still_asks_for_the_token(
    tmp_path: Path, path: str
) -> None:
    async with serving_at(tmp_path, path) as gw:
        url = gw.base_url + path
        assert await post(url, None) == 401
        assert await post(url, "wrong") == 401
        assert await post(url, TOKEN) == 200


@asynccontextmanager
async def client(url: str, token: str | None) -> AsyncIterator[ClientSession]:
    """The SDK's client session with the endpoint at ``url``."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with AsyncExitStack() as stack:
        http = await stack.enter_async_context(create_mcp_http_client(headers=headers))
        read, write = await stack.enter_async_context(streamable_http_client(url, http_client=http))
        session = await stack.enter_async_context(ClientSession(read, write))
        await session.initialize()
        yield session


@pytest.mark.parametrize("path", UNUSUAL)
async def test_at_an_unusual_path_the_sdk_client_needs_the_token(tmp_path: Path, path: str) -> None:
    async with serving_at(tmp_path, path) as gw:
        url = gw.base_url + path
        assert await post(url, None) == 401
        async with client(url, TOKEN) as session:
            listed = {tool.name for tool in (await session.list_tools()).tools}
        assert {"spawn", "run_wait"} <= listed
        with pytest.raises(BaseException):  # noqa: B017,PT011 - the SDK's own refusal
            async with client(url, None):
                pass
