"""The gateway's resources, in start-up order; teardown runs in reverse.

One ``cleanup_ctx`` generator builds every service (state database, session store,
providers, tools, lanes, outbox, sub-agents, chat runtime), then the channels connect. The
services are built together because they reference each other; the teardown order still
matters and is spelled out in :func:`_teardown`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import web

from channels import Channel
from gateway.api.openapi import openapi_routes
from gateway.api.routes import api_routes
from gateway.app import CHANNELS, SERVICES_KEY, Resource
from gateway.archive import ArchiveScheduler
from gateway.constants import STATE_DB_NAME
from gateway.metrics import metrics_routes
from gateway.providers import ProviderRegistry
from gateway.reload import SettingsHolder
from gateway.runtime.chat import ChatRuntime
from gateway.services import Lanes, Services
from gateway.sessions import SessionStore
from gateway.settings import HeraldSettings
from gateway.state import StateDB
from gateway.subagents.manager import SubagentManager
from gateway.subagents.outbox import Outbox
from gateway.subagents.tools import register_session_tools
from gateway.tools import ToolRegistry, default_registry

logger = logging.getLogger(__name__)


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


async def open_services(holder: SettingsHolder, config_dir: Path) -> Services:
    """Build every service (nothing is connected to a chat yet)."""
    settings = holder.current
    state_dir = settings.gateway.resolved_state_dir()
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(state_dir, 0o700)
    db = await StateDB.open(state_dir / STATE_DB_NAME)
    store = SessionStore(state_dir, db)
    channels: dict[str, Channel] = {}  # filled as channels connect; the outbox reads it live
    services = Services(
        holder=holder,
        config_dir=config_dir,
        db=db,
        store=store,
        providers=ProviderRegistry(settings.models.providers, config_dir=config_dir),
        tools=build_tools(settings),
        lanes=Lanes.from_settings(settings),
        outbox=Outbox(db, channels),
        archive=ArchiveScheduler(
            store, archive_after_minutes=settings.agent.subagents.archive_after_minutes
        ),
        channels=channels,
    )
    services.metrics.watch_lanes(services.lanes.all())
    services.outbox.subscribe(services.metrics.outbox_listener)
    services.outbox.on_retry = functools.partial(services.metrics.announce_delivery, "retry")
    services.subagents = SubagentManager(services)
    services.chat = ChatRuntime(services, services.subagents)
    return services


async def close_services(services: Services, drain_seconds: float) -> None:
    """Stop intake, drain, then release resources, in the order that loses nothing."""
    if services.subagents is not None:
        await services.subagents.close(drain_seconds)
    for lane in (services.lanes.session, services.lanes.main):
        await lane.shutdown(drain_seconds)
    await services.outbox.close()
    await services.archive.shutdown()
    await services.providers.close()
    await services.store.aclose()
    await services.db.close()


def on_reload(services: Services) -> None:
    """Apply a reloaded config: lane widths now; tools and providers for the next turns."""

    def apply(old: HeraldSettings, new: HeraldSettings) -> None:
        services.lanes.apply(new)
        services.tools = build_tools(new)
        if old.models != new.models:
            previous = services.providers
            services.providers = ProviderRegistry(
                new.models.providers, config_dir=services.config_dir
            )
            # Turns in flight keep the provider they resolved; close the old registry later.
            asyncio.get_running_loop().call_later(
                new.agent.timeout_seconds, lambda: asyncio.ensure_future(previous.close())
            )
        logger.info(
            "config applied",
            extra={
                "main_lane": new.agent.max_concurrent,
                "subagent_lane": new.agent.subagents.max_concurrent,
            },
        )

    services.holder.subscribe(apply)


def resources_for(holder: SettingsHolder, config_dir: Path | None = None) -> list[Resource]:
    """Every resource the daemon runs, in the order they start."""
    base_dir = config_dir or Path.cwd()

    async def gateway_services(app: web.Application) -> AsyncIterator[None]:
        services = app[SERVICES_KEY] = await open_services(holder, base_dir)
        on_reload(services)
        try:
            await services.archive.start()
            logger.info("services ready", extra={"state_dir": str(services.store.state_dir)})
            yield
        finally:
            await close_services(services, holder.current.gateway.shutdown_drain_seconds)
            logger.info("services closed")

    async def chat_channels(app: web.Application) -> AsyncIterator[None]:
        services = app[SERVICES_KEY]
        chat = services.require_chat()
        for name, channel in app[CHANNELS].items():
            services.channels[name] = channel
            await channel.start(chat.handle_inbound)
            logger.info("channel connected", extra={"channel": name})
        # Deliveries and recovered runs need their chats: start them once channels are up,
        # or an announce for a channel still connecting would fail as "not enabled".
        await services.outbox.start()
        if services.subagents is not None:
            await services.subagents.recover()
        try:
            yield
        finally:
            for name, channel in reversed(list(app[CHANNELS].items())):
                try:
                    await channel.stop()
                except Exception:
                    logger.exception("channel stop failed", extra={"channel": name})
                logger.info("channel stopped", extra={"channel": name})

    return [gateway_services, chat_channels]


def prepare_app(app: web.Application, holder: SettingsHolder) -> None:
    """Add the API routes and the channels' own routes (before the app starts)."""
    channels = build_channels(holder.current)
    app[CHANNELS] = channels
    for channel in channels.values():
        channel.add_routes(app)
    app.add_routes(api_routes(lambda: app[SERVICES_KEY]))
    app.add_routes([*openapi_routes(), *metrics_routes(lambda: app[SERVICES_KEY])])
