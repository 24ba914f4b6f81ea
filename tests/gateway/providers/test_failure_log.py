"""A model call that fails for good logs one warning naming provider, model and status, never
the key; the chat's error reply alone left operators blind."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from gateway.providers import OpenAIProvider, ProviderError
from tests.fakes.openai import FakeOpenAI
from tests.gateway.providers.conftest import user_request

MakeOpenAI = Callable[..., OpenAIProvider]
KEY = "sk-wrong-secret-0123456789"


def failures(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage().startswith("model call failed")]


async def test_a_refused_key_is_logged_once_without_the_key(
    openai_fake: FakeOpenAI, make_openai: MakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    with pytest.raises(ProviderError):
        await make_openai(api_key=KEY).complete(user_request())
    [record] = failures(caplog)
    assert record.levelno == logging.WARNING
    assert record.getMessage() == "model call failed: openai/gpt-4o-mini: HTTP 401 Unauthorized"
    assert (record.provider, record.model, record.status) == ("openai", "gpt-4o-mini", 401)  # type: ignore[attr-defined]
    assert KEY not in caplog.text


async def test_a_5xx_after_its_retries_is_logged_once(
    openai_fake: FakeOpenAI, make_openai: MakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    for _ in range(3):
        openai_fake.reply_error(503, "overloaded")
    with pytest.raises(ProviderError):
        await make_openai(max_retries=2).complete(user_request())
    [record] = failures(caplog)
    assert record.getMessage().endswith("HTTP 503 Service Unavailable")
    assert record.attempts == 3  # type: ignore[attr-defined]


async def test_a_timeout_is_logged_once(
    openai_fake: FakeOpenAI, make_openai: MakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    openai_fake.hang()
    with pytest.raises(ProviderError):
        await make_openai(timeout_seconds=0.2, max_retries=0).complete(user_request())
    [record] = failures(caplog)
    assert record.getMessage() == (
        "model call failed: openai/gpt-4o-mini: ProviderTimeoutError: no answer within 0.2s"
    )
    assert record.status is None  # type: ignore[attr-defined]


async def test_a_success_after_a_retry_logs_no_failure(
    openai_fake: FakeOpenAI, make_openai: MakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    openai_fake.reply_error(503, "overloaded")
    openai_fake.reply_text("back")
    await make_openai(max_retries=1).complete(user_request())
    assert failures(caplog) == []
