"""Every configured MCP server: connected in parallel with the gateway's start, their tools
kept in the tool registry in force, their states for ``/readyz`` and ``/metrics``.

One client session per server per process, shared by every turn. A registry rebuilt on a
config reload gets the tools of the moment installed again (:meth:`McpManager.install`).
Changes to ``mcp.servers`` themselves apply at the next start.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Protocol, TextIO

from mcp import types

from gateway.mcp.connection import RESTART_BASE_SECONDS, ServerConnection, ServerState
from gateway.mcp.tools import McpTool
from gateway.schema.mcp import TOOL_SEPARATOR, McpServerConfig
from gateway.tools import DuplicateToolError, ToolRegistry

logger = logging.getLogger(__name__)


class McpMetrics(Protocol):
    """What the manager reports (:class:`gateway.metrics.Metrics`)."""

    def mcp_server_up(self, server: str, up: bool) -> None: ...

    def mcp_call(self, server: str, outcome: str) -> None: ...


class McpManager:
    """The gateway's MCP servers (see the module doc).

    ``registry`` returns the tool registry in force now; ``log_dir`` (when given) holds
    each stdio server's stderr as ``<name>.log``; ``policy_names`` are the tool names the
    tool policies write, for a warning about those a server does not have.
    """

    def __init__(
        self,
        servers: Mapping[str, McpServerConfig],
        registry: Callable[[], ToolRegistry],
        *,
        metrics: McpMetrics | None = None,
        log_dir: Path | None = None,
        policy_names: Iterable[str] = (),
        environ: Mapping[str, str] = os.environ,
        restart_base: float | None = None,
    ) -> None:
        self._registry = registry
        self._metrics = metrics
        self._log_dir = log_dir
        self._policy_names = frozenset(policy_names)
        self._warned: set[str] = set()
        self._logs: dict[str, TextIO] = {}
        #: Registered tools by server: the names this manager put in the registry.
        self._registered: dict[str, dict[str, McpTool]] = {}
        self.connections = {
            name: ServerConnection(
                name,
                config,
                on_tools=self._tools_changed,
                on_state=self._state_changed,
                errlog=self._errlog_for(name),
                environ=environ,
                restart_base=RESTART_BASE_SECONDS if restart_base is None else restart_base,
            )
            for name, config in servers.items()
            if config.enabled
        }
        self._closed = False

    def __repr__(self) -> str:
        ready = sum(c.state is ServerState.READY for c in self.connections.values())
        return f"<McpManager servers={len(self.connections)} ready={ready}>"

    def start(self) -> None:
        """Connect every server, in parallel, in the background."""
        for connection in self.connections.values():
            if self._metrics is not None:
                self._metrics.mcp_server_up(connection.name, False)
            connection.start()

    async def settled(self) -> None:
        """Wait until each server's first attempt has succeeded or failed."""
        await asyncio.gather(*(c.settled() for c in self.connections.values()))

    def states(self) -> dict[str, str]:
        """Each server's state for ``/readyz``: ``ready``, ``starting``, ``failed: …``."""
        return {name: c.status() for name, c in self.connections.items()}

    def install(self, registry: ToolRegistry) -> None:
        """Register the tools of the moment in ``registry`` (a rebuilt one)."""
        for tools in self._registered.values():
            for tool in tools.values():
                registry.register(tool, replace=True)

    async def close(self) -> None:
        """Stop every server (idempotent)."""
        if self._closed:
            return
        self._closed = True
        await asyncio.gather(*(c.stop() for c in self.connections.values()), return_exceptions=True)
        for log in self._logs.values():
            log.close()
        self._logs.clear()

    # -- listeners ----------------------------------------------------------------------

    def _tools_changed(self, server: str, tools: Sequence[types.Tool]) -> None:
        registry = self._registry()
        for name in self._registered.pop(server, {}):
            registry.unregister(name)
        connection = self.connections[server]
        made: dict[str, McpTool] = {}
        for remote in tools:
            tool = McpTool(connection, remote, self._record)
            if tool.name in made:
                logger.warning(
                    "mcp tool name taken; skipped",
                    extra={"server": server, "tool": remote.name, "name": tool.name},
                )
                continue
            try:
                registry.register(tool)
            except DuplicateToolError:
                logger.warning(
                    "mcp tool name taken by another tool; skipped",
                    extra={"server": server, "tool": remote.name},
                )
                continue
            made[tool.name] = tool
        if made:
            self._registered[server] = made
            self._warn_unknown(server, frozenset(made))

    def _warn_unknown(self, server: str, names: frozenset[str]) -> None:
        """Warn once per name about policy entries ``<server>__x`` the server lacks."""
        prefix = f"{server}{TOOL_SEPARATOR}"
        for name in sorted(self._policy_names):
            if name.startswith(prefix) and name not in names and name not in self._warned:
                self._warned.add(name)
                logger.warning(
                    "a tool policy names a tool this MCP server does not list",
                    extra={"server": server, "tool": name},
                )

    def _state_changed(self, server: str, state: ServerState) -> None:
        if self._metrics is not None:
            self._metrics.mcp_server_up(server, state is ServerState.READY)

    def _record(self, server: str, outcome: str) -> None:
        if self._metrics is not None:
            self._metrics.mcp_call(server, outcome)

    def _errlog_for(self, name: str) -> Callable[[], TextIO | None]:
        def open_log() -> TextIO | None:
            if self._log_dir is None:
                return None
            if name not in self._logs:
                self._log_dir.mkdir(parents=True, exist_ok=True)
                # Open while the gateway runs: each restart of the server appends to it.
                path = self._log_dir / f"{name}.log"
                self._logs[name] = path.open("a", encoding="utf-8")
            return self._logs[name]

        return open_log
