"""Loopback endpoints that are not any vendor's API: a closed port, a server that never
answers, and one that answers every request with a plain-text page (a captive portal, a
proxy's error page). For the failure paths of probes and clients."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

from aiohttp import web

PLAIN_TEXT = "Welcome! Please sign in to use this network."


def closed_port() -> int:
    """A loopback port nothing listens on (connecting is refused at once)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@contextmanager
def silent_server() -> Iterator[str]:
    """``http://127.0.0.1:<port>``: connections are accepted (by the kernel's backlog) and
    requests sent, but no answer ever comes."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


@asynccontextmanager
async def plain_text_server(status: int = 200) -> AsyncIterator[str]:
    """``http://127.0.0.1:<port>``: every request gets ``status`` and :data:`PLAIN_TEXT`."""

    async def answer(request: web.Request) -> web.Response:
        return web.Response(status=status, text=PLAIN_TEXT)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()
