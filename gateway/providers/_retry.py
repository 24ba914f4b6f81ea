"""Bounded retries with exponential backoff and jitter, honouring the server's Retry-After.

Only errors marked ``retryable`` are retried (429, 408/409, 5xx, timeouts, dropped
connections). A ``Retry-After`` longer than ``retry_after_cap`` is not waited out: a person
is waiting in a chat, and a server asking for minutes will most likely refuse again after a
shorter sleep, so the error is raised at once (it names the status and the server's message).
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TypeVar

from gateway.backoff import backoff
from gateway.providers.errors import ContextWindowExceededError, ProviderError, status_phrase

log = logging.getLogger(__name__)

T = TypeVar("T")

Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How long to wait between attempts. ``max_retries`` comes from the provider config.

    The n-th retry waits ``min(max_delay, base_delay * 2**(n-1))`` scaled by a random factor
    in ``[1 - jitter, 1]`` (so many clients hitting one limit spread out), or exactly the
    server's ``Retry-After`` when it sent one. ``sleep`` is injectable so tests never sleep.
    """

    base_delay: float = 0.5
    max_delay: float = 8.0
    #: Longest Retry-After we wait out; see the module docstring for why we then give up.
    retry_after_cap: float = 60.0
    jitter: float = 0.5
    sleep: Sleep = asyncio.sleep
    rng: Callable[[], float] = field(default=random.random)

    def delay(self, retry: int, error: ProviderError) -> float | None:
        """Seconds to wait before retry number ``retry`` (1-based), or None to give up."""
        if error.retry_after is not None:
            if error.retry_after > self.retry_after_cap:
                return None
            return max(0.0, error.retry_after)
        return backoff(
            retry, base=self.base_delay, cap=self.max_delay, jitter=self.jitter, rng=self.rng
        )


DEFAULT_RETRY_POLICY = RetryPolicy()


def parse_retry_after(headers: Mapping[str, str], *, now: datetime | None = None) -> float | None:
    """The server's wait hint in seconds, or None.

    Reads OpenAI's ``retry-after-ms`` first (finer grained), then ``Retry-After`` as
    delta-seconds or an HTTP-date. Unparseable values are ignored, never an error.
    """
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def log_failure(error: ProviderError) -> None:
    """One warning for a model call that failed for good: provider, model, HTTP status (or
    what went wrong without one), error kind and attempts; never the key or the request.
    A prompt refused as too long is not logged here: compaction handles it and says so."""
    if isinstance(error, ContextWindowExceededError):
        return
    if error.status is not None:
        what = f"HTTP {error.status} {status_phrase(error.status)}"
    else:
        what = f"{type(error).__name__}: {error.message}"
    log.warning(
        "model call failed: %s/%s: %s",
        error.provider,
        error.model,
        what,
        extra={
            "provider": error.provider,
            "model": error.model,
            "status": error.status,
            "error_type": error.error_type,
            "attempts": error.attempts,
        },
    )


async def with_retries(
    attempt: Callable[[], Awaitable[T]], *, max_retries: int, policy: RetryPolicy
) -> T:
    """Run ``attempt`` until it succeeds, at most ``1 + max_retries`` times.

    A non-retryable :class:`ProviderError` is raised at once; after the last attempt the
    last error is raised with ``attempts`` set. Either way the failure is logged once (see
    :func:`log_failure`). Anything else propagates untouched.
    """
    tries = 0
    while True:
        tries += 1
        try:
            return await attempt()
        except ProviderError as error:
            error.attempts = tries
            wait = None
            if error.retryable and tries <= max_retries:
                wait = policy.delay(tries, error)
            if wait is None:
                log_failure(error)
                raise
            log.warning(
                "%s/%s: %s; retry %d/%d in %.2fs",
                error.provider,
                error.model,
                error.message if error.status is None else f"HTTP {error.status}",
                tries,
                max_retries,
                wait,
            )
            await policy.sleep(wait)
