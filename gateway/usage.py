"""Token usage totals, cost, and the announce stats line.

``Usage.input`` counts every prompt token, cache reads and writes included; pricing charges
cache reads and writes at their own prices, so the plain input price applies to
``input - cache_read - cache_write`` only.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

from gateway.llm import Usage
from gateway.settings import ModelCost

log = logging.getLogger(__name__)

MISSING = "n/a"
SEPARATOR = " • "
#: Prices are USD per million tokens.
TOKENS_PER_PRICE_UNIT = 1_000_000


def sum_usage(usages: Iterable[Usage]) -> Usage:
    """The total of many calls' usage (a run's, a session's)."""
    total = Usage()
    for usage in usages:
        total = total + usage
    return total


def cost_usd(usage: Usage, cost: ModelCost | None) -> float | None:
    """Estimated USD for ``usage`` at ``cost``'s prices; None when the model has no cost.

    Σ tokens × price / 1e6 with uncached input at ``cost.input`` and cache reads and writes
    at ``cost.cache_read`` and ``cost.cache_write``.
    """
    if cost is None:
        return None
    uncached = max(0, usage.input - usage.cache_read - usage.cache_write)
    total = (
        uncached * cost.input
        + usage.output * cost.output
        + usage.cache_read * cost.cache_read
        + usage.cache_write * cost.cache_write
    )
    return total / TOKENS_PER_PRICE_UNIT


def format_runtime(seconds: float | None) -> str:
    """``42s``, ``5m12s``, ``1h3m``; partial seconds are dropped."""
    if seconds is None:
        return MISSING
    whole = max(0, int(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"


def format_tokens(count: int | None) -> str:
    """``999``, ``1.2k`` from 1e3, ``3.4m`` from 1e6."""
    if count is None:
        return MISSING
    if count < 1_000:
        return str(count)
    if count < 1_000_000:
        text = f"{count / 1_000:.1f}"
        # 999_950 rounds to "1000.0k": say "1.0m" instead.
        if text != "1000.0":
            return f"{text}k"
    return f"{count / 1_000_000:.1f}m"


def format_cost(usd: float | None) -> str:
    """``$0.04`` (2 decimals at ≥ $0.01), ``$0.0031`` below."""
    if usd is None:
        return MISSING
    return f"${usd:.2f}" if usd >= 0.01 else f"${usd:.4f}"


def format_stats_line(
    runtime_s: float | None,
    usage: Usage | None,
    cost_usd: float | None,
    session_key: str | None,
    session_id: str | None,
    transcript_path: str | Path | None,
) -> str:
    """The pinned announce stats line.

    ``Stats: runtime 5m12s • tokens 12.3k (in 10.0k / out 2.3k) • est $0.04 • sessionKey …
    • sessionId … • transcript …``. ``est`` is left out when ``cost_usd`` is None (the model
    has no cost); any other missing figure prints ``n/a``.
    """
    if usage is None:
        tokens = f"tokens {MISSING}"
    else:
        tokens = (
            f"tokens {format_tokens(usage.total)} "
            f"(in {format_tokens(usage.input)} / out {format_tokens(usage.output)})"
        )
    parts = [f"runtime {format_runtime(runtime_s)}", tokens]
    if cost_usd is not None:
        parts.append(f"est {format_cost(cost_usd)}")
    parts += [
        f"sessionKey {session_key or MISSING}",
        f"sessionId {session_id or MISSING}",
        f"transcript {transcript_path or MISSING}",
    ]
    return "Stats: " + SEPARATOR.join(parts)


def format_batch_stats_line(
    counts: Iterable[tuple[str, int]],
    runtime_s: float | None,
    usage: Usage,
    cost_usd: float | None,
    run_ids: Iterable[str],
) -> str:
    """The stats line of a batch's follow-up reply.

    ``Stats: 3 sub-agents (2 done, 1 timeout) • runtime 1m05s • tokens 36.9k (in 30.0k /
    out 6.9k) • est $0.12 • runs 1a2b3c4d, 5e6f7a8b, 9c0d1e2f``: ``counts`` are (status,
    runs) in the order to print, runs by the first 8 characters of their ids.
    """
    pairs = [(status, n) for status, n in counts if n]
    total = sum(n for _, n in pairs)
    noun = "sub-agent" if total == 1 else "sub-agents"
    detail = ", ".join(f"{n} {status}" for status, n in pairs)
    tokens = (
        f"tokens {format_tokens(usage.total)} "
        f"(in {format_tokens(usage.input)} / out {format_tokens(usage.output)})"
    )
    parts = [f"{total} {noun} ({detail})", f"runtime {format_runtime(runtime_s)}", tokens]
    if cost_usd is not None:
        parts.append(f"est {format_cost(cost_usd)}")
    parts.append("runs " + ", ".join(run_id[:8] for run_id in run_ids))
    return "Stats: " + SEPARATOR.join(parts)
