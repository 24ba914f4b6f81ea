"""build_provider and ProviderRegistry (gateway/providers/__init__.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from gateway.llm import ChatMessage, ModelRequest
from gateway.providers import (
    AnthropicProvider,
    OpenAIProvider,
    ProviderError,
    ProviderRegistry,
    ScriptedProvider,
    ScriptError,
    UnknownModelError,
    build_provider,
    parse_model_ref,
)
from gateway.settings import ModelConfig, ModelCost, ModelsConfig, ProviderConfig
from tests.fakes.anthropic import anthropic_server
from tests.fakes.openai import openai_server


def hello(model: str) -> ModelRequest:
    return ModelRequest(
        model=model, system="", messages=(ChatMessage(role="user", content="hello"),)
    )


def test_parse_model_ref_splits_at_the_first_slash() -> None:
    assert parse_model_ref("openai/gpt-4o-mini") == ("openai", "gpt-4o-mini")
    assert parse_model_ref("router/meta/llama-3") == ("router", "meta/llama-3")
    for bad in ("gpt-4o", "/gpt", "openai/"):
        with pytest.raises(UnknownModelError, match="is not of the form"):
            parse_model_ref(bad)


async def test_default_config_resolves_the_demo_model(tmp_path: Path) -> None:
    registry = ProviderRegistry(ModelsConfig().providers, config_dir=tmp_path)
    try:
        provider, model = registry.resolve("demo/scripted")
        assert isinstance(provider, ScriptedProvider)
        assert model.cost == ModelCost(input=0.15, output=0.6, cache_read=0.075)
        reply = await provider.complete(hello(model.id))
        assert "demo model" in reply.text
    finally:
        await registry.close()


async def test_unknown_provider_and_model_name_what_exists(tmp_path: Path) -> None:
    registry = ProviderRegistry(ModelsConfig().providers, config_dir=tmp_path)
    try:
        with pytest.raises(UnknownModelError) as caught:
            registry.resolve("openai/gpt-4o")
        assert str(caught.value) == "openai/?: unknown provider (configured: demo)"
        with pytest.raises(UnknownModelError) as caught:
            registry.resolve("demo/gpt-4o")
        assert str(caught.value) == "demo/gpt-4o: no such model (configured: scripted)"
    finally:
        await registry.close()


def test_script_path_is_relative_to_the_config_dir(tmp_path: Path) -> None:
    (tmp_path / "mine.json5").write_text('{ default: { reply: "mine" } }', encoding="utf-8")
    config = ProviderConfig(api="scripted", script="mine.json5", models=[ModelConfig(id="s")])
    provider = build_provider("demo", config, config_dir=tmp_path)
    assert isinstance(provider, ScriptedProvider)
    assert provider.script.path == tmp_path / "mine.json5"


def test_a_bad_script_fails_at_construction(tmp_path: Path) -> None:
    (tmp_path / "bad.json5").write_text("{ rules: [ }", encoding="utf-8")
    config = ProviderConfig(api="scripted", script="bad.json5", models=[ModelConfig(id="s")])
    with pytest.raises(ScriptError):
        ProviderRegistry({"demo": config}, config_dir=tmp_path)


async def test_http_providers_share_one_session_and_close_together(tmp_path: Path) -> None:
    async with openai_server() as oai, anthropic_server() as ant:
        oai.reply_text("from openai")
        ant.reply_text("from anthropic")
        configs = {
            "openai": ProviderConfig(
                api="openai-completions",
                base_url=oai.base_url,
                api_key=SecretStr(oai.api_key or ""),
                models=[ModelConfig(id="gpt-4o-mini")],
            ),
            "claude": ProviderConfig(
                api="anthropic-messages",
                base_url=ant.base_url,
                api_key=SecretStr(ant.api_key or ""),
                models=[ModelConfig(id="claude-sonnet-4-5", max_tokens=1024)],
            ),
        }
        registry = ProviderRegistry(configs, config_dir=tmp_path)
        openai, _ = registry.resolve("openai/gpt-4o-mini")
        claude, claude_model = registry.resolve("claude/claude-sonnet-4-5")
        assert isinstance(openai, OpenAIProvider)
        assert isinstance(claude, AnthropicProvider)
        assert openai.session is not None
        assert openai.session is claude.session
        assert registry.names == ["claude", "openai"]

        assert (await openai.complete(hello("gpt-4o-mini"))).text == "from openai"
        request = hello(claude_model.id)
        assert (await claude.complete(request)).text == "from anthropic"

        session = openai.session
        await registry.close()
        await registry.close()
        assert session.closed
        assert openai.closed
        with pytest.raises(ProviderError, match="closed"):
            await claude.complete(request)
