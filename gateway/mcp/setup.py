"""The gateway's MCP resource: servers connected in parallel with the rest of the start
(never waited for), their tools in the registry in force, their states on ``/readyz``.

The SDK is imported only when servers are configured: it is a large import (about as much
as the rest of the gateway), and most gateways start without MCP servers.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from aiohttp import web

from gateway.metrics import METRICS
from gateway.parts.agent import TOOLS
from gateway.reload import SETTINGS, settings_of
from gateway.settings import HeraldSettings

if TYPE_CHECKING:
    from gateway.mcp.manager import McpManager

logger = logging.getLogger(__name__)

#: Set only when servers are configured.
MCP: web.AppKey[McpManager] = web.AppKey("mcp")


def mcp_states(app: web.Application) -> dict[str, str]:
    """Each enabled MCP server's state, by name (empty without MCP servers)."""
    manager = app.get(MCP)
    return manager.states() if manager is not None else {}


def _reloaded(old: HeraldSettings, new: HeraldSettings) -> None:
    # The servers' processes and sessions live as long as the gateway: say so, rather than
    # let an edited mcp section look applied.
    if old.mcp != new.mcp:
        logger.warning("mcp: changes to the mcp section apply at the next start")


def policy_names(settings: HeraldSettings) -> list[str]:
    """Every name the tool policies write (for warnings about tools a server lacks)."""
    layers = [settings.agent.tools, settings.agent.subagents.tools]
    layers += [agent.tools for agent in settings.routing.agents.values()]
    return [name for layer in layers for name in [*(layer.allow or ()), *layer.deny]]


async def mcp_setup(app: web.Application) -> AsyncIterator[None]:
    """Start every enabled server in the background; stop them at teardown."""
    settings = settings_of(app)
    app[SETTINGS].subscribe(_reloaded)
    servers = settings.mcp.enabled_servers()
    if not servers:
        try:
            yield
        finally:
            app[SETTINGS].unsubscribe(_reloaded)
        return
    from gateway.mcp.manager import McpManager

    manager = McpManager(
        servers,
        app[TOOLS].get,
        metrics=app[METRICS],
        log_dir=settings.gateway.resolved_state_dir() / "logs" / "mcp",
        policy_names=policy_names(settings),
    )
    app[TOOLS].add_installer(manager.install)
    app[MCP] = manager
    manager.start()
    try:
        yield
    finally:
        app[SETTINGS].unsubscribe(_reloaded)
        await manager.close()
