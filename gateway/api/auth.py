"""Bearer-token authentication for the HTTP API."""

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
    """The token of an ``Authorization: Bearer`` header; for a WebSocket handshake only, which
    a browser cannot give headers, also of ``?token=``. A token in a REST URL would end up in
    proxy and access logs, so REST routes never take one."""
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    if request.headers.get("Upgrade", "").lower() == "websocket":
        return request.query.get("token") or None
    return None


def _matches(given: str, expected: str) -> bool:
    """Constant-time comparison; a header that is not valid text never matches."""
    try:
        # aiohttp keeps undecodable header bytes as surrogates; they round-trip here.
        given_bytes = given.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return False
    return hmac.compare_digest(given_bytes, expected.encode("utf-8"))


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
        if given is None or not _matches(given, expected):
            response = json_error(401, "unauthorized", "missing or wrong bearer token")
            response.headers["WWW-Authenticate"] = 'Bearer realm="herald"'
            return response
        return await handler(request)

    return middleware
