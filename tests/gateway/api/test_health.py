"""GET /healthz and GET /readyz (DESIGN §9)."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from gateway.api.health import health_routes


async def test_readiness_follows_every_enabled_channel() -> None:
    channels = {"webchat": True, "slack": False}
    app = web.Application()
    app.add_routes(health_routes(lambda: dict(channels)))
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
