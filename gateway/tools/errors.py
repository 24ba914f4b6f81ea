"""Typed errors of the tool layer.

Tools raise :class:`ToolError` for expected failures (file not found, path outside the
workspace, HTTP 404); the registry turns it into an error result for the model. The other
errors are for callers outside a model turn (the HTTP API, config checks).
"""

from __future__ import annotations

from gateway.errors import HeraldError


class ToolError(HeraldError):
    """An expected tool failure; ``str(error)`` is shown to the model as the tool result."""


class PathEscapeError(ToolError):
    """A path would leave the agent's workspace (``..``, absolute path, symlink, NUL)."""


class WorkspaceOverLimitError(ToolError):
    """``exec`` refuses commands while the workspace holds more than its size limit (or
    cannot be measured against it)."""


class ServiceUnavailableError(ToolError):
    """A tool needs a gateway service the :class:`ToolContext` was built without."""

    def __init__(self, service: str) -> None:
        self.service = service
        super().__init__(f"this tool needs the {service!r} service, which is not available here")


class UnknownToolError(HeraldError):
    """No tool of that name is registered (HTTP 404)."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"unknown tool {name!r}")


class DuplicateToolError(HeraldError):
    """A tool of that name is already registered."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"a tool named {name!r} is already registered")


class ToolArgumentsError(HeraldError):
    """Arguments that do not match a tool's parameters (HTTP 400).

    ``path`` is the JSON path of the first problem (``args.task``, ``args.tasks[0].task``);
    ``issues`` lists every problem as ``(path, message)``.
    """

    def __init__(
        self, path: str, message: str, *, issues: tuple[tuple[str, str], ...] = ()
    ) -> None:
        self.path = path
        self.message = message
        self.issues = issues or ((path, message),)
        super().__init__("; ".join(f"{p}: {m}" for p, m in self.issues))


class UnknownAgentError(HeraldError):
    """A tool policy was asked for an agent id that is not in ``routing.agents``."""

    def __init__(self, agent_id: str) -> None:
        self.agent_id = agent_id
        super().__init__(f"unknown agent {agent_id!r}")


class ToolDefinitionError(HeraldError):
    """A tool is defined wrongly (missing name, parameters that cannot become a schema)."""
