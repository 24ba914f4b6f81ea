"""discord.py's process-wide URLs: claimed, shared, refused when they differ, restored."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import yarl

from channels.discord._sdk import discord
from channels.discord.endpoints import (
    DEFAULT_API_BASE_URL,
    DEFAULT_GATEWAY_URL,
    Endpoints,
    claim_endpoints,
    release_endpoints,
)
from channels.errors import ChannelStartError

FAKE = Endpoints("http://127.0.0.1:1/api/v10/", "ws://127.0.0.1:1/gateway")


def current() -> tuple[str, object]:
    """discord.py's REST root and default gateway as they are now."""
    return discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY


@pytest.fixture
def defaults() -> Iterator[tuple[str, object]]:
    before = current()
    yield before
    assert current() == before


def test_a_claim_points_discord_py_elsewhere_and_release_restores(
    defaults: tuple[str, object],
) -> None:
    claim_endpoints(FAKE)
    try:
        assert current()[0] == "http://127.0.0.1:1/api/v10"
        route = discord.http.Route("GET", "/users/@me")
        assert route.url == "http://127.0.0.1:1/api/v10/users/@me"
        assert str(discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY) == FAKE.gateway_url
    finally:
        release_endpoints()


def test_equal_claims_nest_and_the_last_release_restores(defaults: tuple[str, object]) -> None:
    claim_endpoints(FAKE)
    claim_endpoints(FAKE)
    release_endpoints()
    assert current()[0] == "http://127.0.0.1:1/api/v10"
    release_endpoints()
    assert current() == defaults


def test_a_different_claim_at_the_same_time_is_refused(defaults: tuple[str, object]) -> None:
    claim_endpoints(FAKE)
    try:
        with pytest.raises(ChannelStartError, match="process-wide"):
            claim_endpoints(Endpoints())
        assert current()[0] == "http://127.0.0.1:1/api/v10"
    finally:
        release_endpoints()


def test_default_endpoints_leave_discord_py_alone(defaults: tuple[str, object]) -> None:
    claim_endpoints(Endpoints())
    try:
        assert current() == defaults
    finally:
        release_endpoints()


def test_the_named_defaults_are_discord_pys_own(defaults: tuple[str, object]) -> None:
    assert defaults == (DEFAULT_API_BASE_URL, yarl.URL(DEFAULT_GATEWAY_URL))
