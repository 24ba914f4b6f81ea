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

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import orjson
from aiohttp.test_utils import TestServer

from gateway.app import build_app
from gateway.parts.state import STATE
from gateway.reload import SettingsHolder
from gateway.settings import HeraldSettings
from gateway.state import StateDB
from tests.fakes.slack import BOT_TOKEN, SIGNING_SECRET, FakeSlack
from tests.security.support import raw_request

EVIL = "https://evil.example"
SPAWN = orjson.dumps({"tool": "sessions_spawn", "args": {"task": "mine some crypto"}})


@asynccontextmanager
async def open_gateway(tmp_path: Path) -> AsyncIterator[tuple[TestServer, StateDB]]:
    """The daemon's app on loopback with its defaults: web chat on, no token, demo model."""
    settings = HeraldSettings.model_validate(
        {
            "gateway": {"stateDir": str(tmp_path / "state"), "shutdownDrainSeconds": 0},
            "channels": {"webchat": {"enabled": True}},
        }
    )
    holder = SettingsHolder(settings)
    app = build_app(holder, config_dir=tmp_path)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield server, app[STATE]
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
    async with open_gateway(tmp_path) as (server, db):
        port = server.port
        assert port is not None
        headers = {"Content-Type": "application/json"}
        response = await raw_request(port, "POST", "/v1/tools/invoke", headers=headers, body=SPAWN)
        assert response.status == 200
        assert len(await db.runs.list()) == 1


async def test_a_foreign_page_cannot_post_to_the_api(tmp_path: Path) -> None:
    async with open_gateway(tmp_path) as (server, db):
        port = server.port
        assert port is not None
        headers = {"Content-Type": "text/plain;charset=UTF-8", "Origin": EVIL}
        response = await raw_request(port, "POST", "/v1/tools/invoke", headers=headers, body=SPAWN)
        assert response.status in (403, 415)
        assert await db.runs.list() == []


async def test_a_rebound_host_name_is_refused(tmp_path: Path) -> None:
    async with open_gateway(tmp_path) as (server, _):
        port = server.port
        assert port is not None
        own = await raw_request(port, "GET", "/v1/sessions", headers={"Host": f"127.0.0.1:{port}"})
        assert own.status == 200
        rebound = await raw_request(port, "GET", "/v1/sessions", headers={"Host": "evil.example"})
        assert rebound.status in (403, 421)


FOREIGN_ORIGINS = [
    "null",  # sandboxed frames, file pages, some redirects
    "http://localhost:9",  # another local server: a dev server, a malicious package's
    "http://127.0.0.1.evil.example",
    "file://",
    "chrome-extension://abcdefghijklmnop",
    "http://127.0.0.1@evil.example",
]


async def test_no_foreign_origin_gets_through(tmp_path: Path) -> None:
    async with open_gateway(tmp_path) as (server, db):
        port = server.port
        assert port is not None
        for origin in FOREIGN_ORIGINS:
            assert await hello(server, origin) == "refused 403", origin
            for content_type in ("application/json", "application/x-www-form-urlencoded"):
                headers = {"Content-Type": content_type, "Origin": origin}
                response = await raw_request(
                    port, "POST", "/v1/tools/invoke", headers=headers, body=SPAWN
                )
                assert response.status in (403, 415), (origin, content_type, response.status)
            response = await raw_request(
                port, "POST", "/v1/runs/any/abort", headers={"Origin": origin}
            )
            assert response.status == 403, (origin, response.status)
        assert await db.runs.list() == []


async def test_a_signed_slack_event_arrives_through_a_tunnels_host_name(tmp_path: Path) -> None:
    """Slack HTTP mode needs a public URL; on a laptop that is a tunnel (ngrok, cloudflared)
    whose requests keep their public ``Host``. Slack's signature, not the host name, is what
    makes those requests trustworthy, so the no-token host check must let them through."""
    fake = FakeSlack(channels={"D1"})
    await fake.start()
    try:
        settings = HeraldSettings.model_validate(
            {
                "gateway": {"stateDir": str(tmp_path / "state"), "shutdownDrainSeconds": 0},
                "channels": {
                    "webchat": {"enabled": False},
                    "slack": {
                        "enabled": True,
                        "mode": "http",
                        "botToken": BOT_TOKEN,
                        "signingSecret": SIGNING_SECRET,
                        "apiBaseUrl": fake.api_base_url,
                    },
                },
            }
        )
        holder = SettingsHolder(settings)
        app = build_app(holder, config_dir=tmp_path)
        async with TestServer(app, host="127.0.0.1") as server:
            port = server.port
            assert port is not None
            event = fake.message("hello", channel="D1", user="U1")
            body = json.dumps(fake.event_callback(event, event_id="EvTunnel")).encode()
            headers = {
                "Host": "herald-dev.ngrok-free.app",
                "Content-Type": "application/json",
                **FakeSlack.sign(body),
            }
            response = await raw_request(port, "POST", "/slack/events", headers=headers, body=body)
            assert response.status == 200, response
            (post,) = await fake.wait_posts(1)
            assert post.channel == "D1"
    finally:
        await fake.close()
