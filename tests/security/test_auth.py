"""The bearer token on a real ``herald run``: every route of the app the daemon
builds, called without a token, with wrong and nearly-right tokens, and with the right one.

The daemon runs with ``gateway.auth.token`` set, the web chat enabled and Slack in HTTP mode
against the fake Slack, so every channel route exists. The routes are read from an app
built exactly as the daemon builds it (``build_app`` + ``prepare_app``), joined with the
paths of ``/openapi.json`` when the daemon serves it and the routes the README documents.
Public: ``/healthz``, ``/readyz``, the web chat page and its assets, and ``/slack/events``
(which answers to Slack's signature instead: the bearer token does not replace it).
"""

from __future__ import annotations

import re
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from gateway.api.paths import is_public
from gateway.app import build_app
from gateway.config import load_settings
from gateway.errors import ConfigError
from gateway.reload import SettingsHolder
from tests.fakes.slack import BOT_TOKEN, SIGNING_SECRET, FakeSlack
from tests.gateway.daemon_process import Daemon, clean_env, free_port, herald, write_config
from tests.security.support import raw_request

TOKEN = "Zq8-auth-token-4c1f9e7d2b6a"
#: Values for path parameters: each route must answer without the token being needed to
#: find out that the value names nothing.
SAMPLES = {"runId": "no-such-run", "sessionKey": "agent:main:main", "jobId": "no-such-job"}
#: Routes the README documents, whether or not this build serves them yet.
PINNED = [("GET", "/metrics"), ("GET", "/openapi.json"), ("GET", "/v1/sessions")]
#: Paths that try to reach an API route through a public prefix or by odd spelling.
TRICKS = [
    "/static/../v1/runs",
    "/static/%2e%2e/v1/runs",
    "/static/webchat/../../v1/runs",
    "/static/..%2fv1/runs",
    "/static/webchat/app.js/../../../v1/sessions",
    "/./v1/runs",
    "//v1/runs",
    "/v1//runs",
    "/v1/runs/",
    "/%2fv1/runs",
    "/V1/RUNS",
    "/healthz/../v1/runs",
    "/slack/events/../../v1/runs",
    "/v1/runs;/healthz",
    "/v1/runs%00/healthz",
    "/v1/runs?x=/healthz",
    "/v1/runs#/healthz",
]


def near_misses(token: str) -> list[dict[str, str]]:
    """Headers that must all be refused: wrong, nearly right, or right in the wrong place."""
    last = "a" if token[-1] != "a" else "b"
    return [
        {"Authorization": "Bearer wrong-token"},
        {"Authorization": f"Bearer {token[:-1]}{last}"},  # differs only in the last char
        {"Authorization": f"Bearer {token[:-1]}"},  # a prefix
        {"Authorization": f"Bearer {token}x"},  # an extension
        {"Authorization": f"Bearer {token.upper()}"},
        {"Authorization": f"Basic {token}"},
        {"Authorization": token},
        {"Authorization": "Bearer "},
        {"X-Api-Key": token},
        {"Cookie": f"token={token}"},
    ]


def app_routes(config: Path) -> list[tuple[str, str]]:
    """(method, concrete path) of every route of the app the daemon builds from ``config``."""
    holder = SettingsHolder(load_settings(str(config), environ={}).settings)
    app = build_app(holder, config_dir=config.parent)
    routes: list[tuple[str, str]] = []
    for route in app.router.routes():
        info = route.resource.get_info() if route.resource is not None else {}
        template = info.get("path") or info.get("formatter")
        assert isinstance(template, str), info
        path = re.sub(r"\{(\w+)[^}]*\}", lambda m: SAMPLES[m.group(1)], template)
        routes.append((route.method, path))
    return routes


@asynccontextmanager
async def guarded_daemon(tmp_path: Path) -> AsyncIterator[tuple[Daemon, Path]]:
    fake = FakeSlack()
    await fake.start()
    try:
        port = free_port()
        data: dict[str, Any] = {
            "gateway": {
                "port": port,
                "stateDir": str(tmp_path / "state"),
                "shutdownDrainSeconds": 1,
                "auth": {"token": TOKEN},
            },
            "channels": {
                "webchat": {"enabled": True},
                "slack": {
                    "enabled": True,
                    "mode": "http",
                    "botToken": BOT_TOKEN,
                    "signingSecret": SIGNING_SECRET,
                    "apiBaseUrl": fake.api_base_url,
                },
            },
        }
        config = write_config(tmp_path / "herald.json", data)
        async with herald("run", "--config", str(config), port=port, env=clean_env()) as daemon:
            await daemon.wait_healthy()
            yield daemon, config
    finally:
        await fake.close()


async def call(
    http: aiohttp.ClientSession, daemon: Daemon, method: str, path: str, headers: dict[str, str]
) -> tuple[int, bytes]:
    async with http.request(method, daemon.url + path, headers=headers) as response:
        return response.status, await response.read()


