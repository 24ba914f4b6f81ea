"""The one backoff formula: doubling from ``base``, capped at ``cap``, jittered downwards."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.backoff import backoff


def no_jitter() -> float:
    return 0.0


def full_jitter() -> float:
    return 1.0


def test_doubles_from_base_until_the_cap() -> None:
    delays = [backoff(n, base=2.0, cap=300.0, rng=no_jitter) for n in range(1, 12)]
    assert delays == [2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 300.0, 300.0, 300.0]


def test_jitter_scales_the_delay_down_by_at_most_its_share() -> None:
    assert backoff(3, base=1.0, cap=60.0, jitter=0.2, rng=full_jitter) == pytest.approx(3.2)
    assert backoff(3, base=1.0, cap=60.0, jitter=0.2, rng=lambda: 0.5) == pytest.approx(3.6)
    assert backoff(3, base=1.0, cap=60.0, jitter=0.0, rng=full_jitter) == 4.0


@pytest.mark.parametrize("attempt", [0, -1])
def test_attempts_are_one_based(attempt: int) -> None:
    with pytest.raises(ValueError, match="1-based"):
        backoff(attempt, base=1.0, cap=10.0)


@pytest.mark.parametrize("jitter", [-0.1, 1.5])
def test_jitter_must_be_a_share(jitter: float) -> None:
    with pytest.raises(ValueError, match="jitter"):
        backoff(1, base=1.0, cap=10.0, jitter=jitter)


def test_a_retry_loop_that_never_gives_up_still_gets_the_cap() -> None:
    # RunManager retries a run's bookkeeping for as long as the database refuses it: its
    # attempt count has no bound, and the delay must stay the cap however high it gets.
    assert backoff(1025, base=1.0, cap=60.0, rng=no_jitter) == 60.0
    assert backoff(10**6, base=1.0, cap=60.0, rng=no_jitter) == 60.0


@given(
    attempt=st.integers(1, 5000),
    base=st.floats(0.001, 100.0),
    cap=st.floats(0.001, 3600.0),
    jitter=st.floats(0.0, 1.0),
    draw=st.floats(0.0, 1.0, exclude_max=True),
)
def test_any_delay_lies_within_the_jitter_band_below_the_capped_doubling(
    attempt: int, base: float, cap: float, jitter: float, draw: float
) -> None:
    delay = backoff(attempt, base=base, cap=cap, jitter=jitter, rng=lambda: draw)
    ceiling = cap if attempt > 64 else min(cap, base * 2.0 ** (attempt - 1))
    assert ceiling * (1.0 - jitter) - 1e-9 <= delay <= ceiling + 1e-9
