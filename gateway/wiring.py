"""The gateway's parts and the typed keys they live under on the aiohttp application.

:mod:`gateway.resources` builds each part when its resource starts and stores it here;
:mod:`gateway.app` assembles the application. Nothing reaches a part except through its key.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Hashable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from aiohttp import web

from channels import Channel, ChatCursor, ChatCursors, Leadership, SeenKeys
from channels.reconnecting import Reconnecting
from channels.webchat.jobs import ChatJobs
from channels.webchat.relay import Relay
from gateway.agent import Conversations, ToolContexts, ToolInvoker, TurnFactory
from gateway.api.keys import SESSION_STORE, TOOL_INVOKER
from gateway.archive import ArchiveScheduler
from gateway.cluster import DEAD_AFTER_SECONDS, HEARTBEAT_SECONDS, Heartbeat, QueueTiming
from gateway.constants import (
    CLUSTER_POLL_SECONDS,
    CLUSTER_SESSION_LANE_WIDTH,
    MAIN_LANE,
    MAIN_LANE_MAX_QUEUED,
    SESSION_LANE,
    SESSION_LANE_MAX_QUEUED,
    SESSION_LANE_WIDTH,
    SUBAGENT_LANE,
)
from gateway.delivery import DeliveryListener, Outbox
from gateway.delivery.outbox import BASE_DELAY as OUTBOX_BASE_DELAY
from gateway.delivery.outbox import CLUSTER_POLL_SECONDS as OUTBOX_POLL_SECONDS
from gateway.metrics import Metrics
from gateway.providers import ProviderRegistry, RetryPolicy
from gateway.reload import SettingsHolder
from gateway.runtime import ChatTurns, Router
from gateway.schedules.tool import ScheduleTool
from gateway.sessions import (
    SessionStore,
)
from gateway.settings import HeraldSettings
from gateway.state import StateDB
from gateway.subagents import (
    Announcer,
    BatchCoordinator,
    Completions,
    Notices,
    RunInbox,
    RunManager,
    SpawnDoor,
    Spawner,
    SubagentControl,
    register_orchestration_tools,
    register_session_tools,
)
from gateway.tools import ServiceKey, ToolRegistry, default_registry
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


class ToolBox:
    """The tool registry in force: rebuilt from reloaded settings (limits live in tools).

    Tools that come from outside the settings (MCP servers' tools) are installed again in
    each rebuilt registry by the installers added with :meth:`add_installer`.
    """

    def __init__(self, settings: HeraldSettings) -> None:
        self.current = build_tools(settings)
        self._installers: list[Callable[[ToolRegistry], None]] = []

    def add_installer(self, install: Callable[[ToolRegistry], None]) -> None:
        """Have ``install`` register its tools in every rebuilt registry."""
        self._installers.append(install)

    def rebuild(self, settings: HeraldSettings) -> None:
        registry = build_tools(settings)
        for install in self._installers:
            install(registry)
        self.current = registry

    def get(self) -> ToolRegistry:
        return self.current


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


class SessionLockPool(Protocol):
    """What the wiring needs of :class:`gateway.cluster.locks.SessionLocks` (imported only
    in a cluster, with psycopg)."""

    @property
    def held(self) -> frozenset[str]: ...

    def guard(self, key: Hashable) -> AbstractAsyncContextManager[None]: ...

    async def close(self) -> None: ...


class ClusterNotices(Notices, Protocol):
    """What the wiring needs of :class:`gateway.cluster.notify.PgNotices` (imported only in
    a cluster, with psycopg): the sub-agents' notices, and its connection's life."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


@dataclass(frozen=True, slots=True)
class ClusterParts:
    """This replica's part in a cluster: its name, its session locks, its heartbeat, its
    notices to and from the other replicas."""

    replica_id: str
    locks: SessionLockPool
    heartbeat: Heartbeat
    notices: ClusterNotices


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


@dataclass(frozen=True, slots=True)
class ChatParts:
    turns: ChatTurns
    router: Router


SETTINGS = web.AppKey("settings", SettingsHolder)
CONFIG_DIR = web.AppKey("config_dir", Path)
CHANNELS = web.AppKey("channels", dict[str, Channel])


def channels_of(app: web.Application) -> dict[str, Channel]:
    channels: dict[str, Channel] = app[CHANNELS]
    return channels


METRICS = web.AppKey("metrics", Metrics)
STATE = web.AppKey("state", StateDB)
PROVIDERS = web.AppKey("providers", ProviderRegistry)
TOOLS = web.AppKey("tools", ToolBox)
#: The services session tools reach through their context; filled as they are built.
TOOL_SERVICES = web.AppKey("tool_services", dict[ServiceKey[Any], object])


def tool_services(app: web.Application) -> dict[ServiceKey[Any], object]:
    services: dict[ServiceKey[Any], object] = app[TOOL_SERVICES]
    return services


CONTEXTS = web.AppKey("contexts", ToolContexts)
TURN_FACTORY = web.AppKey("turn_factory", TurnFactory)
CONVERSATIONS = web.AppKey("conversations", Conversations)
LANES = web.AppKey("lanes", Lanes)
ARCHIVE = web.AppKey("archive", ArchiveScheduler)
OUTBOX = web.AppKey("outbox", Outbox)
SUBAGENTS = web.AppKey("subagents", SubagentParts)
CHAT = web.AppKey("chat", ChatParts)
TIMING = web.AppKey("timing", Timing)
#: Set in a cluster only (``cluster.databaseUrl``).
CLUSTER = web.AppKey("cluster", ClusterParts)
DELIVERY_LISTENERS = web.AppKey("delivery_listeners", list[DeliveryListener])


def build_tools(settings: HeraldSettings) -> ToolRegistry:
    """Every tool: the built-ins, then the session tools."""
    registry = default_registry(settings)
    register_session_tools(registry)
    register_orchestration_tools(registry)
    registry.register(ScheduleTool())
    return registry


class StateSeenKeys:
    """The channels' memory of handled events (:class:`channels.replay.SeenKeys`), in the
    state database of ``app``. Channels are built before the database opens, so it is looked
    up at each call; channels receive only after it opened and stop before it closes."""

    def __init__(self, app: web.Application) -> None:
        self._app = app

    async def first_sighting(self, keys: Sequence[str], ttl_seconds: float) -> bool:
        return await self._app[STATE].seen.first_sighting(keys, ttl_seconds)


class StateCursors:
    """The channels' newest message taken per chat (:class:`channels.cursors.ChatCursors`),
    in the state database of ``app``, looked up at each call as :class:`StateSeenKeys`."""

    def __init__(self, app: web.Application) -> None:
        self._app = app

    async def advance(self, cursor: ChatCursor) -> None:
        await self._app[STATE].cursors.advance(cursor)

    async def recent(self, channel: str, account: str, since: float) -> list[ChatCursor]:
        return await self._app[STATE].cursors.recent(channel, account, since)


@dataclass(frozen=True, slots=True)
class ClusterLinks:
    """What channels share with the other replicas of a cluster: the lock of a channel's
    one inbound connection (Discord's gateway) and the web chat's notices (on the
    replica's ``notices``, which the gateway starts and stops)."""

    leadership: Leadership
    relay: Relay
    notices: ClusterNotices


#: What the channels built by the app share with the other replicas (a cluster only).
CLUSTER_LINKS = web.AppKey("cluster_links", ClusterLinks)


def cluster_links(settings: HeraldSettings, timing: Timing) -> ClusterLinks | None:
    """The cluster's links on ``cluster.databaseUrl``; None for a single process (then
    nothing of PostgreSQL is imported)."""
    url = settings.cluster.database_url
    if url is None:
        return None
    from gateway.cluster.leader import PgLeadership
    from gateway.cluster.notify import PgNotices, PgWebchatRelay

    replica = settings.cluster.resolved_replica_id()
    notices = PgNotices(url.get_secret_value(), replica, poll=timing.cluster_poll)
    return ClusterLinks(
        leadership=PgLeadership(url.get_secret_value(), replica, poll=timing.cluster_poll),
        relay=PgWebchatRelay(notices),
        notices=notices,
    )


def cluster_notices(settings: HeraldSettings, timing: Timing) -> ClusterNotices:
    """The replica's notices to and from the others (a cluster's settings only)."""
    from gateway.cluster.notify import PgNotices

    url = settings.cluster.database_url
    if url is None:
        raise ValueError("cluster.databaseUrl: notices need the cluster's database")
    replica = settings.cluster.resolved_replica_id()
    return PgNotices(url.get_secret_value(), replica, poll=timing.cluster_poll)


def build_channels(
    settings: HeraldSettings,
    *,
    seen: SeenKeys | None = None,
    cursors: ChatCursors | None = None,
    cluster: ClusterLinks | None = None,
    jobs: ChatJobs | None = None,
) -> dict[str, Channel]:
    """The enabled channels, not yet started (Slack and Discord retried in the background
    when the network fails them at start); ``seen`` remembers the events they handled,
    ``cursors`` the newest message taken per chat (for Discord's catch-up), ``cluster``
    links them to the other replicas, ``jobs`` shows the web chat its scheduled jobs."""
    channels: dict[str, Channel] = {}
    config = settings.channels
    if config.slack.enabled:
        from channels.slack import SlackChannel

        channels["slack"] = Reconnecting(SlackChannel(config.slack, seen=seen))
    if config.discord.enabled:
        from channels.discord import DiscordChannel

        leadership = cluster.leadership if cluster is not None else None
        channels["discord"] = Reconnecting(
            DiscordChannel(config.discord, leadership=leadership, seen=seen, cursors=cursors)
        )
    if config.webchat.enabled:
        from channels.webchat import WebchatChannel

        history = settings.gateway.resolved_state_dir() / "webchat"
        relay = cluster.relay if cluster is not None else None
        channels["webchat"] = WebchatChannel(
            config.webchat, history_dir=history, relay=relay, jobs=jobs
        )
    return channels


def settings_of(app: web.Application) -> HeraldSettings:
    """The settings in force for ``app`` (reloads included)."""
    return app[SETTINGS].current


class AppParts:
    """The parts of a started app, typed, for code that drives it from outside its handlers
    (tests, benchmarks): each property reads the part's key."""

    def __init__(self, app: web.Application) -> None:
        self.app = app

    @property
    def holder(self) -> SettingsHolder:
        return self.app[SETTINGS]

    @property
    def settings(self) -> HeraldSettings:
        return self.holder.current

    @property
    def db(self) -> StateDB:
        return self.app[STATE]

    @property
    def store(self) -> SessionStore:
        return self.app[SESSION_STORE]

    @property
    def lanes(self) -> Lanes:
        return self.app[LANES]

    @property
    def providers(self) -> ProviderRegistry:
        return self.app[PROVIDERS]

    @property
    def cluster(self) -> ClusterParts | None:
        """This replica's cluster parts (None: not in a cluster)."""
        return self.app.get(CLUSTER)

    @property
    def outbox(self) -> Outbox:
        return self.app[OUTBOX]

    @property
    def archive(self) -> ArchiveScheduler:
        return self.app[ARCHIVE]

    @property
    def channels(self) -> dict[str, Channel]:
        return channels_of(self.app)

    @property
    def metrics(self) -> Metrics:
        return self.app[METRICS]

    @property
    def tools(self) -> ToolRegistry:
        return self.app[TOOLS].current

    @property
    def contexts(self) -> ToolContexts:
        return self.app[CONTEXTS]

    @property
    def turn_factory(self) -> TurnFactory:
        return self.app[TURN_FACTORY]

    @property
    def conversations(self) -> Conversations:
        return self.app[CONVERSATIONS]

    @property
    def invoker(self) -> ToolInvoker:
        return self.app[TOOL_INVOKER]

    @property
    def subagents(self) -> SubagentParts:
        return self.app[SUBAGENTS]

    @property
    def runs(self) -> RunManager:
        return self.app[SUBAGENTS].manager

    @property
    def spawner(self) -> Spawner:
        return self.app[SUBAGENTS].spawner

    @property
    def turns(self) -> ChatTurns:
        return self.app[CHAT].turns

    @property
    def router(self) -> Router:
        return self.app[CHAT].router
