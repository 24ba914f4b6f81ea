"""A web page the operator happens to visit must not drive a gateway on their own machine.

The default set-up (``make run``: loopback, no ``gateway.auth.token``) trusts every local
client. A browser is a local client too, for any site it shows: a page can open a
WebSocket to ``ws://127.0.0.1:8787/webchat/ws`` (WebSockets are not bound by the
same-origin policy, so it reads the answers too), POST a "simple" ``text/plain`` request
with a JSON body (no CORS preflight), or rebind its own host name to 127.0.0.1 and then
read the API as same-origin. What stops each: the socket checking ``Origin``, the API
refusing bodies that are not ``application/json`` (or a foreign ``Origin``), and the
server refusing a ``Host`` that is not its own address.

Each attack has a control beside it, the same request from the gateway's own page or a
proper API client, which must keep working.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import orjson
from aiohttp.test_utils import TestServer

from gateway.app import SERVICES_KEY, build_app
from gateway.components import prepare_app, resources_for
from gateway.reload import SettingsHolder
from gateway.services import Services
from gateway.settings import HeraldSettings
from tests.security.support import raw_request

EVIL = "https://evil.example"
SPAWN = orjson.dumps({"tool": "sessions_spawn", "args": {"task": "mine some crypto"}})


@asynccontextmanager
async def open_gateway(tmp_path: Path) -> AsyncIterator[tuple[TestServer, Services]]:
    """The daemon's app on loopback with its defaults: web chat on, no token, demo model."""
    settings = HeraldSettings.model_validate(
        {
            "gateway": {"stateDir": str(tmp_path / "state"), "shutdownDrainSeconds": 0},
            "channels": {"webchat": {"enabled": True}},
        }
    )
    holder = SettingsHolder(settings)
    app = build_app(holder, resources=resources_for(holder, tmp_path))
    prepare_app(app, holder)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield server, app[SERVICES_KEY]
    finally:
        await server.close()


async def hello(server: TestServer, origin: str) -> str:
    """Open the web chat socket with ``origin`` and say hello; the first frame's type, or
    ``refused <status>`` when the handshake is refused."""
    async with aiohttp.ClientSession() as http:
        try:
            ws = await http.ws_connect(
                str(server.make_url("/webchat/ws")), headers={"Origin": origin}
            )
        except aiohttp.WSServerHandshakeError as exc:
            return f"refused {exc.status}"
        async with ws:
            await ws.send_json({"type": "hello", "clientId": "origin-test"})
            frame = await ws.receive_json(timeout=10)
            return str(frame["type"])


async def test_the_web_chat_page_itself_can_open_the_socket(tmp_path: Path) -> None:
    async with open_gateway(tmp_path) as (server, _):
        own = f"http://127.0.0.1:{server.port}"
        assert await hello(server, own) == "ready"


async def test_a_foreign_page_cannot_open_the_web_chat_socket(tmp_path: Path) -> None:
    async with open_gateway(tmp_path) as (server, _):
        assert await hello(server, EVIL) == "refused 403"


async def test_an_api_client_can_post_json(tmp_path: Path) -> None:
    async with open_gateway(tmp_path) as (server, services):
        port = server.port
        assert port is not None
        headers = {"Content-Type": "application/json"}
        response = await raw_request(port, "POST", "/v1/tools/invoke", headers=headers, body=SPAWN)
        assert response.status == 200
        assert len(await services.db.runs.list()) == 1


async def test_a_foreign_page_cannot_post_to_the_api(tmp_path: Path) -> None:
    async with open_gateway(tmp_path) as (server, services):
        port = server.port
        assert port is not None
        headers = {"Content-Type": "text/plain;charset=UTF-8", "Origin": EVIL}
        response = await raw_request(port, "POST", "/v1/tools/invoke", headers=headers, body=SPAWN)
        assert response.status in (403, 415)
        assert await services.db.runs.list() == []


async def test_a_rebound_host_name_is_refused(tmp_path: Path) -> None:
    async with open_gateway(tmp_path) as (server, _):
        port = server.port
        assert port is not None
        own = await raw_request(port, "GET", "/v1/sessions", headers={"Host": f"127.0.0.1:{port}"})
        assert own.status == 200
        rebound = await raw_request(port, "GET", "/v1/sessions", headers={"Host": "evil.example"})
        assert rebound.status in (403, 421)
