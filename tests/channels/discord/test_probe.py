"""DiscordChannel.probe(): ``GET /users/@me`` against the fake Discord, never started."""

from __future__ import annotations

from pydantic import SecretStr

from channels.discord import DiscordChannel, DiscordConfig
from channels.discord._sdk import discord
from channels.probe import ProbeResult
from tests.fakes.discord import DEFAULT_TOKEN, FakeDiscord
from tests.fakes.network import closed_port, plain_text_server, silent_server

WRONG_TOKEN = "wrong-discord-token-that-must-not-print-42"


def channel(api_base_url: str, token: str | None = DEFAULT_TOKEN) -> DiscordChannel:
    config = DiscordConfig(
        enabled=True,
        token=SecretStr(token) if token is not None else None,
        api_base_url=api_base_url,
    )
    return DiscordChannel(config)


def assert_secret_free(result: ProbeResult, *secrets: str) -> None:
    for secret in secrets:
        assert secret not in result.detail
        assert secret not in (result.fix or "")


async def test_an_accepted_token_names_the_bot(fake_discord: FakeDiscord) -> None:
    rest_root = discord.http.Route.BASE
    probed = channel(fake_discord.api_base_url)
    result = await probed.probe()
    assert result == ProbeResult("ok", "bot token accepted (@herald)")
    assert [(r.method, r.path, r.authorized) for r in fake_discord.requests] == [
        ("GET", "/users/@me", True)
    ]
    # Probing is not starting: no gateway connection, discord.py's REST root untouched.
    assert fake_discord.connections == 0
    assert rest_root == discord.http.Route.BASE
    assert not probed.connected


async def test_a_refused_token_fails_naming_the_setting_not_the_token(
    fake_discord: FakeDiscord,
) -> None:
    result = await channel(fake_discord.api_base_url, WRONG_TOKEN).probe()
    assert result.outcome == "refused"
    assert result.detail == "the bot token was refused (HTTP 401)"
    assert result.fix is not None
    assert "channels.discord.token" in result.fix
    assert_secret_free(result, WRONG_TOKEN)


async def test_no_token_fails_before_any_request(fake_discord: FakeDiscord) -> None:
    result = await channel(fake_discord.api_base_url, token=None).probe()
    assert result == ProbeResult("missing", "no bot token", "set channels.discord.token")
    assert fake_discord.requests == []


async def test_an_unreachable_api_names_the_url_and_the_setting() -> None:
    root = f"http://127.0.0.1:{closed_port()}/api/v10"
    result = await channel(root).probe(timeout_seconds=2)
    assert result.outcome == "unreachable"
    assert result.detail.startswith(f"cannot reach {root}/users/@me: ")
    assert result.fix == "check channels.discord.apiBaseUrl; check the network, proxy and firewall"
    assert_secret_free(result, DEFAULT_TOKEN)


async def test_an_api_that_never_answers_is_unreachable_in_time() -> None:
    with silent_server() as root:
        result = await channel(f"{root}/api/v10").probe(timeout_seconds=0.2)
    assert result.outcome == "unreachable"
    assert result.detail == f"cannot reach {root}/api/v10/users/@me: no answer in time"


async def test_server_errors_and_rate_limits_are_no_verdict(fake_discord: FakeDiscord) -> None:
    body = {"message": f"upstream failed for {DEFAULT_TOKEN}", "code": 0}
    fake_discord.fail("GET", "/users/@me", 503, body)
    fake_discord.rate_limit("GET", "/users/@me", 2.0)
    probed = channel(fake_discord.api_base_url)
    broken, limited = await probed.probe(), await probed.probe()
    assert broken.outcome == "unexpected"
    assert broken.detail == "/users/@me answered HTTP 503: upstream failed for ***"
    assert limited == ProbeResult(
        "unexpected", "/users/@me answered HTTP 429: You are being rate limited."
    )


async def test_an_answer_that_is_not_discords_points_at_the_api_root() -> None:
    async with plain_text_server() as root:
        result = await channel(f"{root}/api/v10").probe()
    assert result.outcome == "misconfigured"
    assert result.detail == "/users/@me answered HTTP 200, not as the Discord API does"
    assert result.fix == "check channels.discord.apiBaseUrl"
