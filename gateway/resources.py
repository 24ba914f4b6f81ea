"""The gateway's resources: one aiohttp ``cleanup_ctx`` generator each, in start-up order.

Each sets up its part before ``yield`` and stores it under its key (:mod:`gateway.wiring`);
teardown runs in reverse by itself::

    state (database, sessions) → cluster (session locks, heartbeat; in a cluster only)
      → providers → tools → lanes → archive → outbox → sub-agents → chat
      → reload listener → channels (connect; then deliveries and recovery start)

A clean stop is :func:`drain`, an ``on_shutdown`` hook that runs before any teardown while
every channel is still connected: stop chat intake and drain turns, finish or park
sub-agent runs, then flush the outbox. Teardown then closes channels, and the rest.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from channels import Channel
from gateway.agent import Conversations, ToolContexts, ToolInvoker, TurnFactory
from gateway.api.keys import (
    RUN_CONTROL,
    RUN_RECORDS,
    SCHEDULES,
    SESSION_STORE,
    TARGET_SESSIONS,
    TOOL_INVOKER,
)
from gateway.archive import ArchiveScheduler
from gateway.cluster import Heartbeat, Reaper
from gateway.delivery import Outbox, Replier
from gateway.mcp.resource import mcp_servers
from gateway.providers import ProviderRegistry
from gateway.runtime import ChatCommands, ChatTurns, InboundReplay, Router
from gateway.schedules.bookkeeping import run_ended as job_run_ended
from gateway.schedules.resource import schedules_resource
from gateway.sessions import SessionStore, accounts_of
from gateway.settings import HeraldSettings
from gateway.state import backend_of, open_state
from gateway.subagents import (
    SESSIONS,
    SPAWNER,
    SUBAGENT_RUNS,
    TURNS,
    YIELDS,
    Announcer,
    BatchCoordinator,
    ChildSessions,
    Completions,
    LaneQueue,
    Owner,
    RunEnds,
    RunFeed,
    RunInbox,
    RunManager,
    RunnerParts,
    SpawnDoor,
    Spawner,
    SubagentControl,
    YieldedRunQueue,
    recover,
    settle_archives,
)
from gateway.tools import ServiceKey
from gateway.wiring import (
    ARCHIVE,
    CHAT,
    CLUSTER,
    CLUSTER_LINKS,
    CONFIG_DIR,
    CONTEXTS,
    CONVERSATIONS,
    DELIVERY_LISTENERS,
    LANES,
    METRICS,
    OUTBOX,
    PROVIDERS,
    SETTINGS,
    STATE,
    SUBAGENTS,
    TIMING,
    TOOL_SERVICES,
    TOOLS,
    TURN_FACTORY,
    ChatParts,
    ClusterParts,
    Lanes,
    SubagentParts,
    ToolBox,
    channels_of,
    cluster_notices,
    refreshing_guard,
    settings_of,
    tool_services,
)

if TYPE_CHECKING:
    from gateway.cluster.queue import ProcrastinateQueue

logger = logging.getLogger(__name__)

#: A resource: an async generator that sets up before ``yield`` and tears down after.
Resource = Callable[[web.Application], AsyncIterator[None]]


async def _state(app: web.Application) -> AsyncIterator[None]:
    settings = settings_of(app)
    state_dir = settings.gateway.resolved_state_dir()
    db = await open_state(settings)
    cluster = settings.cluster.database_url is not None
    replica = settings.cluster.resolved_replica_id() if cluster else None
    store = SessionStore(state_dir, db, replica_id=replica)
    app[STATE] = db
    app[SESSION_STORE] = store
    app[RUN_RECORDS] = db.runs
    services: dict[ServiceKey[Any], object] = {SESSIONS: store}
    app[TOOL_SERVICES] = services
    # The schema version the start ended at (after any migrations it applied).
    extra = {
        "state_dir": str(state_dir),
        "database": backend_of(settings),
        "schema_version": str(db.schema_version),
    }
    if settings.cluster.database_url is not None:
        extra["replica"] = settings.cluster.resolved_replica_id()
    logger.info("state ready", extra=extra)
    try:
        yield
    finally:
        await store.aclose()
        await db.close()


async def _cluster(app: web.Application) -> AsyncIterator[None]:
    """In a cluster: the session locks, this replica's heartbeat (registered before it
    claims anything) and its notices. Nothing without ``cluster.databaseUrl``."""
    settings = settings_of(app)
    url = settings.cluster.database_url
    if url is None:
        yield
        return
    from gateway.cluster.locks import SessionLocks  # psycopg: only in a cluster
    from gateway.constants import CLUSTER_SESSION_LANE_WIDTH

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


async def _providers(app: web.Application) -> AsyncIterator[None]:
    registry = ProviderRegistry(
        settings_of(app).models.providers,
        config_dir=app[CONFIG_DIR],
        retry=app[TIMING].provider_retry,
    )
    app[PROVIDERS] = registry
    try:
        yield
    finally:
        await registry.close()


async def _tools(app: web.Application) -> AsyncIterator[None]:
    holder = app[SETTINGS]
    tools = app[TOOLS] = ToolBox(holder.current)
    app[CONTEXTS] = ToolContexts(holder, tool_services(app))
    app[TOOL_INVOKER] = ToolInvoker(
        holder=holder,
        store=app[SESSION_STORE],
        runs=app[STATE].runs,
        tools=tools.get,
        contexts=app[CONTEXTS],
    )
    app[TURN_FACTORY] = TurnFactory(
        holder=holder,
        store=app[SESSION_STORE],
        providers=app[PROVIDERS],
        tools=tools.get,
        contexts=app[CONTEXTS],
        metrics=app[METRICS],
    )
    app[CONVERSATIONS] = Conversations(app[TURN_FACTORY])
    yield


async def _lanes(app: web.Application) -> AsyncIterator[None]:
    cluster = app.get(CLUSTER)
    guard = None
    if cluster is not None:  # a session's turns hold its lock on every replica
        forget = (app[STATE].sessions.forget, app[CONVERSATIONS].histories.forget)
        guard = refreshing_guard(cluster.locks.guard, *forget)
    lanes = app[LANES] = Lanes.from_settings(settings_of(app), session_guard=guard)
    app[METRICS].watch_lanes(lanes.all())
    try:
        yield
    finally:
        for lane in lanes.all():  # idempotent: the drain has shut them down already
            await lane.shutdown(0)


async def _archive(app: web.Application) -> AsyncIterator[None]:
    archive = app[ARCHIVE] = ArchiveScheduler(
        app[SESSION_STORE],
        archive_after_minutes=settings_of(app).agent.subagents.archive_after_minutes,
    )
    await archive.start()
    cluster = app.get(CLUSTER)
    if cluster is not None:
        cluster.heartbeat.add_reaper(archive.take_over)
    try:
        yield
    finally:
        await archive.shutdown()


async def _outbox(app: web.Application) -> AsyncIterator[None]:
    metrics = app[METRICS]
    cluster, timing, db = app.get(CLUSTER), app[TIMING], app[STATE]
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
    app[STATE].space.subscribe(outbox.kick)  # space is back: deliver what waited for it
    try:
        yield
    finally:
        app[STATE].space.unsubscribe(outbox.kick)
        await outbox.close()


async def _subagents(app: web.Application) -> AsyncIterator[None]:
    holder, db, store = app[SETTINGS], app[STATE], app[SESSION_STORE]
    feed = RunFeed(db.runs, channels_of(app), app[METRICS])
    children = ChildSessions(app[TURN_FACTORY])
    lanes, cluster = app[LANES], app.get(CLUSTER)
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
        final_writes=(job_run_ended,),
    )
    inbox = RunInbox(db, store)
    if cluster is not None:  # runs end, and steers wait, on any replica
        poll = app[TIMING].cluster_poll
        await feed.link(cluster.notices, poll=poll)
        await inbox.link(cluster.notices, poll=poll)
    manager = RunManager(
        db=db,
        lane=app[LANES].subagent,
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
    app[TOOL_SERVICES][SPAWNER] = spawner
    app[TOOL_SERVICES][YIELDS] = batches
    app[TOOL_SERVICES][SUBAGENT_RUNS] = control
    # Space is back after the disk filled: the runs it stranded go on now, without a restart.
    db.space.subscribe(manager.resume_waiting)
    try:
        yield
    finally:
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


async def _chat(app: web.Application) -> AsyncIterator[None]:
    holder, store, subagents = app[SETTINGS], app[SESSION_STORE], app[SUBAGENTS]
    lanes, replier = app[LANES], Replier(channels_of(app))
    turns = ChatTurns(
        conversations=app[CONVERSATIONS],
        session_lane=lanes.session,
        main_lane=lanes.main,
        channels=channels_of(app),
        replier=replier,
        journal=app[STATE].inbound,
    )
    commands = ChatCommands(
        db=app[STATE],
        store=store,
        turns=turns,
        spawner=subagents.spawner,
        runs=subagents.manager,
        contexts=app[CONTEXTS],
        schedules=lambda: app.get(SCHEDULES),
    )
    cluster = app.get(CLUSTER)
    router = Router(
        holder=holder,
        store=store,
        turns=turns,
        commands=commands,
        replier=replier,
        journal=app[STATE].inbound,
        replica_id=cluster.replica_id if cluster is not None else None,
    )
    app[CHAT] = ChatParts(turns, router)
    app[TOOL_SERVICES][TURNS] = turns
    try:
        yield
    finally:
        await turns.close(0)


async def _channels(app: web.Application) -> AsyncIterator[None]:
    router = app[CHAT].router
    started: list[tuple[str, Channel]] = []
    reapers: list[Reaper] = []
    cluster = app.get(CLUSTER)
    try:
        for name, channel in channels_of(app).items():
            started.append((name, channel))
            await channel.start(router.handle_inbound)
            logger.info("channel connected", extra={"channel": name})
        # Deliveries and recovered runs need their chats: start them once channels are up,
        # or an announce for a channel still connecting would fail as "not started".
        await app[OUTBOX].start()
        subagents = app[SUBAGENTS]
        # Before runs resume: a run a stopped gateway's wait still holds would end unheard.
        await subagents.control.recover()
        await recover(
            holder=app[SETTINGS],
            db=app[STATE],
            manager=subagents.manager,
            announcer=subagents.announcer,
        )
        await subagents.completions.recover()
        await subagents.batches.recover()
        replay_inbound = await _replay_inbound(app)
        if cluster is not None:  # from here on, this replica takes up what dead ones left
            reapers += [
                subagents.control.take_over,
                subagents.completions.take_over,
                subagents.batches.take_over,
                replay_inbound,
            ]
            for reaper in reapers:
                cluster.heartbeat.add_reaper(reaper)
        # Last: in a cluster, this replica takes runs from the shared queue from here on.
        await subagents.manager.start()
        logger.info("gateway ready")
        yield
    finally:
        if cluster is not None:
            for reaper in reapers:
                cluster.heartbeat.remove_reaper(reaper)
        for name, channel in reversed(started):
            try:
                await channel.stop()
            except Exception:
                logger.exception("channel stop failed", extra={"channel": name})
            logger.info("channel stopped", extra={"channel": name})


async def _replay_inbound(app: web.Application) -> Reaper:
    """Run the turns of chat messages a killed gateway took but never turned; returns what,
    in a cluster, takes over those of replicas that die later (after each heartbeat)."""
    cluster = app.get(CLUSTER)
    replay = InboundReplay(
        journal=app[STATE].inbound,
        router=app[CHAT].router,
        store=app[SESSION_STORE],
        replica_id=cluster.replica_id if cluster is not None else None,
    )
    await replay.recover(cluster.heartbeat.cutoff() if cluster is not None else None)
    return replay.take_over


async def drain(app: web.Application) -> None:
    """A clean stop, while channels are up: stop intake and drain turns, finish or park
    runs, then deliver what is due. Each step is bounded by ``shutdownDrainSeconds``."""
    if CHAT not in app:  # start-up did not get this far: nothing runs
        return
    drain = settings_of(app).gateway.shutdown_drain_seconds
    await app[CHAT].turns.close(drain)
    await app[SUBAGENTS].manager.close(drain)
    await app[OUTBOX].flush(drain)
    logger.info("drained")


async def _reload(app: web.Application) -> AsyncIterator[None]:
    """Apply reloaded settings (SIGHUP): lane widths now; tools, providers and the archive
    delay for what starts next."""
    holder = app[SETTINGS]
    pending: set[asyncio.Task[None]] = set()

    async def archive_changed(minutes: float) -> None:
        try:
            await app[ARCHIVE].reconfigure(minutes)
            if minutes > 0:
                await settle_archives(holder, app[STATE], app[SUBAGENTS].announcer)
        except Exception:
            logger.exception("applying archiveAfterMinutes failed")

    def apply(old: HeraldSettings, new: HeraldSettings) -> None:
        app[LANES].apply(new)
        width = new.agent.subagents.max_concurrent
        if new.cluster.database_url is not None and width != old.agent.subagents.max_concurrent:
            # Procrastinate sizes a worker at its start: the lane obeys now, the worker's
            # take of jobs from the shared queue follows at the next start.
            logger.warning(
                "agent.subagents.maxConcurrent: at most this many runs execute here now; "
                "this replica takes that many jobs from the queue after a restart",
                extra={"subagent_lane": width},
            )
        app[TOOLS].rebuild(new)
        if old.models != new.models:
            app[PROVIDERS].reconfigure(new.models.providers)
        minutes = new.agent.subagents.archive_after_minutes
        if minutes != old.agent.subagents.archive_after_minutes:
            task = asyncio.ensure_future(archive_changed(minutes))
            pending.add(task)
            task.add_done_callback(pending.discard)
        logger.info(
            "config applied",
            extra={
                "main_lane": new.agent.max_concurrent,
                "subagent_lane": new.agent.subagents.max_concurrent,
            },
        )

    holder.subscribe(apply)
    try:
        yield
    finally:
        holder.unsubscribe(apply)
        await asyncio.gather(*pending, return_exceptions=True)


#: Every resource, in start-up order.
async def _frozen_heap(app: web.Application) -> AsyncIterator[None]:
    """Exempt what start-up built from the collector while the gateway runs.

    Modules, settings, schemas, routes and every resource live as long as the process, yet
    each full collection would walk them again; with thousands of runs queued such a
    collection paused the event loop for tens of milliseconds (the spawn benchmark's p99).
    Unfrozen at teardown, so a process that builds many apps (the tests) leaks nothing.
    """
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


RESOURCES: tuple[Resource, ...] = (
    _state,
    _cluster,
    _providers,
    _tools,
    mcp_servers,
    _lanes,
    _archive,
    _outbox,
    _subagents,
    _chat,
    _reload,
    _channels,
    schedules_resource,
    _frozen_heap,
)
