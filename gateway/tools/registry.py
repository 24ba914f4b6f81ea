"""The one tool registry: specs for providers, validation, and calls that never raise.

:meth:`ToolRegistry.invoke` is what the agent runtime calls for each model tool call. Bad
input of any kind — an unknown or disallowed tool, arguments that were not JSON, arguments
that fail validation, a tool that raises — becomes an error :class:`ToolOutput` the model
can read and react to; the session keeps working. Only cancellation propagates.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from gateway.llm import ToolCall, ToolSpec
from gateway.state import is_out_of_space
from gateway.tools._schema import parameters_schema
from gateway.tools.base import Tool, ToolContext, ToolOutput
from gateway.tools.errors import (
    DuplicateToolError,
    ToolArgumentsError,
    ToolDefinitionError,
    ToolError,
    UnknownToolError,
)

logger = logging.getLogger(__name__)


class ToolRegistry:
    """Every tool the gateway knows, by name, in registration order."""

    def __init__(self) -> None:
        self._tools: dict[str, Tool[Any]] = {}
        self._specs: dict[str, ToolSpec] = {}
        #: Moves with every registration: what was derived from the tools may be stale.
        self.version = 0

    def __repr__(self) -> str:
        return f"<ToolRegistry tools={len(self._tools)}>"

    def __len__(self) -> int:
        return len(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def register(self, tool: Tool[Any], *, replace: bool = False) -> None:
        """Add ``tool``; its schema is built now, so a bad definition fails at startup.

        Raises :class:`DuplicateToolError` when the name is taken (unless ``replace``) and
        :class:`ToolDefinitionError` when the tool lacks a name or a usable params model.
        """
        for attr in ("name", "description", "group", "params"):
            if not getattr(tool, attr, None):
                raise ToolDefinitionError(f"{type(tool).__name__} has no {attr}")
        if not (isinstance(tool.params, type) and issubclass(tool.params, BaseModel)):
            raise ToolDefinitionError(f"{tool.name}: params must be a pydantic model class")
        if tool.name in self._tools and not replace:
            raise DuplicateToolError(tool.name)
        schema = tool.input_schema()
        spec = ToolSpec(
            tool.name,
            tool.description,
            schema if schema is not None else parameters_schema(tool.params),
        )
        self._tools[tool.name] = tool
        self._specs[tool.name] = spec
        self.version += 1

    def unregister(self, name: str) -> None:
        """Remove the tool called ``name`` (tools of an MCP server come and go); no-op when
        absent."""
        if self._tools.pop(name, None) is not None:
            del self._specs[name]
            self.version += 1

    def get(self, name: str) -> Tool[Any] | None:
        """The tool called ``name``, or None."""
        return self._tools.get(name)

    def names(self) -> frozenset[str]:
        """Every registered tool name."""
        return frozenset(self._tools)

    def groups(self) -> dict[str, frozenset[str]]:
        """Tool names by group, as declared by the tools (``fs`` → read, write, …)."""
        out: dict[str, set[str]] = {}
        for tool in self._tools.values():
            for group in (tool.group, *tool.extra_groups):
                out.setdefault(group, set()).add(tool.name)
        return {group: frozenset(names) for group, names in out.items()}

    def specs(self, names: Iterable[str]) -> list[ToolSpec]:
        """Specs of the named tools for a model request, in registration order.

        Names that are not registered are skipped: the policy may name tools that a given
        registry does not have.
        """
        wanted = set(names)
        return [spec for name, spec in self._specs.items() if name in wanted]

    def validate(self, name: str, args: object) -> BaseModel:
        """``args`` validated against the tool's parameters.

        Raises :class:`UnknownToolError` or :class:`ToolArgumentsError` (with the JSON path
        of the first problem, e.g. ``args.task``); this is the HTTP API's entry point.
        """
        tool = self._tools.get(name)
        if tool is None:
            raise UnknownToolError(name)
        if not isinstance(args, Mapping):
            raise ToolArgumentsError("args", "must be a JSON object")
        try:
            params: BaseModel = tool.params.model_validate(dict(args))
            return params
        except ValidationError as exc:
            issues = tuple(
                (_json_path(err["loc"]), str(err["msg"])) for err in exc.errors(include_url=False)
            )
            path, message = issues[0] if issues else ("args", "invalid arguments")
            raise ToolArgumentsError(path, message, issues=issues) from None

    async def execute(self, name: str, params: BaseModel, ctx: ToolContext) -> ToolOutput:
        """Run a tool with already-validated ``params``; failures become error outputs.

        A :class:`ToolError` is reported as its message; any other exception as
        ``tool <name> failed: <error>``, logged with its traceback (a full disk is not: its
        state logs it once). Raises only
        :class:`UnknownToolError` (and cancellation).
        """
        tool = self._tools.get(name)
        if tool is None:
            raise UnknownToolError(name)
        try:
            output = await tool.run(params, ctx)
        except ToolError as exc:
            return ToolOutput.error(f"{name}: {exc}")
        except Exception as exc:
            if is_out_of_space(exc):  # logged once, by the disk-full state
                return ToolOutput.error(f"tool {name} failed: the gateway's disk is full")
            # Arguments are not logged: they may hold secrets the model was given.
            logger.exception("tool %s failed in session %s", name, ctx.session_key)
            return ToolOutput.error(f"tool {name} failed: {type(exc).__name__}: {exc}")
        if not isinstance(output, ToolOutput):
            logger.error("tool %s returned %s, not a ToolOutput", name, type(output).__name__)
            return ToolOutput.error(f"tool {name} failed: it returned no result")
        return output

    async def invoke(self, call: ToolCall, ctx: ToolContext, allowed: frozenset[str]) -> ToolOutput:
        """Carry out one model tool call; never raises for bad input (see module doc).

        ``allowed`` is the session's effective tool set (:mod:`gateway.tools.policy`).
        """
        if call.name not in self._tools or call.name not in allowed:
            offered = ", ".join(sorted(n for n in allowed if n in self._tools)) or "none"
            why = "unknown tool" if call.name not in self._tools else "tool not available here"
            return ToolOutput.error(f"{why}: {call.name!r} (available tools: {offered})")
        if call.arguments_error is not None:
            return ToolOutput.error(
                f"invalid arguments for {call.name}: not a JSON object ({call.arguments_error}); "
                "send the arguments as one JSON object"
            )
        try:
            params = self.validate(call.name, call.arguments)
        except ToolArgumentsError as exc:
            return ToolOutput.error(f"invalid arguments for {call.name}: {exc}")
        return await self.execute(call.name, params, ctx)


def _json_path(loc: tuple[int | str, ...]) -> str:
    """A pydantic error location as a JSON path rooted at ``args``: ``args.tasks[0].task``."""
    path = "args"
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path
