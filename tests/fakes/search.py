"""Fakes of three search APIs on loopback, each speaking its real wire format:

- Brave Search: ``GET /res/v1/web/search?q=&count=`` with ``X-Subscription-Token``,
  answering ``{"web": {"results": [{"title", "url", "description"}]}}``;
- Tavily: ``POST /search`` with ``Authorization: Bearer <key>`` and a JSON body
  ``{"query", "max_results"}``, answering ``{"results": [{"title", "url", "content"}]}``;
- SearXNG: ``GET /search?q=&format=json`` (no key), answering
  ``{"results": [{"title", "url", "content"}]}`` — or 403 when the JSON format is off, as a
  default instance does.

A wrong key gets each vendor's 401 (Brave answers 422 for a malformed one; 401 is enough
here); :attr:`SearchFake.fail_with` scripts an error answer. Every request is recorded.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class SearchFake:
    key: str = "search-key-123456"
    #: Status and body of the next answer instead of results (None: results).
    fail_with: tuple[int, Any] | None = None
    json_enabled: bool = True
    requests: list[dict[str, Any]] = field(default_factory=list)
    base: str = ""

    #: Results point at this fake's own ``/pages/<n>`` (for a ``web_fetch`` that follows).
    local_pages: bool = False

    def hits(self, query: str, n: int) -> list[dict[str, str]]:
        root = f"{self.base}/pages" if self.local_pages else "https://example.com"
        return [
            {"title": f"{query} #{i}", "url": f"{root}/{i}", "text": f"about {i}"}
            for i in range(1, n + 1)
        ]

    async def page(self, request: web.Request) -> web.Response:
        n = request.match_info["n"]
        self.requests.append({"provider": "page", "n": n})
        return web.Response(
            text=f"<html><body><p>Page {n}: the first telegraph line opened in 1844.</p>"
            "</body></html>",
            content_type="text/html",
        )

    def _failure(self) -> web.Response | None:
        if self.fail_with is None:
            return None
        status, body = self.fail_with
        self.fail_with = None
        return web.json_response(body, status=status)

    async def brave(self, request: web.Request) -> web.Response:
        self.requests.append({"provider": "brave", "query": dict(request.query)})
        if request.headers.get("X-Subscription-Token") != self.key:
            return web.json_response(
                {"type": "ErrorResponse", "error": {"code": "SUBSCRIPTION_TOKEN_INVALID"}},
                status=401,
            )
        if (failure := self._failure()) is not None:
            return failure
        hits = self.hits(request.query["q"], int(request.query.get("count", "20")))
        results = [{"title": h["title"], "url": h["url"], "description": h["text"]} for h in hits]
        return web.json_response({"type": "search", "web": {"type": "search", "results": results}})

    async def tavily(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append({"provider": "tavily", "body": body})
        if request.headers.get("Authorization") != f"Bearer {self.key}":
            return web.json_response(
                {"detail": {"error": "Unauthorized: missing or invalid API key."}}, status=401
            )
        if (failure := self._failure()) is not None:
            return failure
        hits = self.hits(body["query"], int(body.get("max_results", 5)))
        results = [
            {"title": h["title"], "url": h["url"], "content": h["text"], "score": 0.9} for h in hits
        ]
        return web.json_response({"query": body["query"], "results": results})

    async def searxng(self, request: web.Request) -> web.Response:
        self.requests.append({"provider": "searxng", "query": dict(request.query)})
        if request.query.get("format") != "json" or not self.json_enabled:
            return web.Response(status=403, text="403 Forbidden")
        if (failure := self._failure()) is not None:
            return failure
        hits = self.hits(request.query["q"], 30)  # SearXNG has no count: the client cuts
        results = [
            {"title": h["title"], "url": h["url"], "content": h["text"], "engine": "fake"}
            for h in hits
        ]
        return web.json_response({"query": request.query["q"], "results": results})


@asynccontextmanager
async def search_server() -> AsyncIterator[SearchFake]:
    """A started fake serving all three APIs; ``base`` is its root URL."""
    fake = SearchFake()
    app = web.Application()
    app.router.add_get("/res/v1/web/search", fake.brave)
    app.router.add_post("/search", fake.tavily)
    app.router.add_get("/searx/search", fake.searxng)
    app.router.add_get("/pages/{n}", fake.page)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    fake.base = f"http://127.0.0.1:{port}"
    try:
        yield fake
    finally:
        await runner.cleanup()
