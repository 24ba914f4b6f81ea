"""Sub-agent runs in the gateway: their parts built once each, in the order they use one
another, under :data:`SUBAGENTS`; the services the session tools reach; the archive delay a
reload changes; and, in a cluster, the ``subagent`` lane's queue shared by the replicas."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from aiohttp import web

from gateway.metrics import METRICS
from gateway.parts.agent import CONTEXTS, CONVERSATIONS, TOOL_SERVICES, TURN_FACTORY
from gateway.parts.channels import TARGET_SESSIONS, channels_of
from gateway.parts.cluster import cluster_of
from gateway.parts.delivery import ARCHIVE, OUTBOX
from gateway.parts.lanes import LANES
from gateway.parts.state import SESSION_STORE, STATE
from gateway.parts.timing import TIMING
from gateway.reload import SETTINGS, settings_of
from gateway.sessions import accounts_of
from gateway.settings import HeraldSettings
from gateway.subagents.announce import Announcer, FinalWrite
from gateway.subagents.batches import BatchCoordinator
from gateway.subagents.child import ChildSessions
from gateway.subagents.completions import Completions
from gateway.subagents.control import SubagentControl
from gateway.subagents.door import SpawnDoor
from gateway.subagents.ends import RunEnds
from gateway.subagents.feed import RunFeed
from gateway.subagents.inbox import RunInbox
from gateway.subagents.manager import RunManager, StoppedTree
from gateway.subagents.orchestration import SUBAGENT_RUNS, YIELDS
from gateway.subagents.owner import Owner
from gateway.subagents.queueing import LaneQueue, YieldedRunQueue
from gateway.subagents.recovery import settle_archives
from gateway.subagents.runner import RunnerParts
from gateway.subagents.spawn import Spawner
from gateway.subagents.tools import SESSIONS, SPAWNER

if TYPE_CHECKING:
    from gateway.cluster.queue import ProcrastinateQueue

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SubagentParts:
    manager: RunManager
    spawner: Spawner
    announcer: Announcer
    completions: Completions
    batches: BatchCoordinator
    control: SubagentControl
    inbox: RunInbox
    door: SpawnDoor


class RunControl(Protocol):
    """Stopping a run and every run under it (:class:`RunManager`)."""

    async def abort_tree(self, run_id: str) -> StoppedTree: ...


SUBAGENTS = web.AppKey("subagents", SubagentParts)
#: Writes a run's final transaction also makes (:data:`FinalWrite`), registered by the
#: capabilities set up before the sub-agents: the schedules' bookkeeping of a job's runs.
FINAL_WRITES = web.AppKey("final_writes", tuple[FinalWrite, ...])
#: What the API and Herald's MCP server stop runs with.
RUN_CONTROL = web.AppKey("run_control", RunControl)


def subagents_of(app: web.Application) -> SubagentParts:
    return app[SUBAGENTS]


async def subagents_setup(app: web.Application) -> AsyncIterator[None]:
    """Every part of sub-agent runs; the manager starts taking runs once the channels are up
    (the chat runtime starts it)."""
    holder, db, store = app[SETTINGS], app[STATE], app[SESSION_STORE]
    feed = RunFeed(db.runs, channels_of(app), app[METRICS])
    children = ChildSessions(app[TURN_FACTORY])
    lanes, cluster = app[LANES], cluster_of(app)
    # In a cluster the holds, completions and follow-ups this replica takes carry its id.
    owner = Owner(cluster.replica_id if cluster is not None else None)
    turns = app[TURN_FACTORY].turns
    # Built once each, in the order they use one another; the manager makes its runner.
    queue = await _cluster_queue(app)
    run_queue = queue if queue is not None else LaneQueue()
    completions = Completions(
        db=db,
        store=store,
        conversations=app[CONVERSATIONS],
        session_lane=lanes.session,
        owner=owner,
    )
    batches = BatchCoordinator(
        db=db,
        store=store,
        conversations=app[CONVERSATIONS],
        session_lane=lanes.session,
        main_lane=lanes.main,
        outbox=app[OUTBOX],
        runs=YieldedRunQueue(db, run_queue),
        owner=owner,
    )
    ends = RunEnds(db=db, batches=batches, completions=completions)
    final_writes: tuple[FinalWrite, ...] = app.get(FINAL_WRITES, ())
    announcer = Announcer(
        holder=holder,
        db=db,
        store=store,
        children=children,
        outbox=app[OUTBOX],
        archive=app[ARCHIVE],
        feed=feed,
        metrics=app[METRICS],
        results=ends,
        turns=turns,
        owner=owner,
        final_writes=final_writes,
    )
    inbox = RunInbox(db, store)
    if cluster is not None:  # runs end, and steers wait, on any replica
        poll = app[TIMING].cluster_poll
        await feed.link(cluster.notices, poll=poll)
        await inbox.link(cluster.notices, poll=poll)
    manager = RunManager(
        db=db,
        lane=lanes.subagent,
        runner=RunnerParts(
            db=db,
            store=store,
            children=children,
            announcer=announcer,
            feed=feed,
            inbox=inbox,
            completions=completions,
            batches=batches,
            turns=turns,
        ),
        feed=feed,
        queue=run_queue,
        on_restart=lambda: holder.current.agent.subagents.on_restart,
    )
    spawner = Spawner(
        holder=holder,
        db=db,
        store=store,
        manager=manager,
        feed=feed,
        spawning=completions.spawned,
    )
    door = SpawnDoor(
        holder=holder,
        store=store,
        contexts=app[CONTEXTS],
        spawner=spawner,
        accounts=lambda: accounts_of(channels_of(app)),
    )
    app[TARGET_SESSIONS] = door.chat_session
    control = SubagentControl(
        db=db,
        manager=manager,
        inbox=inbox,
        feed=feed,
        outbox=app[OUTBOX],
        results=ends,
        turns=turns,
        owner=owner,
    )
    app[SUBAGENTS] = SubagentParts(
        manager, spawner, announcer, completions, batches, control, inbox, door
    )
    app[RUN_CONTROL] = manager
    services = app[TOOL_SERVICES]
    services[SESSIONS] = store
    services[SPAWNER] = spawner
    services[YIELDS] = batches
    services[SUBAGENT_RUNS] = control
    # Space is back after the disk filled: the runs it stranded go on now, without a restart.
    db.space.subscribe(manager.resume_waiting)
    pending: set[asyncio.Task[None]] = set()

    async def archive_changed(minutes: float) -> None:
        try:
            await app[ARCHIVE].reconfigure(minutes)
            if minutes > 0:
                await settle_archives(holder, db, announcer)
        except Exception:
            logger.exception("applying archiveAfterMinutes failed")

    def reloaded(old: HeraldSettings, new: HeraldSettings) -> None:
        # For what starts next: runs archive after the new delay, those overdue now.
        minutes = new.agent.subagents.archive_after_minutes
        if minutes != old.agent.subagents.archive_after_minutes:
            task = asyncio.ensure_future(archive_changed(minutes))
            pending.add(task)
            task.add_done_callback(pending.discard)

    holder.subscribe(reloaded)
    try:
        yield
    finally:
        holder.unsubscribe(reloaded)
        await asyncio.gather(*pending, return_exceptions=True)
        db.space.unsubscribe(manager.resume_waiting)
        feed.unlink()
        inbox.unlink()
        await manager.close(0)  # idempotent: the drain has closed it already
        batches.close()
        completions.close()
        if queue is not None:
            await queue.aclose()


async def _cluster_queue(app: web.Application) -> ProcrastinateQueue | None:
    """With ``cluster.databaseUrl``: the ``subagent`` lane's queue shared by the replicas
    (procrastinate, imported only then), its pool open; else None (the lane alone)."""
    settings = settings_of(app)
    url = settings.cluster.database_url
    if url is None:
        return None
    from gateway.cluster.queue import ProcrastinateQueue

    queue = ProcrastinateQueue(
        url.get_secret_value(),
        width=settings.agent.subagents.max_concurrent,
        replica_id=settings.cluster.resolved_replica_id(),
        timing=app[TIMING].queue,
    )
    await queue.open()
    return queue
