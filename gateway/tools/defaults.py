"""The registry of built-in tools (the session tools are registered later by the runtime)."""

from __future__ import annotations

from gateway.settings import HeraldSettings
from gateway.tools.exec import ExecTool
from gateway.tools.fs import EditTool, LsTool, ReadTool, WriteTool
from gateway.tools.netguard import NetworkGuard
from gateway.tools.registry import ToolRegistry
from gateway.tools.search import WebSearchTool
from gateway.tools.subagent import SubmitErrorTool, SubmitResultTool
from gateway.tools.web import WebFetchTool


def default_registry(settings: HeraldSettings) -> ToolRegistry:
    """A registry with ``read``, ``write``, ``edit``, ``ls``, ``web_fetch``, ``exec``,
    ``submit_result`` and ``submit_error``, and ``web_search`` when it is configured.

    ``exec`` and ``web_fetch`` take their limits from ``settings.agent`` now, so a config
    reload should build a new registry. Whether a session may use a tool is the policy's
    business (:mod:`gateway.tools.policy`), not the registry's.
    """
    registry = ToolRegistry()
    for tool in (
        ReadTool(),
        WriteTool(),
        EditTool(),
        LsTool(),
        WebFetchTool(
            settings.agent.web_fetch,
            guard=NetworkGuard(allow_private=settings.agent.tools.web_fetch.allow_private_networks),
        ),
        ExecTool(settings.agent.tools.exec),
        SubmitResultTool(),
        SubmitErrorTool(),
    ):
        registry.register(tool)
    if settings.agent.tools.web_search.provider is not None:  # off until configured
        registry.register(WebSearchTool(settings.agent.tools.web_search))
    return registry
