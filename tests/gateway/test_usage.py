"""Cost and the announce stats line (gateway/usage.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.llm import Usage
from gateway.settings import ModelCost
from gateway.usage import (
    cost_usd,
    format_cost,
    format_runtime,
    format_stats_line,
    format_tokens,
    sum_usage,
)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (0.9, "0s"),
        (42, "42s"),
        (59, "59s"),
        (59.99, "59s"),
        (60, "1m0s"),
        (312, "5m12s"),
        (3599, "59m59s"),
        (3600, "1h0m"),
        (3780, "1h3m"),
        (90061, "25h1m"),
        (-5, "0s"),
        (None, "n/a"),
    ],
)
def test_format_runtime(seconds: float | None, text: str) -> None:
    assert format_runtime(seconds) == text


@pytest.mark.parametrize(
    ("count", "text"),
    [
        (0, "0"),
        (999, "999"),
        (1_000, "1.0k"),
        (1_234, "1.2k"),
        (12_345, "12.3k"),
        (999_949, "999.9k"),
        (999_999, "1.0m"),
        (1_000_000, "1.0m"),
        (3_400_000, "3.4m"),
        (None, "n/a"),
    ],
)
def test_format_tokens(count: int | None, text: str) -> None:
    assert format_tokens(count) == text


@pytest.mark.parametrize(
    ("usd", "text"),
    [
        (0.0, "$0.0000"),
        (0.0031, "$0.0031"),
        (0.00999, "$0.0100"),
        (0.01, "$0.01"),
        (0.04, "$0.04"),
        (12.5, "$12.50"),
        (None, "n/a"),
    ],
)
def test_format_cost(usd: float | None, text: str) -> None:
    assert format_cost(usd) == text


def test_cost_prices_cache_tokens_at_their_own_prices() -> None:
    cost = ModelCost(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)
    # 1100 prompt tokens: 100 uncached, 800 cache reads, 200 cache writes.
    usage = Usage(input=1100, output=50, cache_read=800, cache_write=200)
    expected = (100 * 3.0 + 50 * 15.0 + 800 * 0.3 + 200 * 3.75) / 1e6
    assert cost_usd(usage, cost) == pytest.approx(expected)
    assert cost_usd(usage, None) is None
    assert cost_usd(Usage(), cost) == 0.0


def test_openai_style_cached_subset_is_not_charged_twice() -> None:
    cost = ModelCost(input=0.15, output=0.6, cache_read=0.075)
    usage = Usage(input=1_000_000, output=0, cache_read=1_000_000)
    assert cost_usd(usage, cost) == pytest.approx(0.075)


def test_sum_usage() -> None:
    total = sum_usage([Usage(1, 2, 3, 4), Usage(10, 20, 30, 40)])
    assert total == Usage(11, 22, 33, 44)
    assert sum_usage([]) == Usage()


def test_stats_line_is_exactly_the_pinned_format(tmp_path: Path) -> None:
    transcript = tmp_path / "abc.jsonl"
    line = format_stats_line(
        312,
        Usage(input=10_000, output=2_300),
        0.04,
        "agent:main:subagent:1234",
        "abc",
        transcript,
    )
    assert line == (
        "Stats: runtime 5m12s • tokens 12.3k (in 10.0k / out 2.3k) • est $0.04 • "
        f"sessionKey agent:main:subagent:1234 • sessionId abc • transcript {transcript}"
    )


def test_stats_line_without_cost_and_with_missing_figures() -> None:
    line = format_stats_line(None, None, None, None, None, None)
    assert line == (
        "Stats: runtime n/a • tokens n/a • sessionKey n/a • sessionId n/a • transcript n/a"
    )
    partial = format_stats_line(42, Usage(input=900, output=99), None, "k", "i", "/t.jsonl")
    assert partial == (
        "Stats: runtime 42s • tokens 999 (in 900 / out 99) • sessionKey k • sessionId i • "
        "transcript /t.jsonl"
    )
