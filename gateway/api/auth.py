"""Bearer-token authentication for the HTTP API: the middleware that guards every route but
the public ones (:mod:`gateway.api.paths` says which), and :func:`token_required`, the guard
a route puts on itself so that it is never public, whatever its path."""

from __future__ import annotations

import hmac
from collections.abc import Callable

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from gateway.api.errors import json_error
from gateway.api.paths import is_public
from gateway.settings import HeraldSettings

#: Reads the token in force (None: no token is set, every route is open).
TokenGetter = Callable[[], str | None]


def configured_token(settings: HeraldSettings) -> str | None:
    """``gateway.auth.token``, or None when unset. A blank token is no token (it could never
    be sent: header values are stripped)."""
    token = settings.gateway.auth.token
    return (token.get_secret_value().strip() or None) if token is not None else None


def bearer_token(request: web.Request) -> str | None:
    """The token of an ``Authorization: Bearer`` header; for a WebSocket handshake only, which
    a browser cannot give headers, also of ``?token=``. A token in a REST URL would end up in
    proxy and access logs, so REST routes never take one."""
    if (token := header_token(request)) is not None:
        return token
    if request.headers.get("Upgrade", "").lower() == "websocket":
        return request.query.get("token") or None
    return None


def header_token(request: web.Request) -> str | None:
    """The token of an ``Authorization: Bearer`` header, or None."""
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    return (value.strip() or None) if scheme.lower() == "bearer" else None


def _matches(given: str, expected: str) -> bool:
    """Constant-time comparison; a header that is not valid text never matches."""
    try:
        # aiohttp keeps undecodable header bytes as surrogates; they round-trip here.
        given_bytes = given.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return False
    return hmac.compare_digest(given_bytes, expected.encode("utf-8"))


def _unauthorized() -> web.Response:
    response = json_error(401, "unauthorized", "missing or wrong bearer token")
    response.headers["WWW-Authenticate"] = 'Bearer realm="herald"'
    return response


def _refused(expected: str | None, given: str | None) -> bool:
    return expected is not None and (given is None or not _matches(given, expected))


def auth_middleware(get_token: TokenGetter) -> Middleware:
    """Require ``Authorization: Bearer <token>`` on every non-public route when a token is set.

    ``get_token`` is read per request, so a reloaded config takes effect at once.
    """

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        expected = get_token()
        if expected is None or is_public(request.path):
            return await handler(request)
        if _refused(expected, bearer_token(request)):
            return _unauthorized()
        return await handler(request)

    return middleware


def token_required(get_token: TokenGetter, handler: Handler) -> Handler:
    """``handler`` behind the token on its own: refused (401) without ``Authorization:
    Bearer <token>`` whatever path it is served at, so no list of public paths can open it.
    The token comes only from the header: this is no WebSocket route."""

    async def guarded(request: web.Request) -> web.StreamResponse:
        if _refused(get_token(), header_token(request)):
            return _unauthorized()
        return await handler(request)

    return guarded
