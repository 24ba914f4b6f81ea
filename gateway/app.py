"""The daemon, wired in one place.

:func:`build_app` makes the aiohttp application: middlewares, routes, the enabled channels
(built now so they can add their routes) and one ``cleanup_ctx`` generator per resource,
each storing what it makes under a typed ``web.AppKey``. Start-up runs them in order and
teardown runs in reverse by itself::

    state (database, sessions) → providers → tools → lanes → archive → outbox
      → sub-agents → chat → reload listener → channels (connect; then deliveries and
      recovery start)

A clean stop is one ``on_shutdown`` hook that runs before any teardown, while every channel
is still connected: stop chat intake and drain turns, finish or park sub-agent runs, then
flush the outbox. Teardown then closes channels, and the rest in reverse.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from channels import Channel
from gateway.agent import ToolContexts, ToolInvoker
from gateway.api.auth import auth_middleware
from gateway.api.errors import error_middleware
from gateway.api.keys import (
    READINESS,
    RUN_CONTROL,
    RUN_RECORDS,
    SCRAPE,
    SESSION_STORE,
    TOOL_INVOKER,
)
from gateway.api.origin import origin_middleware
from gateway.api.routes import route_defs
from gateway.archive import ArchiveScheduler
from gateway.constants import (
    MAIN_LANE,
    MAIN_LANE_MAX_QUEUED,
    SESSION_LANE,
    SESSION_LANE_MAX_QUEUED,
    SESSION_LANE_WIDTH,
    STATE_DB_NAME,
    SUBAGENT_LANE,
)
from gateway.delivery import DeliveryListener, Outbox, Replier
from gateway.delivery.outbox import BASE_DELAY as OUTBOX_BASE_DELAY
from gateway.metrics import Metrics
from gateway.providers import ProviderRegistry, RetryPolicy
from gateway.reload import SettingsHolder
from gateway.runtime import ChatCommands, ChatTurns, Router
from gateway.sessions import SessionStore
from gateway.settings import HeraldSettings
from gateway.state import StateDB
from gateway.subagents import (
    SESSIONS,
    SPAWNER,
    TURNS,
    Announcer,
    ChildSessions,
    RunFeed,
    RunManager,
    RunRunner,
    Spawner,
    recover,
    register_session_tools,
    settle_archives,
)
from gateway.tools import ServiceKey, ToolRegistry, default_registry
from lanes import Lane

logger = logging.getLogger(__name__)

#: A resource: an async generator that sets up before ``yield`` and tears down after.
Resource = Callable[[web.Application], AsyncIterator[None]]


@dataclass(frozen=True, slots=True)
class Lanes:
    """``main`` (agent.maxConcurrent), ``subagent`` (agent.subagents.maxConcurrent) and the
    keyed per-session lane; chat lanes bound their queues, the sub-agent lane's queue is the
    runs table (durable, and about 200 bytes a queued run in memory)."""

    main: Lane
    subagent: Lane
    session: Lane

    @classmethod
    def from_settings(cls, settings: HeraldSettings) -> Lanes:
        return cls(
            main=Lane(MAIN_LANE, settings.agent.max_concurrent, max_queued=MAIN_LANE_MAX_QUEUED),
            subagent=Lane(SUBAGENT_LANE, settings.agent.subagents.max_concurrent),
            session=Lane(SESSION_LANE, SESSION_LANE_WIDTH, max_queued=SESSION_LANE_MAX_QUEUED),
        )

    def apply(self, settings: HeraldSettings) -> None:
        """Take new widths from reloaded settings."""
        self.main.max_concurrent = settings.agent.max_concurrent
        self.subagent.max_concurrent = settings.agent.subagents.max_concurrent

    def all(self) -> tuple[Lane, ...]:
        return (self.main, self.subagent, self.session)


class ToolBox:
    """The tool registry in force: rebuilt from reloaded settings (limits live in tools)."""

    def __init__(self, settings: HeraldSettings) -> None:
        self.current = build_tools(settings)

    def rebuild(self, settings: HeraldSettings) -> None:
        self.current = build_tools(settings)

    def get(self) -> ToolRegistry:
        return self.current


@dataclass(frozen=True, slots=True)
class Timing:
    """Retry timing that is not configuration: tests and benchmarks make retries quick."""

    outbox_base_delay: float = OUTBOX_BASE_DELAY
    provider_retry: RetryPolicy | None = None


@dataclass(frozen=True, slots=True)
class SubagentParts:
    manager: RunManager
    spawner: Spawner
    announcer: Announcer


@dataclass(frozen=True, slots=True)
class ChatParts:
    turns: ChatTurns
    router: Router


@dataclass(frozen=True, slots=True)
class _Scrape:
    """What a ``/metrics`` scrape reads."""

    db: StateDB
    lanes: Lanes
    channels: Mapping[str, Channel]
    metrics: Metrics


SETTINGS = web.AppKey("settings", SettingsHolder)
CONFIG_DIR = web.AppKey("config_dir", Path)
CHANNELS = web.AppKey("channels", dict[str, Channel])


def _channels_of(app: web.Application) -> dict[str, Channel]:
    channels: dict[str, Channel] = app[CHANNELS]
    return channels


METRICS = web.AppKey("metrics", Metrics)
STATE = web.AppKey("state", StateDB)
PROVIDERS = web.AppKey("providers", ProviderRegistry)
TOOLS = web.AppKey("tools", ToolBox)
#: The services session tools reach through their context; filled as they are built.
TOOL_SERVICES = web.AppKey("tool_services", dict[ServiceKey[Any], object])


def _tool_services(app: web.Application) -> dict[ServiceKey[Any], object]:
    services: dict[ServiceKey[Any], object] = app[TOOL_SERVICES]
    return services


CONTEXTS = web.AppKey("contexts", ToolContexts)
LANES = web.AppKey("lanes", Lanes)
ARCHIVE = web.AppKey("archive", ArchiveScheduler)
OUTBOX = web.AppKey("outbox", Outbox)
SUBAGENTS = web.AppKey("subagents", SubagentParts)
CHAT = web.AppKey("chat", ChatParts)
TIMING = web.AppKey("timing", Timing)
DELIVERY_LISTENERS = web.AppKey("delivery_listeners", list[DeliveryListener])


def build_tools(settings: HeraldSettings) -> ToolRegistry:
    """Every tool: the built-ins, then the session tools."""
    registry = default_registry(settings)
    register_session_tools(registry)
    return registry


def build_channels(settings: HeraldSettings) -> dict[str, Channel]:
    """The enabled channels, not yet started."""
    channels: dict[str, Channel] = {}
    config = settings.channels
    if config.slack.enabled:
        from channels.slack import SlackChannel

        channels["slack"] = SlackChannel(config.slack)
    if config.discord.enabled:
        from channels.discord import DiscordChannel

        channels["discord"] = DiscordChannel(config.discord)
    if config.webchat.enabled:
        from channels.webchat import WebchatChannel

        history = settings.gateway.resolved_state_dir() / "webchat"
        channels["webchat"] = WebchatChannel(config.webchat, history_dir=history)
    return channels


def _token_getter(holder: SettingsHolder) -> Callable[[], str | None]:
    def get() -> str | None:
        token = holder.current.gateway.auth.token
        return token.get_secret_value() or None if token is not None else None

    return get


def build_app(
    holder: SettingsHolder,
    *,
    config_dir: Path | None = None,
    channels: dict[str, Channel] | None = None,
    timing: Timing | None = None,
    delivery_listeners: Sequence[DeliveryListener] = (),
) -> web.Application:
    """The gateway's aiohttp application with every route and resource registered.

    ``channels`` replaces the enabled channels of the settings (tests use an in-memory
    one); ``delivery_listeners`` hear of every announce delivered or failed for good.
    """
    token = _token_getter(holder)
    app = web.Application(
        middlewares=[
            error_middleware,
            origin_middleware(lambda: holder.current.gateway.host, lambda: token() is not None),
            auth_middleware(token),
        ]
    )
    app[SETTINGS] = holder
    app[CONFIG_DIR] = config_dir or Path.cwd()
    app[METRICS] = Metrics()
    app[TIMING] = timing or Timing()
    app[DELIVERY_LISTENERS] = list(delivery_listeners)
    app[CHANNELS] = build_channels(holder.current) if channels is None else channels
    # Before the channels' own hooks (the web chat closes its sockets in one), so that the
    # drain delivers while every channel is still connected.
    app.on_shutdown.append(_drain)
    for channel in app[CHANNELS].values():
        channel.add_routes(app)

    def readiness() -> dict[str, bool]:
        return {name: channel.connected for name, channel in app[CHANNELS].items()}

    def scrape() -> _Scrape:
        return _Scrape(app[STATE], app[LANES], _channels_of(app), app[METRICS])

    app[READINESS] = readiness
    app[SCRAPE] = scrape
    app.add_routes(route_defs())
    app.cleanup_ctx.extend(
        [
            _state,
            _providers,
            _tools,
            _lanes,
            _archive,
            _outbox,
            _subagents,
            _chat,
            _reload,
            _channels,
        ]
    )
    return app


def settings_of(app: web.Application) -> HeraldSettings:
    """The settings in force for ``app`` (reloads included)."""
    return app[SETTINGS].current


# -- resources, in start-up order ----------------------------------------------------------


async def _state(app: web.Application) -> AsyncIterator[None]:
    state_dir = settings_of(app).gateway.resolved_state_dir()
    db = await StateDB.open(state_dir / STATE_DB_NAME)
    store = SessionStore(state_dir, db)
    app[STATE] = db
    app[SESSION_STORE] = store
    app[RUN_RECORDS] = db.runs
    services: dict[ServiceKey[Any], object] = {SESSIONS: store}
    app[TOOL_SERVICES] = services
    logger.info("state ready", extra={"state_dir": str(state_dir)})
    try:
        yield
    finally:
        await store.aclose()
        await db.close()


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
    app[CONTEXTS] = ToolContexts(holder, _tool_services(app))
    app[TOOL_INVOKER] = ToolInvoker(
        holder=holder,
        store=app[SESSION_STORE],
        runs=app[STATE].runs,
        tools=tools.get,
        contexts=app[CONTEXTS],
    )
    yield


async def _lanes(app: web.Application) -> AsyncIterator[None]:
    lanes = app[LANES] = Lanes.from_settings(settings_of(app))
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
    try:
        yield
    finally:
        await archive.shutdown()


async def _outbox(app: web.Application) -> AsyncIterator[None]:
    metrics = app[METRICS]
    outbox = Outbox(app[STATE], _channels_of(app), base_delay=app[TIMING].outbox_base_delay)
    app[OUTBOX] = outbox
    outbox.subscribe(metrics.outbox_listener)
    for listener in app[DELIVERY_LISTENERS]:
        outbox.subscribe(listener)
    outbox.on_retry = lambda: metrics.announce_delivery("retry")
    try:
        yield
    finally:
        await outbox.close()


async def _subagents(app: web.Application) -> AsyncIterator[None]:
    holder, db, store = app[SETTINGS], app[STATE], app[SESSION_STORE]
    feed = RunFeed(db.runs, _channels_of(app), app[METRICS])
    children = ChildSessions(
        holder, store, app[PROVIDERS], app[TOOLS].get, app[CONTEXTS], app[METRICS]
    )
    announcer = Announcer(
        holder=holder,
        db=db,
        store=store,
        children=children,
        outbox=app[OUTBOX],
        archive=app[ARCHIVE],
        feed=feed,
        metrics=app[METRICS],
    )
    runner = RunRunner(db=db, store=store, children=children, announcer=announcer, feed=feed)
    manager = RunManager(
        db=db, lane=app[LANES].subagent, runner=runner, announcer=announcer, feed=feed
    )
    spawner = Spawner(holder=holder, db=db, store=store, manager=manager, feed=feed)
    app[SUBAGENTS] = SubagentParts(manager, spawner, announcer)
    app[RUN_CONTROL] = manager
    app[TOOL_SERVICES][SPAWNER] = spawner
    try:
        yield
    finally:
        await manager.close(0)  # idempotent: the drain has closed it already


async def _chat(app: web.Application) -> AsyncIterator[None]:
    holder, store, subagents = app[SETTINGS], app[SESSION_STORE], app[SUBAGENTS]
    lanes, replier = app[LANES], Replier(_channels_of(app))
    turns = ChatTurns(
        holder=holder,
        store=store,
        providers=app[PROVIDERS],
        tools=app[TOOLS].get,
        contexts=app[CONTEXTS],
        session_lane=lanes.session,
        main_lane=lanes.main,
        channels=_channels_of(app),
        replier=replier,
        metrics=app[METRICS],
    )
    commands = ChatCommands(
        db=app[STATE],
        store=store,
        turns=turns,
        spawner=subagents.spawner,
        runs=subagents.manager,
        contexts=app[CONTEXTS],
    )
    router = Router(holder=holder, store=store, turns=turns, commands=commands, replier=replier)
    app[CHAT] = ChatParts(turns, router)
    app[TOOL_SERVICES][TURNS] = turns
    try:
        yield
    finally:
        await turns.close(0)


async def _channels(app: web.Application) -> AsyncIterator[None]:
    router = app[CHAT].router
    started: list[tuple[str, Channel]] = []
    try:
        for name, channel in _channels_of(app).items():
            started.append((name, channel))
            await channel.start(router.handle_inbound)
            logger.info("channel connected", extra={"channel": name})
        # Deliveries and recovered runs need their chats: start them once channels are up,
        # or an announce for a channel still connecting would fail as "not started".
        await app[OUTBOX].start()
        subagents = app[SUBAGENTS]
        await recover(
            holder=app[SETTINGS],
            db=app[STATE],
            manager=subagents.manager,
            announcer=subagents.announcer,
        )
        logger.info("gateway ready")
        yield
    finally:
        for name, channel in reversed(started):
            try:
                await channel.stop()
            except Exception:
                logger.exception("channel stop failed", extra={"channel": name})
            logger.info("channel stopped", extra={"channel": name})


# -- stopping and reloading ---------------------------------------------------------------


async def _drain(app: web.Application) -> None:
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
