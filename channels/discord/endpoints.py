"""Pointing discord.py at a Discord-compatible server (``apiBaseUrl``, ``gatewayUrl``).

discord.py 2.x keeps both URLs as class attributes, so they are process-wide:
``discord.http.Route.BASE`` is read each time a REST route is built, and
``DiscordWebSocket.DEFAULT_GATEWAY`` when the gateway is first dialled and after an
invalidated session (resumes use the ``resume_gateway_url`` READY gave). A plain ``Client``
never asks ``GET /gateway``. So every Discord client in the process talks to the same
servers: two channels asking for different servers at once is refused, not silently mixed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Final

import yarl

from channels.discord._sdk import discord
from channels.errors import ChannelStartError

Route = discord.http.Route
DiscordWebSocket = discord.gateway.DiscordWebSocket

#: discord.py's own defaults, named for messages and for requests made without discord.py.
DEFAULT_API_BASE_URL: Final = "https://discord.com/api/v10"
DEFAULT_GATEWAY_URL: Final = "wss://gateway.discord.gg/"

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Endpoints:
    """The REST root and gateway URL a client uses; ``None`` keeps discord.py's default."""

    api_base_url: str | None = None
    gateway_url: str | None = None


@dataclass(slots=True)
class _Claim:
    endpoints: Endpoints
    holders: int
    saved_base: str
    saved_gateway: yarl.URL


_claim: _Claim | None = None


def claim_endpoints(endpoints: Endpoints) -> None:
    """Point discord.py's process-wide URLs at ``endpoints`` until :func:`release_endpoints`.

    Claims nest: channels asking for the same endpoints share them, and the defaults that
    were in place come back when the last holder releases. Raises
    :class:`~channels.errors.ChannelStartError` if another holder uses different endpoints.
    """
    global _claim
    if _claim is not None:
        if _claim.endpoints != endpoints:
            raise ChannelStartError(
                "another Discord channel in this process already points discord.py at "
                f"{_describe(_claim.endpoints)}; discord.py keeps these URLs process-wide, "
                f"so {_describe(endpoints)} cannot be used at the same time"
            )
        _claim.holders += 1
        return
    _claim = _Claim(endpoints, 1, Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY)
    if endpoints.api_base_url is not None:
        Route.BASE = endpoints.api_base_url.rstrip("/")
    if endpoints.gateway_url is not None:
        DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(endpoints.gateway_url)
    if endpoints != Endpoints():
        log.info("discord.py pointed at %s", _describe(endpoints))


def release_endpoints() -> None:
    """Give back one claim; the last one restores the URLs that were there before."""
    global _claim
    if _claim is None:
        return
    _claim.holders -= 1
    if _claim.holders > 0:
        return
    Route.BASE = _claim.saved_base
    DiscordWebSocket.DEFAULT_GATEWAY = _claim.saved_gateway
    _claim = None


def _describe(endpoints: Endpoints) -> str:
    api = endpoints.api_base_url or "the default REST API"
    gateway = endpoints.gateway_url or "the default gateway"
    return f"{api} and {gateway}"
