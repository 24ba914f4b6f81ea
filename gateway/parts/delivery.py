"""The outbox (durable sends to chats) and the archive of sub-agent transcripts."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from aiohttp import web

from gateway.archive import ArchiveScheduler
from gateway.delivery import DeliveryListener, Outbox
from gateway.metrics import METRICS
from gateway.parts.channels import channels_of
from gateway.parts.cluster import cluster_of
from gateway.parts.state import SESSION_STORE, STATE
from gateway.parts.timing import TIMING
from gateway.reload import settings_of

logger = logging.getLogger(__name__)

OUTBOX = web.AppKey("outbox", Outbox)
#: Who hears of every announce delivered or failed for good (besides the metrics).
DELIVERY_LISTENERS = web.AppKey("delivery_listeners", list[DeliveryListener])
ARCHIVE = web.AppKey("archive", ArchiveScheduler)


async def archive_setup(app: web.Application) -> AsyncIterator[None]:
    """The archive scheduler; in a cluster it takes over a dead replica's archives."""
    archive = app[ARCHIVE] = ArchiveScheduler(
        app[SESSION_STORE],
        archive_after_minutes=settings_of(app).agent.subagents.archive_after_minutes,
    )
    await archive.start()
    cluster = cluster_of(app)
    if cluster is not None:
        cluster.heartbeat.add_reaper(archive.take_over)
    try:
        yield
    finally:
        await archive.shutdown()


async def outbox_setup(app: web.Application) -> AsyncIterator[None]:
    """The outbox (started once the channels are up: its sends need their chats)."""
    metrics = app[METRICS]
    cluster, timing, db = cluster_of(app), app[TIMING], app[STATE]
    outbox = Outbox(
        db,
        channels_of(app),
        base_delay=timing.outbox_base_delay,
        replica_id=cluster.replica_id if cluster is not None else None,
        poll_seconds=timing.outbox_poll_seconds if cluster is not None else None,
    )
    app[OUTBOX] = outbox
    if cluster is not None:

        async def reopen_dead(cutoff: float) -> None:
            if await db.outbox.reopen_dead(cutoff):
                logger.warning("outbox: sends of a dead replica reopened; asking their chats")
                outbox.kick()

        cluster.heartbeat.add_reaper(reopen_dead)
    outbox.subscribe(metrics.outbox_listener)
    for listener in app[DELIVERY_LISTENERS]:
        outbox.subscribe(listener)
    outbox.on_retry = lambda: metrics.announce_delivery("retry")
    db.space.subscribe(outbox.kick)  # space is back: deliver what waited for it
    try:
        yield
    finally:
        db.space.unsubscribe(outbox.kick)
        await outbox.close()
