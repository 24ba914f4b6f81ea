"""web_fetch against a loopback aiohttp server: text, limits, errors."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web
from pytest_aiohttp import AiohttpServer

from gateway.llm import ToolCall
from gateway.settings import WebFetchConfig
from gateway.tools import ToolOutput, ToolRegistry
from gateway.tools.netguard import NetworkGuard
from gateway.tools.web import WebFetchParams, WebFetchTool
from tests.gateway.tools.conftest import MakeCtx

BIG = b"0123456789" * 10_000  # 100 kB


async def text(request: web.Request) -> web.Response:
    return web.Response(text="héllo wörld", content_type="text/plain")


async def latin1(request: web.Request) -> web.Response:
    return web.Response(body="café".encode("latin-1"), content_type="text/plain", charset="latin-1")


async def json_body(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


async def big(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
    await resp.prepare(request)
    for i in range(0, len(BIG), 8192):
        await resp.write(BIG[i : i + 8192])
    await resp.write_eof()
    return resp


async def gzip_big(request: web.Request) -> web.Response:
    resp = web.Response(body=b"a" * 1_000_000, content_type="text/plain")
    resp.enable_compression(web.ContentCoding.gzip)
    return resp


async def missing(request: web.Request) -> web.Response:
    return web.Response(status=404, text="no such page")


async def binary(request: web.Request) -> web.Response:
    return web.Response(body=b"\x89PNG\r\n\x1a\n\x00\x00", content_type="image/png")


async def slow(request: web.Request) -> web.Response:
    await asyncio.sleep(30)
    return web.Response(text="too late")


async def redirect(request: web.Request) -> web.Response:
    raise web.HTTPFound("/text")


async def loop_redirect(request: web.Request) -> web.Response:
    raise web.HTTPFound("/loop")


Fetch = Callable[..., Awaitable[ToolOutput]]


@pytest.fixture
async def base_url(aiohttp_server: AiohttpServer) -> str:
    app = web.Application()
    for path, handler in [
        ("/text", text),
        ("/latin1", latin1),
        ("/json", json_body),
        ("/big", big),
        ("/gzip", gzip_big),
        ("/missing", missing),
        ("/binary", binary),
        ("/slow", slow),
        ("/redirect", redirect),
        ("/loop", loop_redirect),
    ]:
        app.router.add_get(path, handler)
    server = await aiohttp_server(app)
    return str(server.make_url("")).rstrip("/")


@pytest.fixture
def fetch(make_ctx: MakeCtx) -> Fetch:
    """Call web_fetch through a registry, with the given config limits."""

    async def run(*, config: WebFetchConfig | None = None, **args: Any) -> ToolOutput:
        registry = ToolRegistry()
        # The test server is on loopback: these tests opt out of the public-only guard
        # (tests/gateway/tools/test_web_guard.py tests the guard itself).
        guard = NetworkGuard(allow_private=True)
        registry.register(WebFetchTool(config or WebFetchConfig(timeout_seconds=5), guard=guard))
        call = ToolCall("c", "web_fetch", args)
        return await registry.invoke(call, make_ctx(), registry.names())

    return run


async def test_fetches_text(base_url: str, fetch: Fetch) -> None:
    out = await fetch(url=f"{base_url}/text")
    assert not out.is_error
    assert out.content == "héllo wörld"
    assert out.data is not None
    assert out.data["status"] == 200
    assert out.data["contentType"] == "text/plain"
    assert out.data["truncated"] is False


async def test_decodes_the_declared_charset(base_url: str, fetch: Fetch) -> None:
    assert (await fetch(url=f"{base_url}/latin1")).content == "café"


async def test_json_is_text(base_url: str, fetch: Fetch) -> None:
    assert (await fetch(url=f"{base_url}/json")).content == '{"ok": true}'


async def test_follows_redirects(base_url: str, fetch: Fetch) -> None:
    out = await fetch(url=f"{base_url}/redirect")
    assert out.content == "héllo wörld"
    assert out.data is not None
    assert out.data["url"].endswith("/text")


async def test_redirect_loop_is_an_error(base_url: str, fetch: Fetch) -> None:
    out = await fetch(url=f"{base_url}/loop")
    assert out.is_error
    assert "redirects" in out.content


async def test_max_bytes_truncates(base_url: str, fetch: Fetch) -> None:
    out = await fetch(url=f"{base_url}/big", maxBytes=1000)
    assert out.data is not None
    assert out.data["content"] == BIG[:1000].decode()
    assert out.data["truncated"] is True
    assert "[truncated: only the first 1000 bytes were read]" in out.content


async def test_config_caps_max_bytes(base_url: str, fetch: Fetch) -> None:
    config = WebFetchConfig(max_bytes=500, timeout_seconds=5)
    out = await fetch(url=f"{base_url}/big", maxBytes=50_000, config=config)
    assert out.data is not None
    assert out.data["bytes"] == 500
    out = await fetch(url=f"{base_url}/gzip", config=config)
    assert out.data is not None
    assert out.data["bytes"] == 500  # the cap counts decompressed bytes


async def test_whole_body_within_the_cap_is_not_truncated(base_url: str, fetch: Fetch) -> None:
    out = await fetch(url=f"{base_url}/big", maxBytes=len(BIG))
    assert out.data is not None
    assert out.data["truncated"] is False
    assert out.data["bytes"] == len(BIG)


async def test_non_2xx_is_an_error_with_the_body(base_url: str, fetch: Fetch) -> None:
    out = await fetch(url=f"{base_url}/missing")
    assert out.is_error
    assert out.content.startswith("HTTP 404 Not Found from ")
    assert "no such page" in out.content


async def test_binary_is_refused(base_url: str, fetch: Fetch) -> None:
    out = await fetch(url=f"{base_url}/binary")
    assert out.is_error
    assert "binary content (image/png)" in out.content


async def test_timeout(base_url: str, fetch: Fetch) -> None:
    out = await fetch(url=f"{base_url}/slow", config=WebFetchConfig(timeout_seconds=0.2))
    assert out.is_error
    assert "no complete response within 0.2s" in out.content


@pytest.mark.parametrize(
    "url", ["file:///etc/passwd", "ftp://example.com/x", "javascript:alert(1)", "example.com"]
)
async def test_only_http_and_https(fetch: Fetch, url: str) -> None:
    out = await fetch(url=url)
    assert out.is_error
    assert "only http and https" in out.content


async def test_url_without_host(fetch: Fetch) -> None:
    out = await fetch(url="http:///path")
    assert out.is_error
    assert "has no host" in out.content


async def test_connection_refused(fetch: Fetch) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    out = await fetch(url=f"http://127.0.0.1:{port}/")
    assert out.is_error
    assert "cannot connect to 127.0.0.1" in out.content


async def test_dns_failure(fetch: Fetch) -> None:
    out = await fetch(url="http://herald-test.invalid/", config=WebFetchConfig(timeout_seconds=3))
    assert out.is_error
    assert "herald-test.invalid" in out.content


def test_max_bytes_must_be_positive() -> None:
    with pytest.raises(ValueError, match="maxBytes"):
        WebFetchParams.model_validate({"url": "http://x", "maxBytes": 0})