async def test_every_route_needs_the_token_except_the_public_ones(tmp_path: Path) -> None:
    async with guarded_daemon(tmp_path) as (daemon, config), aiohttp.ClientSession() as http:
        routes = set(app_routes(config)) | set(PINNED)
        right = {"Authorization": f"Bearer {TOKEN}"}
        status, body = await call(http, daemon, "GET", "/openapi.json", right)
        if status == 200:
            for path, operations in orjson.loads(body)["paths"].items():
                concrete = re.sub(r"\{(\w+)\}", lambda m: SAMPLES[m.group(1)], path)
                routes |= {(method.upper(), concrete) for method in operations}
        assert {("GET", "/v1/runs"), ("POST", "/v1/tools/invoke"), ("GET", "/webchat/ws")} <= routes
        for method, path in sorted(routes):
            public = is_public(path)
            assert public == (
                path in ("/healthz", "/readyz", "/", "/slack/events") or path.startswith("/static/")
            ), path
            status, body = await call(http, daemon, method, path, {})
            if public:
                # /slack/events refuses too, but for want of Slack's signature.
                assert status != 401 or path == "/slack/events", (method, path, status)
                continue
            assert status == 401, (method, path, status, body)
            if method != "HEAD":
                assert orjson.loads(body)["error"]["code"] == "unauthorized"
            for headers in near_misses(TOKEN):
                status, _ = await call(http, daemon, method, path, headers)
                assert status == 401, (method, path, headers)
            for query in ("wrong", TOKEN[:-1], TOKEN + "x", ""):
                status, _ = await call(http, daemon, method, f"{path}?token={query}", {})
                assert status == 401, (method, path, query)
            status, _ = await call(http, daemon, method, path, right)
            assert status != 401, (method, path)
            # Only a WebSocket handshake may carry the token in its URL (a browser cannot
            # give it headers); in a REST URL it would end up in proxy and access logs.
            sep = "&" if "?" in path else "?"
            status, _ = await call(http, daemon, method, f"{path}{sep}token={TOKEN}", {})
            assert status == 401, (method, path)
        # The bearer token does not stand in for Slack's signature.
        status, _ = await call(http, daemon, "POST", "/slack/events", right)
        assert status == 401
        for target in TRICKS:
            response = await raw_request(daemon.port, "GET", target)
            assert response.status in (400, 401, 404), (target, response.status)
            assert b'"runs"' not in response.body
            assert b'"sessions"' not in response.body


async def test_the_web_chat_socket_needs_the_token(tmp_path: Path) -> None:
    async with guarded_daemon(tmp_path) as (daemon, _), aiohttp.ClientSession() as http:
        ws_url = daemon.url.replace("http", "ws") + "/webchat/ws"
        for suffix in ("", "?token=wrong", f"?token={TOKEN[:-1]}", f"?token={TOKEN}x"):
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await http.ws_connect(ws_url + suffix)
            assert refused.value.status == 401, suffix
        async with http.ws_connect(f"{ws_url}?token={TOKEN}") as ws:
            await ws.send_json({"type": "hello", "clientId": "auth-test"})
            frame = await ws.receive_json(timeout=10)
            assert frame["type"] == "ready"
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with http.ws_connect(ws_url, headers=headers) as ws:
            await ws.send_json({"type": "hello", "clientId": "auth-test"})
            assert (await ws.receive_json(timeout=10))["type"] == "ready"


async def test_a_reloaded_token_replaces_the_old_one_at_once(tmp_path: Path) -> None:
    async with guarded_daemon(tmp_path) as (daemon, config), aiohttp.ClientSession() as http:
        data = orjson.loads(config.read_bytes())
        data["gateway"]["auth"]["token"] = "a-new-token-after-rotation"
        write_config(config, data)
        daemon.process.send_signal(signal.SIGHUP)
        await daemon.wait_log("config reloaded")
        old = {"Authorization": f"Bearer {TOKEN}"}
        new = {"Authorization": "Bearer a-new-token-after-rotation"}
        assert (await call(http, daemon, "GET", "/v1/runs", old))[0] == 401
        assert (await call(http, daemon, "GET", "/v1/runs", new))[0] == 200


def test_an_empty_token_is_refused_on_a_public_address(tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "herald.json",
        {"gateway": {"host": "0.0.0.0", "auth": {"token": "${HERALD_TOKEN}"}}},
    )
    with pytest.raises(ConfigError, match=r"gateway\.auth\.token"):
        load_settings(str(config), environ={"HERALD_TOKEN": ""})


async def test_an_authorization_header_that_is_not_utf8_is_refused_cleanly(
    tmp_path: Path,
) -> None:
    """Undecodable bytes in the header get a 401 in the API's shape, not a 500."""
    async with guarded_daemon(tmp_path) as (daemon, _):
        for value in ("Bearer \xff\xfe\xfd", "\xc3\x28 token", f"Bearer {TOKEN}\xff"):
            response = await raw_request(
                daemon.port, "GET", "/v1/runs", headers={"Authorization": value}
            )
            assert response.status == 401, value
            assert orjson.loads(response.body)["error"]["code"] == "unauthorized"
        assert not any("Traceback" in line for line in daemon.raw)
