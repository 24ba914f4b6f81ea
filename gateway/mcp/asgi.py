"""One aiohttp request handed to the SDK's ASGI transport, its answer streamed back.

Herald's MCP endpoint lives on the gateway's own aiohttp port, while the SDK's Streamable
HTTP transport is an ASGI application: this is the few lines of ASGI an aiohttp handler needs
(one ``http.request`` with the whole body, ``http.disconnect`` once the answer is complete).
"""

from __future__ import annotations

import asyncio
from collections.abc import MutableMapping
from typing import Any

from aiohttp import web
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

#: The SDK's session manager, while the endpoint runs.
MANAGER = web.AppKey("mcp_serve", StreamableHTTPSessionManager)


async def asgi_bridge(request: web.Request) -> web.StreamResponse:
    """Hand one aiohttp request to the SDK's ASGI transport and stream its answer back."""
    manager = request.app.get(MANAGER)
    if manager is None:
        raise web.HTTPServiceUnavailable(text="the MCP endpoint is starting")
    body = await request.read()
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": f"{request.version.major}.{request.version.minor}",
        "method": request.method,
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": request.raw_path.split("?")[0].encode(),
        "query_string": request.query_string.encode(),
        "root_path": "",
        "headers": [(k.lower(), v) for k, v in request.raw_headers],
        "client": _peer(request),
        "server": (request.host.rsplit(":", 1)[0], request.url.port or 0),
    }
    sent_body = False
    finished = asyncio.Event()
    response: web.StreamResponse | None = None

    async def receive() -> MutableMapping[str, Any]:
        nonlocal sent_body
        if not sent_body:
            sent_body = True
            return {"type": "http.request", "body": body, "more_body": False}
        await finished.wait()  # the client is gone only once the answer is complete
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        nonlocal response
        if message["type"] == "http.response.start":
            response = web.StreamResponse(status=message["status"])
            for name, value in message.get("headers", []):
                response.headers.add(name.decode("latin-1"), value.decode("latin-1"))
            await response.prepare(request)
        elif message["type"] == "http.response.body" and response is not None:
            await response.write(message.get("body", b""))
            if not message.get("more_body", False):
                await response.write_eof()

    try:
        await manager.handle_request(scope, receive, send)
    finally:
        finished.set()
    if response is None:
        return web.Response(status=500, text="the MCP transport gave no answer")
    return response


def _peer(request: web.Request) -> tuple[str, int] | None:
    peer = request.transport.get_extra_info("peername") if request.transport else None
    if isinstance(peer, tuple) and len(peer) >= 2:
        return (str(peer[0]), int(peer[1]))
    return None
