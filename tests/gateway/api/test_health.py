"""GET /healthz and GET /readyz."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from channels import ChannelState
from gateway.api.keys import DATABASE, DISK_FULL, READINESS
from gateway.api.routes import route_defs
from tests.gateway.harness import running_gateway


async def _sqlite() -> bool | None:
    return None  # no shared database to ask


def webchat_connected() -> dict[str, ChannelState]:
    return {"webchat": "connected"}


def discord_standing_by() -> dict[str, ChannelState]:
    return {"discord": "standby", "webchat": "connected"}


async def test_readiness_follows_every_enabled_channel() -> None:
    channels: dict[str, ChannelState] = {"webchat": "connected", "slack": "disconnected"}
    app = web.Application()
    app[READINESS] = lambda: dict(channels)
    app[DATABASE] = _sqlite
    app[DISK_FULL] = lambda: False
    app.add_routes(route_defs("/healthz", "/readyz"))
    client: TestClient[Any, Any]
    async with TestClient(TestServer(app)) as client:
        health = await client.get("/healthz")
        assert (health.status, await health.json()) == (200, {"status": "ok"})
        starting = await client.get("/readyz")
        assert starting.status == 503
        assert await starting.json() == {
            "status": "starting",
            "channels": {"webchat": True, "slack": False},
            "channelStates": channels,
            "storage": "ok",
        }
        channels["slack"] = "connected"
        ready = await client.get("/readyz")
        assert ready.status == 200
        assert (await ready.json())["status"] == "ready"
        channels["webchat"] = "disconnected"  # a channel that drops: unready again
        assert (await client.get("/readyz")).status == 503
        assert (await client.get("/healthz")).status == 200


async def test_readiness_on_postgresql_needs_the_database_answering() -> None:
    answering = {"now": True}

    async def database() -> bool | None:
        return answering["now"]

    full = {"now": False}
    app = web.Application()
    app[READINESS] = webchat_connected
    app[DATABASE] = database
    app[DISK_FULL] = lambda: full["now"]
    app.add_routes(route_defs("/readyz"))
    client: TestClient[Any, Any]
    async with TestClient(TestServer(app)) as client:
        ready = await client.get("/readyz")
        assert ready.status == 200
        assert await ready.json() == {
            "status": "ready",
            "channels": {"webchat": True},
            "channelStates": {"webchat": "connected"},
            "storage": "ok",
            "database": "ok",
        }
        full["now"] = True  # a full disk is reported beside the database, still ready
        both = await client.get("/readyz")
        assert both.status == 200
        assert (await both.json())["storage"] == "full"
        answering["now"] = False
        lost = await client.get("/readyz")
        assert lost.status == 503
        assert await lost.json() == {
            "status": "starting",
            "channels": {"webchat": True},
            "channelStates": {"webchat": "connected"},
            "storage": "full",
            "database": "unavailable",
        }


async def test_a_channel_standing_by_in_a_cluster_is_ready_and_named_so() -> None:
    """Another replica holds Discord's connection: this one sends only, which is its part."""
    app = web.Application()
    app[READINESS] = discord_standing_by
    app[DATABASE] = _sqlite
    app[DISK_FULL] = lambda: False
    app.add_routes(route_defs("/readyz"))
    client: TestClient[Any, Any]
    async with TestClient(TestServer(app)) as client:
        ready = await client.get("/readyz")
        assert ready.status == 200
        body = await ready.json()
        assert body["channels"] == {"discord": True, "webchat": True}
        assert body["channelStates"] == {"discord": "standby", "webchat": "connected"}


@pytest.mark.postgres
async def test_a_gateway_on_postgresql_reports_its_database(tmp_path: Path, pg_url: str) -> None:
    async with running_gateway(tmp_path, database_url=pg_url) as gw:
        app = web.Application()
        app[READINESS] = gw.app[READINESS]
        app[DATABASE] = gw.app[DATABASE]
        app[DISK_FULL] = gw.app[DISK_FULL]
        app.add_routes(route_defs("/readyz"))
        client: TestClient[Any, Any]
        async with TestClient(TestServer(app)) as client:
            ready = await client.get("/readyz")
            assert ready.status == 200
            body = await ready.json()
            assert (body["database"], body["storage"]) == ("ok", "ok")
