"""This replica's part in a cluster (``cluster.databaseUrl``): its session locks, its
heartbeat, its notices to and from the other replicas, and what the channels share with
them. Nothing of PostgreSQL is imported without a cluster."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Hashable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiohttp import web

from channels import Leadership
from channels.webchat.relay import Relay
from gateway.cluster import Heartbeat
from gateway.constants import CLUSTER_SESSION_LANE_WIDTH
from gateway.parts.state import STATE
from gateway.parts.timing import TIMING, Timing
from gateway.reload import settings_of
from gateway.settings import HeraldSettings
from lanes import KeyGuard

if TYPE_CHECKING:  # psycopg: imported only in a cluster
    from gateway.cluster.locks import SessionLocks
    from gateway.cluster.notify import PgNotices


@dataclass(frozen=True, slots=True)
class ClusterParts:
    """This replica's part in a cluster: its name, its session locks, its heartbeat, its
    notices to and from the other replicas."""

    replica_id: str
    locks: SessionLocks
    heartbeat: Heartbeat
    notices: PgNotices


@dataclass(frozen=True, slots=True)
class ClusterLinks:
    """What channels share with the other replicas of a cluster: the lock of a channel's
    one inbound connection (Discord's gateway) and the web chat's notices (on the
    replica's ``notices``, which the gateway starts and stops)."""

    leadership: Leadership
    relay: Relay
    notices: PgNotices


#: Set in a cluster only (``cluster.databaseUrl``).
CLUSTER = web.AppKey("cluster", ClusterParts)
#: What the channels built by the app share with the other replicas (a cluster only).
CLUSTER_LINKS = web.AppKey("cluster_links", ClusterLinks)


def cluster_of(app: web.Application) -> ClusterParts | None:
    """This replica's cluster parts; None: not in a cluster."""
    return app.get(CLUSTER)


def cluster_links(settings: HeraldSettings, timing: Timing) -> ClusterLinks | None:
    """The cluster's links on ``cluster.databaseUrl``; None for a single process (then
    nothing of PostgreSQL is imported)."""
    url = settings.cluster.database_url
    if url is None:
        return None
    from gateway.cluster.leader import PgLeadership
    from gateway.cluster.notify import PgWebchatRelay

    notices = cluster_notices(settings, timing)
    replica = settings.cluster.resolved_replica_id()
    return ClusterLinks(
        leadership=PgLeadership(url.get_secret_value(), replica, poll=timing.cluster_poll),
        relay=PgWebchatRelay(notices),
        notices=notices,
    )


def cluster_notices(settings: HeraldSettings, timing: Timing) -> PgNotices:
    """The replica's notices to and from the others (a cluster's settings only)."""
    from gateway.cluster.notify import PgNotices

    url = settings.cluster.database_url
    if url is None:
        raise ValueError("cluster.databaseUrl: notices need the cluster's database")
    replica = settings.cluster.resolved_replica_id()
    return PgNotices(url.get_secret_value(), replica, poll=timing.cluster_poll)


def refreshing_guard(guard: KeyGuard, *forget: Callable[[str], None]) -> KeyGuard:
    """``guard``, then ``forget(key)`` of each cache of the session once it is held: another
    replica may have written the session since this process last read it."""

    @asynccontextmanager
    async def enter(key: Hashable) -> AsyncIterator[None]:
        async with guard(key):
            for drop in forget:
                drop(str(key))
            yield

    return enter


async def cluster_setup(app: web.Application) -> AsyncIterator[None]:
    """In a cluster: the session locks, this replica's heartbeat (registered before it
    claims anything) and its notices. Nothing without ``cluster.databaseUrl``."""
    settings = settings_of(app)
    url = settings.cluster.database_url
    if url is None:
        yield
        return
    from gateway.cluster.locks import SessionLocks  # psycopg: only in a cluster

    replica, timing = settings.cluster.resolved_replica_id(), app[TIMING]
    locks = SessionLocks(
        url.get_secret_value(), size=CLUSTER_SESSION_LANE_WIDTH, replica_id=replica
    )
    heartbeat = Heartbeat(
        app[STATE],
        replica,
        interval=timing.replica_heartbeat_seconds,
        dead_after=timing.replica_dead_seconds,
    )
    links = app.get(CLUSTER_LINKS)
    notices = links.notices if links is not None else cluster_notices(settings, timing)
    await locks.open()
    try:
        await heartbeat.start()
        await notices.start()
        app[CLUSTER] = ClusterParts(replica, locks, heartbeat, notices)
        yield
    finally:
        await notices.stop()
        await heartbeat.stop()
        await locks.close()
