"""The gateway's aiohttp application, assembled in one place.

:func:`build_app` adds the middlewares, the routes, the enabled channels (built now so
they can add their routes) and every resource of :mod:`gateway.resources`, whose parts live
under the typed keys of the part or capability that owns each. :class:`AppParts` reads
them, typed, for code that drives a started app from outside (tests, benchmarks).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from channels import Channel, ChannelState
from gateway.agent import Conversations, ToolContexts, ToolInvoker, TurnFactory
from gateway.api.auth import auth_middleware, configured_token, token_required
from gateway.api.errors import error_middleware
from gateway.api.keys import DATABASE, DISK_FULL, MCP_PATH, MCP_STATES, READINESS, SCRAPE
from gateway.api.origin import origin_middleware
from gateway.api.routes import route_defs
from gateway.archive import ArchiveScheduler
from gateway.catalog import build_tools
from gateway.delivery import DeliveryListener, Outbox
from gateway.mcp.setup import mcp_states
from gateway.metrics import METRICS, Metrics
from gateway.parts.agent import (
    CONTEXTS,
    CONVERSATIONS,
    PROVIDERS,
    TOOL_CATALOG,
    TOOL_INVOKER,
    TOOLS,
    TURN_FACTORY,
)
from gateway.parts.channels import (
    CHANNELS,
    StateCursors,
    StateSeenKeys,
    build_channels,
    channels_of,
)
from gateway.parts.cluster import CLUSTER, CLUSTER_LINKS, ClusterParts, cluster_links
from gateway.parts.delivery import ARCHIVE, DELIVERY_LISTENERS, OUTBOX
from gateway.parts.lanes import LANES, Lanes
from gateway.parts.state import SESSION_STORE, STATE
from gateway.parts.timing import TIMING, Timing
from gateway.providers import ProviderRegistry
from gateway.reload import CONFIG_DIR, SETTINGS, SettingsHolder
from gateway.resources import RESOURCES
from gateway.runtime import ChatTurns, Router
from gateway.runtime.setup import CHAT, drain
from gateway.schedules.webchat import WebchatJobs
from gateway.sessions import SessionStore
from gateway.settings import HeraldSettings
from gateway.state import StateDB, database_reachable
from gateway.subagents import RunManager, Spawner
from gateway.subagents.setup import SUBAGENTS, SubagentParts
from gateway.tools import ToolRegistry

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _Scrape:
    """What a ``/metrics`` scrape reads."""

    db: StateDB
    lanes: Lanes
    channels: Mapping[str, Channel]
    metrics: Metrics


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

    def token() -> str | None:
        return configured_token(holder.current)

    app = web.Application(
        middlewares=[
            error_middleware,
            origin_middleware(lambda: holder.current.gateway.host, lambda: token() is not None),
            auth_middleware(token),
        ]
    )
    app[SETTINGS] = holder
    app[CONFIG_DIR] = config_dir or Path.cwd()
    cluster = holder.current.cluster
    app[METRICS] = Metrics(
        replica=cluster.resolved_replica_id() if cluster.database_url is not None else None
    )
    app[TIMING] = timing or Timing()
    app[TOOL_CATALOG] = build_tools
    app[DELIVERY_LISTENERS] = list(delivery_listeners)
    if channels is None:
        links = cluster_links(holder.current, app[TIMING])
        if links is not None:
            app[CLUSTER_LINKS] = links
        channels = build_channels(
            holder.current,
            seen=StateSeenKeys(app),
            cursors=StateCursors(app),
            cluster=links,
            jobs=WebchatJobs(app),
        )
    app[CHANNELS] = channels
    # Before the channels' own hooks (the web chat closes its sockets in one), so that the
    # drain delivers while every channel is still connected.
    app.on_shutdown.append(drain)
    for channel in app[CHANNELS].values():
        channel.add_routes(app)

    def readiness() -> dict[str, ChannelState]:
        return {name: channel.connection_state for name, channel in app[CHANNELS].items()}

    def scrape() -> _Scrape:
        return _Scrape(app[STATE], app[LANES], channels_of(app), app[METRICS])

    async def database() -> bool | None:
        return await database_reachable(app[STATE]) if STATE in app else None

    def disk_full() -> bool:
        return STATE in app and app[STATE].space.full

    app[READINESS] = readiness
    app[DATABASE] = database
    app[DISK_FULL] = disk_full
    app[SCRAPE] = scrape
    app[MCP_STATES] = functools.partial(mcp_states, app)
    app.add_routes(route_defs())
    app.cleanup_ctx.extend(RESOURCES)
    if holder.current.mcp.serve.enabled:  # the SDK is imported only then
        from gateway.mcp.serve import add_endpoint

        # After the resources: it serves their parts. Behind the API's bearer token.
        add_endpoint(app, holder.current, functools.partial(token_required, token))
        app[MCP_PATH] = holder.current.mcp.serve.path
    return app


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
