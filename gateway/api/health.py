"""``GET /healthz`` and ``GET /readyz`` (DESIGN §9)."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

ReadinessProbe = Callable[[], dict[str, bool]]


def health_routes(readiness: ReadinessProbe) -> list[web.RouteDef]:
    """Liveness answers while the process serves; readiness needs every enabled channel up.

    ``readiness`` returns each enabled channel's connection state by name.
    """

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(_: web.Request) -> web.Response:
        channels = readiness()
        ready = all(channels.values())
        return web.json_response(
            {"status": "ready" if ready else "starting", "channels": channels},
            status=200 if ready else 503,
        )

    return [web.get("/healthz", healthz), web.get("/readyz", readyz)]
