"""web_fetch reaches public addresses only: after DNS, for IP literals, and on every redirect."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Mapping

import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult
from pytest_aiohttp import AiohttpServer

from gateway.llm import ToolCall
from gateway.settings import HeraldSettings, WebFetchConfig
from gateway.tools import ToolOutput, ToolRegistry, default_registry
from gateway.tools.netguard import (
    GuardedResolver,
    NetworkGuard,
    blocked_reason,
)
from gateway.tools.web import WebFetchTool
from tests.gateway.tools.conftest import MakeCtx


def resolve_result(host: str, address: str, port: int) -> ResolveResult:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    return ResolveResult(
        hostname=host, host=address, port=port, family=family, proto=0, flags=socket.AI_NUMERICHOST
    )


class MapResolver(AbstractResolver):
    """A resolver that answers from a table (what a hostile or internal DNS would say)."""

    def __init__(self, table: Mapping[str, list[str]]) -> None:
        self.table = table
        self.asked: list[str] = []

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.asked.append(host)
        if host not in self.table:
            raise OSError(f"unknown host {host}")
        return [resolve_result(host, address, port) for address in self.table[host]]

    async def close(self) -> None:
        return None


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("127.8.9.10", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("169.254.169.254", "link-local"),  # cloud metadata
        ("100.64.0.1", "carrier-grade NAT"),
        ("224.0.0.1", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("::1", "loopback"),
        ("fe80::1", "link-local"),
        ("fc00::1", "private"),
        ("ff02::1", "multicast"),
        ("::ffff:127.0.0.1", "loopback"),  # IPv4-mapped IPv6
        ("::ffff:169.254.169.254", "link-local"),
        ("8.8.8.8", None),
        ("93.184.216.34", None),
        ("2606:4700:4700::1111", None),
    ],
)
def test_every_non_public_range_is_refused(address: str, reason: str | None) -> None:
    assert blocked_reason(ipaddress.ip_address(address)) == reason


@pytest.fixture
async def server(aiohttp_server: AiohttpServer) -> tuple[str, list[str]]:
    """A loopback server; returns its base URL and the paths it was asked for."""
    hits: list[str] = []

    async def text(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.Response(text="secret internal page")

    async def hop(request: web.Request) -> web.Response:
        hits.append(request.path)
        raise web.HTTPFound(request.query["to"])

    app = web.Application()
    app.router.add_get("/text", text)
    app.router.add_get("/hop", hop)
    started = await aiohttp_server(app, host="127.0.0.1")
    return str(started.make_url("")).rstrip("/"), hits


async def fetch(tool: WebFetchTool, make_ctx: MakeCtx, url: str) -> ToolOutput:
    registry = ToolRegistry()
    registry.register(tool)
    allowed = frozenset({tool.name})
    return await registry.invoke(ToolCall("c", "web_fetch", {"url": url}), make_ctx(), allowed)


async def test_a_loopback_literal_is_refused_before_any_request(
    server: tuple[str, list[str]], make_ctx: MakeCtx
) -> None:
    base, hits = server
    out = await fetch(WebFetchTool(WebFetchConfig()), make_ctx, f"{base}/text")
    assert out.is_error
    assert "127.0.0.1 (loopback)" in out.content
    assert "allowPrivateNetworks" in out.content
    assert hits == []


async def test_a_name_that_resolves_to_a_private_address_is_refused(
    server: tuple[str, list[str]], make_ctx: MakeCtx
) -> None:
    base, hits = server
    port = base.rsplit(":", 1)[1]
    resolver = MapResolver({"intranet.example": ["127.0.0.1"]})
    tool = WebFetchTool(WebFetchConfig(), resolver=resolver)
    out = await fetch(tool, make_ctx, f"http://intranet.example:{port}/text")
    assert out.is_error
    assert "intranet.example is 127.0.0.1 (loopback)" in out.content
    assert resolver.asked == ["intranet.example"]
    assert hits == []


async def test_only_public_addresses_of_a_name_are_kept() -> None:
    resolver = GuardedResolver(
        NetworkGuard(allow_private=False),
        MapResolver({"mixed.example": ["10.0.0.7", "93.184.216.34", "169.254.169.254"]}),
    )
    results = await resolver.resolve("mixed.example", 80)
    assert [r["host"] for r in results] == ["93.184.216.34"]


async def test_every_redirect_hop_is_checked_again(
    server: tuple[str, list[str]], make_ctx: MakeCtx
) -> None:
    """The first hop is allowed; a redirect to a blocked literal or to a name that resolves
    to a blocked address is refused (the guard blocks 127.0.0.2 here, the server is .1)."""
    base, hits = server
    port = base.rsplit(":", 1)[1]
    guard = NetworkGuard(allow_private=False, blocked=[ipaddress.ip_network("127.0.0.2/32")])
    resolver = MapResolver({"rebound.example": ["127.0.0.2"], "ok.example": ["127.0.0.1"]})
    tool = WebFetchTool(WebFetchConfig(), guard=guard, resolver=resolver)
    literal = await fetch(tool, make_ctx, f"{base}/hop?to=http://127.0.0.2:{port}/text")
    assert literal.is_error
    assert "127.0.0.2 (blocked)" in literal.content
    named = await fetch(
        tool, make_ctx, f"http://ok.example:{port}/hop?to=http://rebound.example:{port}/text"
    )
    assert named.is_error
    assert "rebound.example is 127.0.0.2 (blocked)" in named.content
    assert hits == ["/hop", "/hop"]  # never /text: no hop reached the blocked address
    allowed = await fetch(tool, make_ctx, f"{base}/hop?to={base}/text")
    assert not allowed.is_error
    assert allowed.content == "secret internal page"


async def test_allow_private_networks_opts_out(
    server: tuple[str, list[str]], make_ctx: MakeCtx
) -> None:
    base, hits = server
    settings = HeraldSettings.model_validate(
        {"agent": {"tools": {"webFetch": {"allowPrivateNetworks": True}}}}
    )
    tool = default_registry(settings).get("web_fetch")
    assert isinstance(tool, WebFetchTool)
    out = await fetch(tool, make_ctx, f"{base}/text")
    assert not out.is_error
    assert hits == ["/text"]
    default = default_registry(HeraldSettings()).get("web_fetch")
    assert isinstance(default, WebFetchTool)
    assert default.guard.allow_private is False
