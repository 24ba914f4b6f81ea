"""Retry timing and Retry-After parsing (gateway/providers/_retry.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gateway.providers import ProviderError, RetryPolicy, parse_retry_after
from gateway.providers._retry import with_retries
from tests.gateway.providers.conftest import Sleeps

NOW = datetime(2026, 1, 31, 14, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({}, None),
        ({"retry-after": "7"}, 7.0),
        ({"retry-after": " 1.5 "}, 1.5),
        ({"retry-after": "-3"}, 0.0),
        ({"retry-after": "Sat, 31 Jan 2026 14:00:30 GMT"}, 30.0),
        ({"retry-after": "Sat, 31 Jan 2026 13:59:00 GMT"}, 0.0),
        ({"retry-after": "soon"}, None),
        ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5),
        ({"retry-after-ms": "x", "retry-after": "9"}, 9.0),
    ],
)
def test_parse_retry_after(headers: dict[str, str], expected: float | None) -> None:
    assert parse_retry_after(headers, now=NOW) == expected


def error(*, retryable: bool = True, retry_after: float | None = None) -> ProviderError:
    return ProviderError("p", "m", "busy", 503, retryable, retry_after=retry_after)


def test_backoff_doubles_up_to_the_cap_and_jitters_down() -> None:
    no_jitter = RetryPolicy(base_delay=1, max_delay=5, rng=lambda: 0.0)
    assert [no_jitter.delay(n, error()) for n in (1, 2, 3, 4)] == [1, 2, 4, 5]
    full_jitter = RetryPolicy(base_delay=1, max_delay=5, jitter=0.5, rng=lambda: 1.0)
    assert full_jitter.delay(3, error()) == 2.0


def test_retry_after_is_used_exactly_but_not_beyond_the_cap() -> None:
    policy = RetryPolicy(retry_after_cap=60)
    assert policy.delay(1, error(retry_after=12)) == 12
    assert policy.delay(1, error(retry_after=600)) is None


async def test_long_retry_after_gives_up_at_once() -> None:
    sleeps = Sleeps()
    calls = 0

    async def attempt() -> str:
        nonlocal calls
        calls += 1
        raise error(retry_after=3600)

    with pytest.raises(ProviderError):
        await with_retries(attempt, max_retries=5, policy=RetryPolicy(sleep=sleeps))
    assert calls == 1
    assert sleeps.delays == []


async def test_non_retryable_errors_and_other_exceptions_pass_through() -> None:
    sleeps = Sleeps()

    async def fatal() -> str:
        raise error(retryable=False)

    async def broken() -> str:
        raise KeyError("bug")

    with pytest.raises(ProviderError):
        await with_retries(fatal, max_retries=3, policy=RetryPolicy(sleep=sleeps))
    with pytest.raises(KeyError):
        await with_retries(broken, max_retries=3, policy=RetryPolicy(sleep=sleeps))
    assert sleeps.delays == []


async def test_zero_retries_means_one_attempt() -> None:
    sleeps = Sleeps()
    calls = 0

    async def attempt() -> str:
        nonlocal calls
        calls += 1
        raise error()

    with pytest.raises(ProviderError) as caught:
        await with_retries(attempt, max_retries=0, policy=RetryPolicy(sleep=sleeps))
    assert calls == 1
    assert caught.value.attempts == 1
    assert str(caught.value) == "p/m: HTTP 503 Service Unavailable: busy"
