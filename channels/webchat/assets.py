"""The web chat page and its files, served from the package's ``static`` folder."""

from __future__ import annotations

from importlib import resources
from typing import Final

from aiohttp import web
from aiohttp.typedefs import Handler

#: The page itself (served at ``/``).
PAGE: Final = "index.html"
#: Every file, with its content type.
ASSETS: Final = {
    PAGE: "text/html",
    "app.js": "text/javascript",
    "dom.js": "text/javascript",
    "runs.js": "text/javascript",
    "jobs.js": "text/javascript",
    "sessions.js": "text/javascript",
    "style.css": "text/css",
}
#: The page loads only its own files; 'self' in connect-src covers the same-origin socket.
PAGE_HEADERS: Final = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def load_assets() -> dict[str, bytes]:
    """Every file's bytes, by name (read once, at start)."""
    folder = resources.files("channels.webchat").joinpath("static")
    return {name: folder.joinpath(name).read_bytes() for name in ASSETS}


def asset_handler(assets: dict[str, bytes], name: str) -> Handler:
    """The route handler of file ``name``."""
    body = assets[name]
    content_type = ASSETS[name]

    async def handler(request: web.Request) -> web.Response:
        return web.Response(
            body=body, content_type=content_type, charset="utf-8", headers=PAGE_HEADERS
        )

    return handler
