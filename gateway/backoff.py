"""The one backoff formula every retry loop of the gateway uses.

Exponential growth from ``base`` seconds, capped at ``cap``, scaled down by a random factor in
``[1 - jitter, 1]`` so that many clients failing together do not retry in step. The outbox
keeps its schedule in the state database; providers, replies, the state database's lock
retries and sub-agent bookkeeping retries wait in memory. All of them take their delays
from :func:`backoff`.
"""

from __future__ import annotations

import random
from collections.abc import Callable

#: Doublings past this change nothing in use (any base times 2**64 is past its cap), and
#: ``2.0 ** 1024`` overflows: retry loops without a bound (a run's bookkeeping, retried for
#: as long as the database refuses it) do get that far.
MAX_EXPONENT = 64


def backoff(
    attempt: int,
    *,
    base: float,
    cap: float,
    jitter: float = 0.2,
    rng: Callable[[], float] = random.random,
) -> float:
    """Seconds to wait after failed attempt ``attempt`` (1-based) before the next one.

    ``base * 2 ** (attempt - 1)``, at most ``cap``, times a factor in ``[1 - jitter, 1]``.
    """
    if attempt < 1:
        raise ValueError(f"attempt is 1-based, got {attempt}")
    if not 0.0 <= jitter <= 1.0:
        raise ValueError(f"jitter must be within [0, 1], got {jitter}")
    delay = min(cap, base * 2.0 ** min(attempt - 1, MAX_EXPONENT))
    return float(delay * (1.0 - jitter * rng()))
