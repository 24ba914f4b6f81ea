"""The operator's endpoints: ``GET /healthz``, ``GET /readyz`` and ``GET /metrics``.

Liveness answers while the process serves; readiness needs every enabled channel
connected — or, in a cluster, standing by while another replica holds its one connection
(Discord's gateway) — and, on PostgreSQL, the database answering; it also reports whether
the disk is full (without turning unready: the gateway still answers, with an apology for a
chat it cannot record). Each reads what it needs from the app (:mod:`gateway.api.keys`).
"""

from __future__ import annotations

from aiohttp import web

from gateway.api.keys import DATABASE, DISK_FULL, MCP_STATES, READINESS, SCRAPE
from gateway.api.routing import reply
from gateway.metrics import CONTENT_TYPE
from gateway.shapes import Health, Readiness


async def healthz(_: web.Request, __: None) -> web.Response:
    return reply(Health(status="ok"))


async def readyz(request: web.Request, _: None) -> web.Response:
    states = request.app[READINESS]()
    channels = {name: state != "disconnected" for name, state in states.items()}
    reachable = await request.app[DATABASE]()
    ready = all(channels.values()) and reachable is not False
    status = "ready" if ready else "starting"
    storage = "full" if request.app[DISK_FULL]() else "ok"
    probe = request.app.get(MCP_STATES)
    # MCP servers are reported, never waited for: a chat works without its tools.
    mcp = (probe() or None) if probe is not None else None
    body = Readiness(status=status, channels=channels, channel_states=states, storage=storage)
    # Set only where they say something (unset keys stay out of the answer): SQLite is a
    # local file, nothing to report; without MCP servers there is nothing either.
    if reachable is not None:
        body = body.model_copy(update={"database": "ok" if reachable else "unavailable"})
    if mcp is not None:
        body = body.model_copy(update={"mcp": mcp})
    return reply(body, status=200 if ready else 503)


async def metrics(request: web.Request, _: None) -> web.Response:
    host = request.app[SCRAPE]()
    body = await host.metrics.render(host)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})
