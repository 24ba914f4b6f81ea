"""Every tool Herald offers, in the order models are shown them: the built-ins, then the
session tools, the orchestration tools and the ``schedule`` tool (MCP servers' tools are
installed into the registry in force as their servers list them).

The one list of tools across capabilities: the app hands it to the tools in force
(:class:`gateway.parts.agent.ToolBox`), and ``herald config check`` checks tool policies
against it.
"""

from __future__ import annotations

from gateway.schedules.tool import ScheduleTool
from gateway.settings import HeraldSettings
from gateway.subagents.orchestration import register_orchestration_tools
from gateway.subagents.tools import register_session_tools
from gateway.tools import ToolRegistry, default_registry


def build_tools(settings: HeraldSettings) -> ToolRegistry:
    """Every tool: the built-ins, then the session tools."""
    registry = default_registry(settings)
    register_session_tools(registry)
    register_orchestration_tools(registry)
    registry.register(ScheduleTool())
    return registry
