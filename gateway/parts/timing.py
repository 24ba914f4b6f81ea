"""Retry and poll periods that are not configuration: tests and benchmarks shorten them."""

from __future__ import annotations

from dataclasses import dataclass, field

from aiohttp import web

from gateway.cluster import DEAD_AFTER_SECONDS, HEARTBEAT_SECONDS, QueueTiming
from gateway.constants import CLUSTER_POLL_SECONDS
from gateway.delivery.outbox import BASE_DELAY as OUTBOX_BASE_DELAY
from gateway.delivery.outbox import CLUSTER_POLL_SECONDS as OUTBOX_POLL_SECONDS
from gateway.providers import RetryPolicy


@dataclass(frozen=True, slots=True)
class Timing:
    """Retry timing that is not configuration: tests and benchmarks make retries quick
    (and, in a cluster, heartbeats, takeovers and sweeps)."""

    outbox_base_delay: float = OUTBOX_BASE_DELAY
    provider_retry: RetryPolicy | None = None
    #: In a cluster: how often the outbox looks for items other replicas queued.
    outbox_poll_seconds: float = OUTBOX_POLL_SECONDS
    #: In a cluster: seconds between heartbeats, and of silence after which a replica is dead.
    replica_heartbeat_seconds: float = HEARTBEAT_SECONDS
    replica_dead_seconds: float = DEAD_AFTER_SECONDS

    queue: QueueTiming = field(default_factory=QueueTiming)
    #: Cluster: a standby's lock tries, a held lock's checks, LISTEN reconnects.
    cluster_poll: float = CLUSTER_POLL_SECONDS


TIMING = web.AppKey("timing", Timing)
