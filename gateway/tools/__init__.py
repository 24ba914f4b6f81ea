"""Agent tools: one registry, the built-in tools, and the tool policy."""

from gateway.tools.base import ServiceKey, Tool, ToolContext, ToolOutput, ToolParams
from gateway.tools.defaults import default_registry
from gateway.tools.errors import (
    DuplicateToolError,
    PathEscapeError,
    ServiceUnavailableError,
    ToolArgumentsError,
    ToolDefinitionError,
    ToolError,
    UnknownAgentError,
    UnknownToolError,
)
from gateway.tools.policy import (
    DEFAULT_GROUPS,
    NESTING_TOOLS,
    SESSION_TOOLS,
    SUBAGENT_ONLY_TOOLS,
    effective_tools,
    policy_issues,
    tools_for_agent,
    tools_for_subagent,
    unknown_policy_names,
)
from gateway.tools.registry import ToolRegistry

__all__ = [
    "DEFAULT_GROUPS",
    "NESTING_TOOLS",
    "SESSION_TOOLS",
    "SUBAGENT_ONLY_TOOLS",
    "DuplicateToolError",
    "PathEscapeError",
    "ServiceKey",
    "ServiceUnavailableError",
    "Tool",
    "ToolArgumentsError",
    "ToolContext",
    "ToolDefinitionError",
    "ToolError",
    "ToolOutput",
    "ToolParams",
    "ToolRegistry",
    "UnknownAgentError",
    "UnknownToolError",
    "default_registry",
    "effective_tools",
    "policy_issues",
    "tools_for_agent",
    "tools_for_subagent",
    "unknown_policy_names",
]
