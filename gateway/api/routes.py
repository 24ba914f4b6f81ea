"""Every API route of the gateway (DESIGN §9) but the health probes."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from gateway.api.runs import run_routes
from gateway.api.sessions import session_routes
from gateway.services import Services


def api_routes(get: Callable[[], Services]) -> list[web.RouteDef]:
    """The routes; ``get`` returns the services, which exist once the app has started."""
    return [*session_routes(lambda: get().store), *run_routes(get)]
