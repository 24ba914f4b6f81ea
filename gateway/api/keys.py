"""What the API's handlers reach on ``request.app``: narrow services under typed keys.

The gateway's wiring (:mod:`gateway.app`) stores each service when its resource starts
(the probes' sources when it builds the app); handlers read only the ones they need,
never the whole graph.
"""

from __future__ import annotations

from typing import Protocol

from aiohttp import web

from channels import ChannelState
from gateway.agent import ToolInvoker
from gateway.metrics import MetricsHost
from gateway.schedules.service import Schedules
from gateway.sessions import SessionStore
from gateway.state import RunsTable, SessionRecord
from gateway.subagents import StoppedTree


class RunControl(Protocol):
    """Stopping a run and every run under it (:class:`gateway.subagents.RunManager`)."""

    async def abort_tree(self, run_id: str) -> StoppedTree: ...


class TargetSessions(Protocol):
    """The chat's own session a chat target names (made if new, its origin the target's):
    the spawn door's (:meth:`gateway.subagents.SpawnDoor.chat_session`);
    :class:`~gateway.sessions.ChatTargetError` for a target that cannot be used now."""

    async def __call__(self, target: str) -> SessionRecord: ...


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


SESSION_STORE = web.AppKey("session_store", SessionStore)
RUN_RECORDS = web.AppKey("run_records", RunsTable)
RUN_CONTROL = web.AppKey("run_control", RunControl)
#: Scheduled jobs (set once the scheduler runs).
SCHEDULES = web.AppKey("schedules", Schedules)
TOOL_INVOKER = web.AppKey("tool_invoker", ToolInvoker)
TARGET_SESSIONS = web.AppKey("target_sessions", TargetSessions)
READINESS = web.AppKey("readiness", ReadinessProbe)
DATABASE = web.AppKey("database", DatabaseProbe)
DISK_FULL = web.AppKey("disk_full", DiskProbe)
SCRAPE = web.AppKey("scrape", ScrapeSource)
MCP_STATES = web.AppKey("mcp_states", McpProbe)
#: The path of Herald's MCP endpoint, when ``mcp.serve`` is on.
MCP_PATH = web.AppKey("mcp_path", str)
