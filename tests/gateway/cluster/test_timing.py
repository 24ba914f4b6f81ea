"""The cluster queue's default periods keep the takeover promise: a dead replica's run is
put back in the queue within a minute, and a live replica's never is."""

from __future__ import annotations

from gateway.cluster import QueueTiming

#: The takeover promise: a dead replica's runs are picked up by another within 60 s.
PROMISE_SECONDS = 60.0


def test_the_default_periods_put_a_dead_replicas_run_back_within_a_minute() -> None:
    timing = QueueTiming()
    # Worst case: silent for the whole timeout, the check just missed it, then a poll.
    worst = timing.stalled_seconds + timing.stalled_check_seconds + timing.poll_seconds
    assert worst <= PROMISE_SECONDS
    # A live worker beats several times within the timeout: a late beat is not a death.
    assert timing.heartbeat_seconds * 3 <= timing.stalled_seconds
