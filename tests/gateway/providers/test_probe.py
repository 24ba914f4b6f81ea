"""Provider.probe(): one GET of the model list against the fake vendors, or nothing at all."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gateway.llm import Provider, ProviderProbe
from gateway.providers import (
    AnthropicProvider,
    OpenAIProvider,
    ProviderError,
    ScriptedProvider,
    build_provider,
)
from gateway.settings import ModelConfig, ProviderConfig
from tests.fakes.anthropic import FakeAnthropic
from tests.fakes.network import closed_port, plain_text_server
from tests.fakes.openai import FakeOpenAI

MakeOpenAI = Callable[..., OpenAIProvider]
MakeAnthropic = Callable[..., AnthropicProvider]

WRONG_KEY = "sk-wrong-key-that-must-not-print-42"


def assert_secret_free(result: ProviderProbe, *secrets: str) -> None:
    for secret in secrets:
        assert secret not in result.detail
        assert secret not in (result.fix or "")


# -- OpenAI and compatible servers ----------------------------------------------------------


async def test_openai_lists_its_models_with_the_key(
    openai_fake: FakeOpenAI, make_openai: MakeOpenAI
) -> None:
    openai_fake.models = ["gpt-4o-mini", "gpt-4.1"]
    result = await make_openai().probe()
    assert result == ProviderProbe(
        "ok",
        f"reachable at {openai_fake.base_url}, key accepted",
        models=("gpt-4o-mini", "gpt-4.1"),
    )
    [sent] = openai_fake.requests
    assert (sent.method, sent.path, sent.authorized) == ("GET", "/v1/models", True)
    assert sent.headers["Authorization"] == "Bearer ***"


async def test_openai_refusing_the_key_names_the_setting_not_the_key(
    openai_fake: FakeOpenAI, make_openai: MakeOpenAI
) -> None:
    result = await make_openai(api_key=WRONG_KEY).probe()
    assert result.outcome == "refused"
    assert result.detail.startswith("the API key was refused (HTTP 401: Incorrect API key")
    # Not the vendor's own host: the OPENAI_API_KEY hint would mislead.
    assert result.fix == "check models.providers.openai.apiKey"
    assert_secret_free(result, WRONG_KEY)


async def test_a_key_the_server_echoes_back_is_masked(
    openai_fake: FakeOpenAI, make_openai: MakeOpenAI
) -> None:
    key = openai_fake.api_key
    assert key is not None
    openai_fake.reply_error(401, f"Incorrect API key provided: {key}.", kind="invalid_request")
    result = await make_openai().probe()
    assert result.detail == "the API key was refused (HTTP 401: Incorrect API key provided: ***.)"
    assert_secret_free(result, key)


async def test_the_official_api_without_a_key_fails_before_any_request() -> None:
    config = ProviderConfig(api="openai-completions", models=[ModelConfig(id="gpt-4o-mini")])
    provider = OpenAIProvider("oa", config)
    try:
        result = await provider.probe()
    finally:
        await provider.close()
    assert result.outcome == "missing"
    assert result.detail == "no API key (models.providers.oa.apiKey is unset)"
    assert result.fix == (
        'set models.providers.oa.apiKey, e.g. apiKey: "${OPENAI_API_KEY}",'
        " and export OPENAI_API_KEY"
    )


async def test_a_compatible_server_without_keys_needs_none() -> None:
    fake = FakeOpenAI(api_key=None)
    await fake.start()
    config = ProviderConfig(api="openai-completions", base_url=fake.base_url)
    provider = OpenAIProvider("local", config)
    try:
        result = await provider.probe()
    finally:
        await provider.close()
        await fake.close()
    assert result.ok
    assert result.detail == f"reachable at {fake.base_url}, no key needed"
    assert "Authorization" not in fake.requests[0].headers


async def test_a_server_without_a_model_list_is_no_verdict(
    openai_fake: FakeOpenAI, make_openai: MakeOpenAI
) -> None:
    root = openai_fake.base_url.removesuffix("/v1")
    result = await make_openai(base_url=root).probe()
    assert result.outcome == "unexpected"
    assert result.detail == (
        f"{root}/models answered 404: the server may not list models, or baseUrl is wrong"
    )
    assert result.fix == "OpenAI-compatible baseUrl ends in /v1"


async def test_a_server_error_is_no_verdict_and_is_not_retried(
    openai_fake: FakeOpenAI, make_openai: MakeOpenAI
) -> None:
    openai_fake.reply_error(503, "The engine is currently overloaded", retry_after="1")
    result = await make_openai().probe()
    assert result == ProviderProbe(
        "unexpected", "reachable, but answered HTTP 503: The engine is currently overloaded"
    )
    assert len(openai_fake.requests) == 1


async def test_a_list_that_is_not_json_accepts_the_key_but_names_no_models(
    openai_fake: FakeOpenAI, make_openai: MakeOpenAI
) -> None:
    openai_fake.reply_raw(b"<html>models</html>", content_type="text/html")
    result = await make_openai().probe()
    assert result.ok
    assert result.models is None


async def test_an_unreachable_server_names_the_url_and_the_setting(
    make_openai: MakeOpenAI,
) -> None:
    base = f"http://127.0.0.1:{closed_port()}/v1"
    result = await make_openai(base_url=base).probe()
    assert result.outcome == "unreachable"
    assert result.detail.startswith(f"cannot reach {base}/models: ")
    assert result.fix == (
        "check models.providers.openai.baseUrl; check the network, proxy and firewall"
    )


async def test_a_server_that_hangs_is_unreachable_in_time(
    openai_fake: FakeOpenAI, make_openai: MakeOpenAI
) -> None:
    openai_fake.hang(30)
    result = await make_openai().probe(timeout_seconds=0.2)
    assert result.outcome == "unreachable"
    assert result.detail == f"cannot reach {openai_fake.base_url}/models: no answer in time"


async def test_a_closed_provider_refuses_to_probe(make_openai: MakeOpenAI) -> None:
    provider = make_openai()
    await provider.close()
    with pytest.raises(ProviderError, match="closed"):
        await provider.probe()


# -- Anthropic ------------------------------------------------------------------------------


async def test_anthropic_checks_the_key_but_names_no_models(
    anthropic_fake: FakeAnthropic, make_anthropic: MakeAnthropic
) -> None:
    result = await make_anthropic(base_url=f"{anthropic_fake.base_url}/v1").probe()
    # Its list leaves out aliases like the configured one: no ids to check against.
    assert result == ProviderProbe("ok", f"reachable at {anthropic_fake.base_url}/v1, key accepted")
    [sent] = anthropic_fake.requests
    assert (sent.method, sent.path, sent.authorized) == ("GET", "/v1/models", True)
    assert sent.headers["anthropic-version"]
    assert "Content-Type" not in sent.headers


async def test_anthropic_refusing_the_key(make_anthropic: MakeAnthropic) -> None:
    result = await make_anthropic(api_key=WRONG_KEY).probe()
    assert result == ProviderProbe(
        "refused",
        "the API key was refused (HTTP 401: invalid x-api-key)",
        "check models.providers.anthropic.apiKey",
    )


async def test_anthropic_official_api_without_a_key_fails_before_any_request() -> None:
    provider = AnthropicProvider("an", ProviderConfig(api="anthropic-messages"))
    try:
        result = await provider.probe()
    finally:
        await provider.close()
    assert result.outcome == "missing"
    assert result.fix is not None
    assert "ANTHROPIC_API_KEY" in result.fix


async def test_anthropic_behind_a_captive_portal_is_no_verdict(
    make_anthropic: MakeAnthropic,
) -> None:
    async with plain_text_server(status=511) as root:
        result = await make_anthropic(base_url=root).probe()
    assert result.outcome == "unexpected"
    assert result.detail.startswith("reachable, but answered HTTP 511: Welcome!")


# -- scripted -------------------------------------------------------------------------------


async def test_a_scripted_provider_has_nothing_remote_to_check(tmp_path: Path) -> None:
    rules = tmp_path / "rules.json5"
    rules.write_text("{rules: [{match: 'hi', reply: 'hello'}]}")
    config = ProviderConfig(api="scripted", script="rules.json5")
    provider: Provider = build_provider("demo", config, config_dir=tmp_path)
    assert isinstance(provider, ScriptedProvider)
    result = await provider.probe()
    assert result == ProviderProbe("ok", f"scripted rules load ({rules})")
    assert result.models is None  # it answers for any model id
