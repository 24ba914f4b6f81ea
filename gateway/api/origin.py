"""Browser-side defences: the gateway answers only its own pages and its own host name.

Without a token (the loopback default) a web page the operator happens to visit could
otherwise drive the gateway: post to the API (a ``text/plain`` POST needs no CORS
preflight), open the web chat's WebSocket (browsers do not apply CORS to WebSockets), or
re-resolve its own host name to 127.0.0.1 (DNS rebinding) and read answers as
same-origin. So:

- a request whose ``Origin`` is not the gateway's own is refused (403 ``forbidden_origin``);
  requests without ``Origin`` (curl, the CLI, Slack's servers) are not browser pages;
- without a token, a ``Host`` other than the gateway's own address is refused
  (421 ``host_not_allowed``); with a token, the token is the defence and any name may be used
  (a reverse proxy's, say). Slack's signed events and the health probes take any name.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlsplit

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from gateway.api.errors import json_error

LOCAL_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
#: Paths any host name may reach: Slack's servers (signed requests, often through a tunnel
#: whose name is not ours) and the probes, which tell nothing.
ANY_HOST_PATHS = frozenset({"/slack/events", "/healthz", "/readyz"})


def _hostname(host: str) -> str:
    """``host[:port]`` or ``[v6]:port`` → the bare, lowercased host name."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def origin_middleware(listen_host: Callable[[], str], token_set: Callable[[], bool]) -> Middleware:
    """Refuse foreign origins always, and foreign host names when no token is set."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        origin = request.headers.get("Origin")
        if origin is not None:
            parts = urlsplit(origin)
            if (
                parts.scheme not in ("http", "https")
                or parts.netloc.lower() != request.host.lower()
            ):
                return json_error(403, "forbidden_origin", "requests from other sites are refused")
        if not token_set() and request.path not in ANY_HOST_PATHS:
            allowed = LOCAL_NAMES | {_hostname(listen_host())}
            if _hostname(request.host) not in allowed:
                return json_error(
                    421, "host_not_allowed", "this gateway answers only to its own address"
                )
        return await handler(request)

    return middleware
