"""The chat runtime in the gateway: chat turns and the router (:data:`CHAT`), the channels
connected once everything they deliver to is up, and the clean stop (:func:`drain`)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

from aiohttp import web

from channels import Channel
from gateway.cluster import Reaper
from gateway.delivery import Replier
from gateway.parts.agent import CONTEXTS, CONVERSATIONS, TOOL_SERVICES
from gateway.parts.channels import channels_of
from gateway.parts.cluster import cluster_of
from gateway.parts.delivery import OUTBOX
from gateway.parts.lanes import LANES
from gateway.parts.state import SESSION_STORE, STATE
from gateway.reload import SETTINGS, settings_of
from gateway.runtime.chat_commands import ChatCommands
from gateway.runtime.inbound import InboundReplay
from gateway.runtime.router import Router
from gateway.runtime.turns import ChatTurns
from gateway.schedules.setup import SCHEDULES
from gateway.subagents.recovery import recover
from gateway.subagents.setup import SUBAGENTS
from gateway.subagents.tools import TURNS

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ChatParts:
    turns: ChatTurns
    router: Router


CHAT = web.AppKey("chat", ChatParts)


async def chat_setup(app: web.Application) -> AsyncIterator[None]:
    """Chat turns, the chat commands and the router inbound messages go through."""
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
    cluster = cluster_of(app)
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


async def channels_setup(app: web.Application) -> AsyncIterator[None]:
    """Connect the channels; then deliveries start and what a previous process left
    resumes (they need their chats), and last the manager takes runs."""
    router = app[CHAT].router
    started: list[tuple[str, Channel]] = []
    reapers: list[Reaper] = []
    cluster = cluster_of(app)
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
    cluster = cluster_of(app)
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
