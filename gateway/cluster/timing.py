"""The periods of the cluster's sub-agent queue (tests shorten them; they are not
configuration: they follow from the takeover promise, a dead replica's runs resumed
within 60 seconds)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class QueueTiming:
    """Takeover of a dead replica's run: its worker's heartbeat stops; after
    ``stalled_seconds`` without one its jobs are stalled, and the next stalled-job check
    (every ``stalled_check_seconds``, on every replica) puts them back in the queue: at
    most ``stalled_seconds + stalled_check_seconds`` (40 s) plus a poll."""

    #: How often a worker records that it lives.
    heartbeat_seconds: float = 10.0
    #: A worker silent this long is dead (three missed heartbeats).
    stalled_seconds: float = 30.0
    #: How often each replica looks for the jobs of dead workers.
    stalled_check_seconds: float = 10.0
    #: How often each replica looks for unfinished runs that have no job.
    sweep_seconds: float = 15.0
    #: Fallback polls for new jobs and abort requests (LISTEN/NOTIFY brings both at once).
    poll_seconds: float = 5.0
