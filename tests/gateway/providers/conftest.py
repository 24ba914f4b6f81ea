"""Fixtures for provider tests: started fakes and provider factories that close what they made."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from pydantic import SecretStr

from gateway.llm import ChatMessage, ModelRequest, ToolSpec
from gateway.providers import AnthropicProvider, OpenAIProvider, RetryPolicy
from gateway.settings import ModelConfig, ProviderConfig
from tests.fakes.anthropic import FakeAnthropic, anthropic_server
from tests.fakes.openai import FakeOpenAI, openai_server


class Sleeps:
    """A RetryPolicy sleep that records the waits instead of sleeping them."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        await asyncio.sleep(0)


LS_TOOL = ToolSpec(
    name="ls",
    description="List a folder of your workspace.",
    parameters={
        "type": "object",
        "properties": {"path": {"type": "string", "description": "Directory."}},
        "additionalProperties": False,
    },
)


def user_request(text: str = "hi", **overrides: Any) -> ModelRequest:
    """A one-message request with a system prompt."""
    fields: dict[str, Any] = {
        "model": "gpt-4o-mini",
        "system": "Be brief.",
        "messages": (ChatMessage(role="user", content=text),),
    }
    fields.update(overrides)
    return ModelRequest(**fields)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
async def openai_fake() -> AsyncIterator[FakeOpenAI]:
    async with openai_server() as fake:
        yield fake


@pytest.fixture
async def anthropic_fake() -> AsyncIterator[FakeAnthropic]:
    async with anthropic_server() as fake:
        yield fake


def _config(api: Any, base_url: str, api_key: str | None, **overrides: Any) -> ProviderConfig:
    fields: dict[str, Any] = {
        "api": api,
        "base_url": base_url,
        "api_key": SecretStr(api_key) if api_key else None,
        "models": [ModelConfig(id="gpt-4o-mini")],
        "timeout_seconds": 5,
        "max_retries": 3,
    }
    fields.update(overrides)
    return ProviderConfig(**fields)


@pytest.fixture
async def make_openai(
    openai_fake: FakeOpenAI, sleeps: Sleeps
) -> AsyncIterator[Callable[..., OpenAIProvider]]:
    made: list[OpenAIProvider] = []

    def make(**overrides: Any) -> OpenAIProvider:
        key = overrides.pop("api_key", openai_fake.api_key)
        base_url = overrides.pop("base_url", openai_fake.base_url)
        config = _config("openai-completions", base_url, key, **overrides)
        provider = OpenAIProvider("openai", config, retry=RetryPolicy(sleep=sleeps))
        made.append(provider)
        return provider

    yield make
    for provider in made:
        await provider.close()


@pytest.fixture
async def make_anthropic(
    anthropic_fake: FakeAnthropic, sleeps: Sleeps
) -> AsyncIterator[Callable[..., AnthropicProvider]]:
    made: list[AnthropicProvider] = []

    def make(**overrides: Any) -> AnthropicProvider:
        key = overrides.pop("api_key", anthropic_fake.api_key)
        base_url = overrides.pop("base_url", anthropic_fake.base_url)
        config = _config("anthropic-messages", base_url, key, **overrides)
        provider = AnthropicProvider("anthropic", config, retry=RetryPolicy(sleep=sleeps))
        made.append(provider)
        return provider

    yield make
    for provider in made:
        await provider.close()
