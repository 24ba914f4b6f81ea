"""A prompt over the model's context window is refused in each vendor's own words; the
providers turn those answers into :class:`ContextWindowExceededError` (not retried, the
stated window read from the message), and any other 400 stays a plain error."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gateway.providers import (
    AnthropicProvider,
    ContextWindowExceededError,
    OpenAIProvider,
    ProviderError,
)
from tests.fakes.anthropic import FakeAnthropic
from tests.fakes.openai import FakeOpenAI
from tests.fakes.provider_server import prompt_tokens
from tests.gateway.providers.conftest import user_request

LONG = "word " * 400


async def test_openai_refuses_a_long_prompt_with_context_length_exceeded(
    openai_fake: FakeOpenAI, make_openai: Callable[..., OpenAIProvider]
) -> None:
    openai_fake.context_window = 100
    provider = make_openai()
    with pytest.raises(ContextWindowExceededError) as caught:
        await provider.complete(user_request(LONG))
    refusal = caught.value
    assert (refusal.status, refusal.limit, refusal.retryable) == (400, 100, False)
    assert "maximum context length is 100 tokens" in str(refusal)
    assert len(openai_fake.requests) == 1  # the same prompt would be refused again
    # Any other bad request stays a plain error.
    openai_fake.context_window = None
    openai_fake.reply_error(400, "Invalid value for 'temperature'", kind="invalid_request_error")
    with pytest.raises(ProviderError) as other:
        await provider.complete(user_request())
    assert not isinstance(other.value, ContextWindowExceededError)


async def test_openai_counts_the_requested_completion_against_the_window(
    openai_fake: FakeOpenAI, make_openai: Callable[..., OpenAIProvider]
) -> None:
    request = user_request("hello", max_tokens=4096)
    openai_fake.context_window = 1000  # the prompt fits, the prompt and the reply do not
    with pytest.raises(ContextWindowExceededError) as caught:
        await make_openai().complete(request)
    assert caught.value.limit == 1000
    assert "in the completion" in str(caught.value)
    openai_fake.context_window = 4096 + prompt_tokens(openai_fake.requests[0].body)
    openai_fake.reply_text("fits")
    assert (await make_openai().complete(request)).text == "fits"


async def test_anthropic_refuses_a_long_prompt_as_too_long(
    anthropic_fake: FakeAnthropic, make_anthropic: Callable[..., AnthropicProvider]
) -> None:
    anthropic_fake.context_window = 100
    with pytest.raises(ContextWindowExceededError) as caught:
        await make_anthropic().complete(user_request(LONG))
    refusal = caught.value
    assert (refusal.status, refusal.limit, refusal.error_type) == (
        400,
        100,
        "invalid_request_error",
    )
    assert "prompt is too long" in str(refusal)
    assert len(anthropic_fake.requests) == 1
    anthropic_fake.context_window = None
    anthropic_fake.reply_error(400, "max_tokens: Field required", kind="invalid_request_error")
    with pytest.raises(ProviderError) as other:
        await make_anthropic().complete(user_request())
    assert not isinstance(other.value, ContextWindowExceededError)


async def test_anthropic_refuses_a_prompt_whose_max_tokens_overflow_the_window(
    anthropic_fake: FakeAnthropic, make_anthropic: Callable[..., AnthropicProvider]
) -> None:
    anthropic_fake.context_window = 2000
    with pytest.raises(ContextWindowExceededError) as caught:
        await make_anthropic().complete(user_request("hello", max_tokens=4096))
    assert caught.value.limit == 2000
    assert "exceed context limit" in str(caught.value)
