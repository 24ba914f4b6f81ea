"""The OpenAPI document against the app the daemon builds: every route documented, every
documented route served, and the document served at ``/openapi.json``."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
import schemathesis
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from schemathesis.core.result import Err

from gateway.api.openapi import (
    CHANNEL_PATHS,
    CHANNEL_PREFIXES,
    ERROR_CODES,
    OPENAPI_PATH,
    SLACK_EVENTS_PATH,
)
from gateway.api.routes import openapi_document
from gateway.app import build_app
from gateway.reload import SettingsHolder
from gateway.settings import HeraldSettings
from tests.gateway.harness import TEST_SCRIPT, base_config, merge

TOKEN = "test-gateway-token"
METHODS = ("get", "put", "post", "delete", "patch")


def daemon_app(
    tmp_path: Path, *, token: str | None = None, config: dict[str, Any] | None = None
) -> web.Application:
    """The gateway's app as ``gateway.daemon`` builds it, on a temp state directory with the
    scripted test provider, web chat off unless ``config`` turns it on."""
    script = tmp_path / "script.json5"
    script.write_bytes(orjson.dumps(TEST_SCRIPT))
    data = base_config(tmp_path / "state", script)
    if token is not None:
        data = merge(data, {"gateway": {"auth": {"token": token}}})
    holder = SettingsHolder(HeraldSettings.model_validate(merge(data, config or {})))
    return build_app(holder, config_dir=tmp_path)


@asynccontextmanager
async def serve(app: web.Application) -> AsyncIterator[TestClient[web.Request, web.Application]]:
    """``app`` started (resources and all) on loopback, with a client."""
    async with TestClient(TestServer(app)) as client:
        yield client


def channel_owned(path: str) -> bool:
    return path in CHANNEL_PATHS or path.startswith(CHANNEL_PREFIXES)


def served(app: web.Application) -> set[tuple[str, str]]:
    """(method, path template) of every route, HEAD (aiohttp's twin of GET) left out."""
    return {
        (route.method.lower(), route.resource.canonical)
        for route in app.router.routes()
        if route.method != "HEAD" and route.resource is not None
    }


def documented(doc: dict[str, Any]) -> set[tuple[str, str]]:
    return {
        (method, path)
        for path, item in doc["paths"].items()
        for method in item
        if method in METHODS
    }


def test_every_route_is_documented_and_every_documented_route_exists(tmp_path: Path) -> None:
    app = daemon_app(tmp_path)
    routes = served(app)
    assert not any(channel_owned(path) for _, path in routes)  # web chat is off
    assert routes == documented(openapi_document(slack_events=False))


def test_channel_routes_are_left_out_but_slack_events_is_documented(tmp_path: Path) -> None:
    slack_http = {
        "enabled": True,
        "mode": "http",
        "botToken": "xoxb-unused",
        "signingSecret": "unused",
    }
    app = daemon_app(
        tmp_path, config={"channels": {"webchat": {"enabled": True}, "slack": slack_http}}
    )
    routes = served(app)
    owned = {path for _, path in routes if channel_owned(path)}
    assert {"/", "/webchat/ws"} <= owned
    assert any(path.startswith("/static/") for path in owned)
    assert ("post", SLACK_EVENTS_PATH) in routes
    api = {(method, path) for method, path in routes if not channel_owned(path)}
    assert api == documented(openapi_document(slack_events=True))


def test_protected_operations_document_401_and_public_ones_need_no_token() -> None:
    doc = openapi_document(slack_events=True)
    public = {"/healthz", "/readyz", SLACK_EVENTS_PATH}
    # The header only: REST routes refuse a token in the URL.
    assert {name for requirement in doc["security"] for name in requirement} == {"bearerAuth"}
    for path, item in doc["paths"].items():
        for method, operation in item.items():
            if path in public:
                assert operation["security"] == [], (method, path)
                assert "401" not in operation["responses"], (method, path)
            else:
                assert "security" not in operation, (method, path)  # the default applies
                assert operation["responses"]["401"] == {
                    "$ref": "#/components/responses/Unauthorized"
                }, (method, path)


def test_every_error_code_the_api_returns_is_in_the_document() -> None:
    api_dir = Path(__file__).parents[3] / "gateway" / "api"
    used: set[str] = set()
    for source in api_dir.glob("*.py"):
        used |= set(re.findall(r'json_error\(\s*\d{3},\s*"([a-z_]+)"', source.read_text()))
    assert used  # the pattern still finds the calls
    assert used <= set(ERROR_CODES), used - set(ERROR_CODES)
    schema = openapi_document()["components"]["schemas"]["Error"]
    assert schema["properties"]["error"]["properties"]["code"]["enum"] == list(ERROR_CODES)


async def test_the_document_is_served_with_the_token(tmp_path: Path) -> None:
    async with serve(daemon_app(tmp_path, token=TOKEN)) as client:
        response = await client.get(OPENAPI_PATH)
        assert response.status == 401
        error = await response.json()
        assert error["error"]["code"] == "unauthorized"
        response = await client.get(OPENAPI_PATH, headers={"Authorization": f"Bearer {TOKEN}"})
        assert response.status == 200
        assert response.content_type == "application/json"
        assert await response.json() == openapi_document(slack_events=False)


@pytest.mark.parametrize("slack", [False, True])
def test_the_document_is_openapi_3_1(slack: bool) -> None:
    doc = openapi_document(slack_events=slack)
    assert doc["openapi"] == "3.1.0"
    schema = schemathesis.openapi.from_dict(doc)
    schema.validate()  # against the OpenAPI 3.1 metaschema
    operations: set[tuple[str, str]] = set()
    for result in schema.get_all_operations():
        if isinstance(result, Err):
            raise AssertionError(f"schemathesis cannot read an operation: {result.err()}")
        operations.add((result.ok().method, result.ok().path))
    assert operations == documented(doc)
