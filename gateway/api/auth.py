"""Bearer-token authentication for the HTTP API (DESIGN §9)."""

from __future__ import annotations

import hmac
from collections.abc import Callable

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from gateway.api.errors import json_error

#: Routes that never need the token: probes, the web chat page and its assets, and Slack's
#: events endpoint (Slack signs its requests instead).
PUBLIC_PATHS = frozenset({"/healthz", "/readyz", "/", "/slack/events"})
PUBLIC_PREFIXES = ("/static/",)


def is_public(path: str) -> bool:
    return path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES)


def bearer_token(request: web.Request) -> str | None:
    """The token of an ``Authorization: Bearer`` header, or of ``?token=`` (for WebSockets and
    EventSource, which cannot set headers from a browser)."""
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value:
        return value.strip()
    return request.query.get("token") or None


def auth_middleware(get_token: Callable[[], str | None]) -> Middleware:
    """Require ``Authorization: Bearer <token>`` on every non-public route when a token is set.

    ``get_token`` is read per request, so a reloaded config takes effect at once.
    """

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        expected = get_token()
        if expected is None or is_public(request.path):
            return await handler(request)
        given = bearer_token(request)
        if given is None or not hmac.compare_digest(given.encode(), expected.encode()):
            response = json_error(401, "unauthorized", "missing or wrong bearer token")
            response.headers["WWW-Authenticate"] = 'Bearer realm="herald"'
            return response
        return await handler(request)

    return middleware
