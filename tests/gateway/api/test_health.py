"""GET /healthz and GET /readyz (DESIGN §9)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from gateway.api.keys import DATABASE, READINESS
from gateway.api.routes import route_defs
from tests.gateway.harness import running_gateway


async def _sqlite() -> bool | None:
    return None  # no shared database to ask


async def test_readiness_follows_every_enabled_channel() -> None:
    channels = {"webchat": True, "slack": False}
    app = web.Application()
    app[READINESS] = lambda: dict(channels)
    app[DATABASE] = _sqlite
    app.add_routes(route_defs("/healthz", "/readyz"))
    client: TestClient[Any, Any]
    async with TestClient(TestServer(app)) as client:
        health = await client.get("/healthz")
        assert (health.status, await health.json()) == (200, {"status": "ok"})
        starting = await client.get("/readyz")
        assert starting.status == 503
        assert await starting.json() == {"status": "starting", "channels": channels}
        channels["slack"] = True
        ready = await client.get("/readyz")
        assert ready.status == 200
        assert (await ready.json())["status"] == "ready"
        channels["webchat"] = False  # a channel that drops makes the gateway unready again
        assert (await client.get("/readyz")).status == 503
        assert (await client.get("/healthz")).status == 200


async def test_readiness_on_postgresql_needs_the_database_answering() -> None:
    answering = {"now": True}

    async def database() -> bool | None:
        return answering["now"]

    app = web.Application()
    app[READINESS] = lambda: {"webchat": True}
    app[DATABASE] = database
    app.add_routes(route_defs("/readyz"))
    client: TestClient[Any, Any]
    async with TestClient(TestServer(app)) as client:
        ready = await client.get("/readyz")
        assert ready.status == 200
        assert await ready.json() == {
            "status": "ready",
            "channels": {"webchat": True},
            "database": "ok",
        }
        answering["now"] = False
        lost = await client.get("/readyz")
        assert lost.status == 503
        assert (await lost.json())["database"] == "unavailable"


@pytest.mark.postgres
async def test_a_gateway_on_postgresql_reports_its_database(tmp_path: Path, pg_url: str) -> None:
    async with running_gateway(tmp_path, database_url=pg_url) as gw:
        app = web.Application()
        app[READINESS] = gw.app[READINESS]
        app[DATABASE] = gw.app[DATABASE]
        app.add_routes(route_defs("/readyz"))
        client: TestClient[Any, Any]
        async with TestClient(TestServer(app)) as client:
            ready = await client.get("/readyz")
            assert ready.status == 200
            assert (await ready.json())["database"] == "ok"
