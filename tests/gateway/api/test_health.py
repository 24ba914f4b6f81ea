"""GET /healthz and GET /readyz."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from gateway.api.keys import DISK_FULL, READINESS
from gateway.api.routes import route_defs


async def test_readiness_follows_every_enabled_channel() -> None:
    channels = {"webchat": True, "slack": False}
    app = web.Application()
    app[READINESS] = lambda: dict(channels)
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
            "channels": channels,
            "storage": "ok",
        }
        channels["slack"] = True
        ready = await client.get("/readyz")
        assert ready.status == 200
        assert (await ready.json())["status"] == "ready"
        channels["webchat"] = False  # a channel that drops makes the gateway unready again
        assert (await client.get("/readyz")).status == 503
        assert (await client.get("/healthz")).status == 200
