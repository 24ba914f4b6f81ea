"""The probes the API's health and metrics routes read on ``request.app``, set by
:func:`gateway.app.build_app`; what else handlers reach is under the keys of the
capability that owns it (:mod:`gateway.parts`, :mod:`gateway.subagents.setup`,
:mod:`gateway.schedules.setup`).
"""

from __future__ import annotations

from typing import Protocol

from aiohttp import web

from channels import ChannelState
from gateway.metrics import MetricsHost


class ReadinessProbe(Protocol):
    """Each enabled channel's connection state, by name."""

    def __call__(self) -> dict[str, ChannelState]: ...


class DatabaseProbe(Protocol):
    """Whether the shared state database answers now (None: SQLite, nothing to ask)."""

    async def __call__(self) -> bool | None: ...


class DiskProbe(Protocol):
    """Whether the state directory's disk is full now."""

    def __call__(self) -> bool: ...


class McpProbe(Protocol):
    """Each enabled MCP server's state, by name (empty without MCP servers)."""

    def __call__(self) -> dict[str, str]: ...


class ScrapeSource(Protocol):
    """What a ``/metrics`` scrape reads, once the gateway's resources have started."""

    def __call__(self) -> MetricsHost: ...


READINESS = web.AppKey("readiness", ReadinessProbe)
DATABASE = web.AppKey("database", DatabaseProbe)
DISK_FULL = web.AppKey("disk_full", DiskProbe)
SCRAPE = web.AppKey("scrape", ScrapeSource)
MCP_STATES = web.AppKey("mcp_states", McpProbe)
#: The path of Herald's MCP endpoint, when ``mcp.serve`` is on.
MCP_PATH = web.AppKey("mcp_path", str)
