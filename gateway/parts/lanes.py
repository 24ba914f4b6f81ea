"""The lanes turns and runs wait in: ``main`` (chat turns), ``subagent`` (runs) and the
keyed per-session lane; their widths follow reloaded settings."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

from aiohttp import web

from gateway.constants import (
    CLUSTER_SESSION_LANE_WIDTH,
    MAIN_LANE,
    MAIN_LANE_MAX_QUEUED,
    SESSION_LANE,
    SESSION_LANE_MAX_QUEUED,
    SESSION_LANE_WIDTH,
    SUBAGENT_LANE,
)
from gateway.metrics import METRICS
from gateway.parts.agent import CONVERSATIONS
from gateway.parts.cluster import cluster_of, refreshing_guard
from gateway.parts.state import STATE
from gateway.reload import SETTINGS, settings_of
from gateway.settings import HeraldSettings
from lanes import KeyGuard, Lane

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Lanes:
    """``main`` (agent.maxConcurrent), ``subagent`` (agent.subagents.maxConcurrent) and the
    keyed per-session lane; chat lanes bound their queues, the sub-agent lane's queue is the
    runs table (durable, and about 200 bytes a queued run in memory)."""

    main: Lane
    subagent: Lane
    session: Lane

    @classmethod
    def from_settings(
        cls, settings: HeraldSettings, *, session_guard: KeyGuard | None = None
    ) -> Lanes:
        """The lanes; ``session_guard`` (a cluster's session locks) is held around each job
        of the session lane, whose width then is the locks' connection count."""
        width = SESSION_LANE_WIDTH if session_guard is None else CLUSTER_SESSION_LANE_WIDTH
        return cls(
            main=Lane(MAIN_LANE, settings.agent.max_concurrent, max_queued=MAIN_LANE_MAX_QUEUED),
            subagent=Lane(SUBAGENT_LANE, settings.agent.subagents.max_concurrent),
            session=Lane(
                SESSION_LANE, width, max_queued=SESSION_LANE_MAX_QUEUED, key_guard=session_guard
            ),
        )

    def apply(self, settings: HeraldSettings) -> None:
        """Take new widths from reloaded settings."""
        self.main.max_concurrent = settings.agent.max_concurrent
        self.subagent.max_concurrent = settings.agent.subagents.max_concurrent

    def all(self) -> tuple[Lane, ...]:
        return (self.main, self.subagent, self.session)


LANES = web.AppKey("lanes", Lanes)


async def lanes_setup(app: web.Application) -> AsyncIterator[None]:
    """The lanes (in a cluster a session's turns hold its lock on every replica); a reload
    changes their widths now."""
    cluster = cluster_of(app)
    guard = None
    if cluster is not None:
        forget = (app[STATE].sessions.forget, app[CONVERSATIONS].histories.forget)
        guard = refreshing_guard(cluster.locks.guard, *forget)
    lanes = app[LANES] = Lanes.from_settings(settings_of(app), session_guard=guard)
    app[METRICS].watch_lanes(lanes.all())

    def reloaded(old: HeraldSettings, new: HeraldSettings) -> None:
        lanes.apply(new)
        width = new.agent.subagents.max_concurrent
        if new.cluster.database_url is not None and width != old.agent.subagents.max_concurrent:
            # Procrastinate sizes a worker at its start: the lane obeys now, the worker's
            # take of jobs from the shared queue follows at the next start.
            logger.warning(
                "agent.subagents.maxConcurrent: at most this many runs execute here now; "
                "this replica takes that many jobs from the queue after a restart",
                extra={"subagent_lane": width},
            )
        logger.info(
            "config applied",
            extra={
                "main_lane": new.agent.max_concurrent,
                "subagent_lane": new.agent.subagents.max_concurrent,
            },
        )

    app[SETTINGS].subscribe(reloaded)
    try:
        yield
    finally:
        app[SETTINGS].unsubscribe(reloaded)
        for lane in lanes.all():  # idempotent: the drain has shut them down already
            await lane.shutdown(0)
