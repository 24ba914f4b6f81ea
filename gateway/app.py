"""The gateway's aiohttp application, assembled in one place.

:func:`build_app` adds the middlewares, the routes, the enabled channels (built now so
they can add their routes) and every resource of :mod:`gateway.resources`, whose parts live
under the typed keys of :mod:`gateway.wiring`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from channels import Channel, ChannelState
from gateway.api.auth import auth_middleware, configured_token
from gateway.api.errors import error_middleware
from gateway.api.keys import DATABASE, DISK_FULL, READINESS, SCRAPE
from gateway.api.origin import origin_middleware
from gateway.api.routes import route_defs
from gateway.delivery import DeliveryListener
from gateway.metrics import Metrics
from gateway.reload import SettingsHolder
from gateway.resources import RESOURCES, drain
from gateway.schedules.webchat import WebchatJobs
from gateway.state import StateDB, database_reachable
from gateway.wiring import (
    CHANNELS,
    CLUSTER_LINKS,
    CONFIG_DIR,
    DELIVERY_LISTENERS,
    LANES,
    METRICS,
    SETTINGS,
    STATE,
    TIMING,
    Lanes,
    StateCursors,
    StateSeenKeys,
    Timing,
    build_channels,
    channels_of,
    cluster_links,
)

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
    app.add_routes(route_defs())
    app.cleanup_ctx.extend(RESOURCES)
    if holder.current.mcp.serve.enabled:  # the SDK is imported only then
        from gateway.mcp.serve import add_endpoint

        add_endpoint(app, holder.current)  # after the resources: it serves their parts
    return app
