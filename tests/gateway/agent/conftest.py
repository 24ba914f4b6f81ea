"""Fixtures of the agent tests: a provider on the wire-level OpenAI fake, closed afterwards."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from pydantic import SecretStr

from gateway.providers import OpenAIProvider
from gateway.settings import ModelConfig, ProviderConfig
from tests.fakes.openai import FakeOpenAI, openai_server

MODEL_ID = "gpt-4o-mini"


@pytest.fixture
async def model() -> AsyncIterator[FakeOpenAI]:
    async with openai_server() as fake:
        yield fake


@pytest.fixture
async def provider(model: FakeOpenAI) -> AsyncIterator[OpenAIProvider]:
    """The gateway's OpenAI provider pointed at the fake; no retries."""
    config = ProviderConfig(
        api="openai-completions",
        base_url=model.base_url,
        api_key=SecretStr(model.api_key or ""),
        models=[ModelConfig(id=MODEL_ID)],
        max_retries=0,
    )
    made = OpenAIProvider("fake", config)
    try:
        yield made
    finally:
        await made.close()
