"""An MCP server's tool as a Herald tool: ``<server>__<tool>``, the server's description and
input schema, in groups ``mcp`` and ``mcp:<server>``.

Arguments are passed on as the model wrote them: the server validates them against its own
schema and answers a bad call with an error the model reads, as for any tool.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from mcp import types
from pydantic import BaseModel, ConfigDict

from gateway.mcp.connection import McpCallError
from gateway.mcp.results import result_text, tool_name
from gateway.tools import Tool, ToolContext, ToolOutput


class McpArguments(BaseModel):
    """Whatever object the model sent; the server checks it."""

    model_config = ConfigDict(extra="allow", frozen=True)


class ToolCaller(Protocol):
    """What a tool needs of its server's connection."""

    name: str

    async def call(self, tool: str, arguments: dict[str, Any]) -> types.CallToolResult: ...


#: Told of each call's outcome: ``ok``, ``error``, ``timeout`` or ``failed``.
CallRecorder = Callable[[str, str], None]


def input_schema(remote: types.Tool) -> dict[str, Any]:
    """The server's input schema as providers take it: always an ``object`` with
    ``properties``."""
    schema = dict(remote.input_schema or {})
    schema["type"] = "object"
    schema.setdefault("properties", {})
    return schema


class McpTool(Tool[McpArguments]):
    """One tool of one MCP server (see the module doc)."""

    group = "mcp"
    params = McpArguments

    def __init__(self, server: ToolCaller, remote: types.Tool, record: CallRecorder) -> None:
        self._server = server
        self._record = record
        self.remote_name = remote.name
        self.name = tool_name(server.name, remote.name)
        described = (remote.description or remote.title or remote.name).strip()
        self.description = f"{described} (from MCP server {server.name})"
        self.extra_groups = (f"mcp:{server.name}",)
        self._schema = input_schema(remote)

    def input_schema(self) -> dict[str, Any]:
        return self._schema

    async def run(self, params: McpArguments, ctx: ToolContext) -> ToolOutput:
        server = self._server.name
        try:
            result = await self._server.call(self.remote_name, dict(params.model_extra or {}))
        except McpCallError as exc:
            self._record(server, exc.outcome)
            return ToolOutput.error(str(exc))
        text = result_text(result)
        if result.is_error:
            self._record(server, "error")
            return ToolOutput.error(f"{self.name} (MCP server {server!r}) failed: {text}")
        self._record(server, "ok")
        return ToolOutput(content=text)
