"""SlackChannel.probe(): ``auth.test`` against the fake Slack, without starting the channel."""

from __future__ import annotations

from typing import Any

from channels.probe import ProbeResult
from channels.slack import SlackChannel
from tests.channels.slack.conftest import slack_config
from tests.fakes.network import closed_port, plain_text_server, silent_server
from tests.fakes.slack import BOT_TOKEN, Failure, FakeSlack

WRONG_TOKEN = "xoxb-wrong-token-that-must-not-print-42"


async def probe(fake: FakeSlack, **config: Any) -> ProbeResult:
    return await SlackChannel(slack_config(fake, **config)).probe(timeout_seconds=2)


def assert_secret_free(result: ProbeResult, *secrets: str) -> None:
    for secret in secrets:
        assert secret not in result.detail
        assert secret not in (result.fix or "")


async def test_an_accepted_token_names_the_bot_and_the_team(fake_slack: FakeSlack) -> None:
    channel = SlackChannel(slack_config(fake_slack))
    result = await channel.probe()
    assert result == ProbeResult("ok", "bot token accepted (@herald in Fake)")
    [call] = fake_slack.calls
    assert (call.method, call.token) == ("auth.test", BOT_TOKEN)
    # Probing is not starting: no Socket Mode connection, nothing left running.
    assert fake_slack.connections == 0
    assert not channel.connected


async def test_a_refused_token_fails_naming_the_setting_not_the_token(
    fake_slack: FakeSlack,
) -> None:
    result = await probe(fake_slack, botToken=WRONG_TOKEN)
    assert result.outcome == "refused"
    assert result.detail == "the bot token was refused (invalid_auth)"
    assert result.fix is not None
    assert "channels.slack.botToken" in result.fix
    assert_secret_free(result, WRONG_TOKEN)


async def test_an_error_code_echoing_the_token_is_masked(fake_slack: FakeSlack) -> None:
    fake_slack.fault = lambda method, args: Failure(error=f"token_revoked:{BOT_TOKEN}")
    result = await probe(fake_slack)
    assert result.outcome == "refused"
    assert result.detail == "the bot token was refused (token_revoked:***)"
    assert_secret_free(result, BOT_TOKEN)


async def test_no_token_fails_before_any_call(fake_slack: FakeSlack) -> None:
    result = await probe(fake_slack, botToken=None)
    assert result == ProbeResult("missing", "no bot token", "set channels.slack.botToken")
    assert fake_slack.calls == []


async def test_an_api_root_without_its_slash_fails_before_any_call(fake_slack: FakeSlack) -> None:
    root = fake_slack.api_base_url.rstrip("/")
    result = await probe(fake_slack, apiBaseUrl=root)
    assert result.outcome == "misconfigured"
    assert result.detail == f"apiBaseUrl {root} does not end with '/'"
    assert result.fix == f"set channels.slack.apiBaseUrl to {root}/"
    assert fake_slack.calls == []


async def test_an_unreachable_api_names_the_url_and_the_setting(fake_slack: FakeSlack) -> None:
    root = f"http://127.0.0.1:{closed_port()}/api/"
    result = await probe(fake_slack, apiBaseUrl=root)
    assert result.outcome == "unreachable"
    assert result.detail.startswith(f"cannot reach {root}auth.test: ")
    assert result.fix == "check channels.slack.apiBaseUrl; check the network, proxy and firewall"
    assert_secret_free(result, BOT_TOKEN)


async def test_an_api_that_never_answers_is_unreachable_in_time(fake_slack: FakeSlack) -> None:
    with silent_server() as root:
        channel = SlackChannel(slack_config(fake_slack, apiBaseUrl=f"{root}/api/"))
        result = await channel.probe(timeout_seconds=0.2)
    assert result.outcome == "unreachable"
    assert result.detail == f"cannot reach {root}/api/auth.test: no answer in time"


async def test_rate_limits_and_server_errors_are_no_verdict(fake_slack: FakeSlack) -> None:
    fake_slack.fail("auth.test", status=429, retry_after=3)
    fake_slack.fail("auth.test", status=503)
    limited, broken = await probe(fake_slack), await probe(fake_slack)
    assert limited == ProbeResult("unexpected", "auth.test answered HTTP 429: ratelimited")
    assert broken == ProbeResult("unexpected", "auth.test answered HTTP 503: a server error")


async def test_an_answer_that_is_not_the_web_api_points_at_the_api_root(
    fake_slack: FakeSlack,
) -> None:
    elsewhere = fake_slack.api_base_url.replace("/api/", "/elsewhere/")
    not_found = await probe(fake_slack, apiBaseUrl=elsewhere)
    async with plain_text_server() as root:
        portal = await probe(fake_slack, apiBaseUrl=f"{root}/")
    assert not_found.outcome == portal.outcome == "misconfigured"
    assert not_found.detail == "auth.test answered HTTP 404, not as the Slack Web API does"
    assert portal.detail == "auth.test answered in plain text, not as the Slack Web API does"
    assert portal.fix == "check channels.slack.apiBaseUrl"
