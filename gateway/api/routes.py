"""Every API route of the gateway but the health probes."""

from __future__ import annotations

from aiohttp import web

from gateway.api.runs import run_routes
from gateway.api.sessions import session_routes


def api_routes() -> list[web.RouteDef]:
    """The routes; handlers read their services from ``request.app`` (:mod:`gateway.api.keys`)."""
    return [*session_routes(), *run_routes()]
