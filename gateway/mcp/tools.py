"""An MCP server's tool as a Herald tool: ``<server>__<tool>``, the server's description and
input schema, in groups ``mcp`` and ``mcp:<server>``.

Arguments are passed on as the model wrote them: the server validates them against its own
schema and answers a bad call with an error the model reads, as for any tool.

Whatever a server sends here goes out with every model request that offers the tool, so its
size is bounded: a description is cut at :data:`MAX_DESCRIPTION_CHARS`, and a schema past
:data:`MAX_SCHEMA_BYTES` is replaced by one that takes any object (the server still checks
the arguments). A result is cut to ``agent.tools.maxResultChars`` before it is returned, so
the transcript keeps the same text the model reads.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final, Protocol

import orjson
from mcp import types
from pydantic import BaseModel, ConfigDict

from gateway.mcp.connection import McpCallError
from gateway.mcp.results import bounded_text, result_text, tool_name
from gateway.tools import Tool, ToolContext, ToolOutput

logger = logging.getLogger(__name__)

#: A tool's description as sent to the model: 2,048 characters say what any real tool does
#: (most take a few hundred); one server sent 256 KiB, with every request.
MAX_DESCRIPTION_CHARS: Final = 2048
#: A tool's input schema as sent to the model, in bytes of JSON: real ones take a few KiB.
MAX_SCHEMA_BYTES: Final = 32 * 1024
#: The schema that stands for one past the limit: any object.
ANY_OBJECT: Final[dict[str, Any]] = {"type": "object", "properties": {}}


class McpArguments(BaseModel):
    """Whatever object the model sent; the server checks it."""

    model_config = ConfigDict(extra="allow", frozen=True)


class ToolCaller(Protocol):
    """What a tool needs of its server's connection."""

    name: str

    async def call(self, tool: str, arguments: dict[str, Any]) -> types.CallToolResult: ...


#: Told of each call's outcome: ``ok``, ``error``, ``timeout`` or ``failed``.
CallRecorder = Callable[[str, str], None]


def sent_schema(remote: types.Tool) -> tuple[dict[str, Any], bool]:
    """The server's input schema as providers take it (always an ``object`` with
    ``properties``), and whether it was past :data:`MAX_SCHEMA_BYTES` (then it is
    :data:`ANY_OBJECT`)."""
    schema = dict(remote.input_schema or {})
    schema["type"] = "object"
    schema.setdefault("properties", {})
    if len(orjson.dumps(schema)) > MAX_SCHEMA_BYTES:
        return dict(ANY_OBJECT), True
    return schema, False


def description(remote: types.Tool, server: str, *, schema_cut: bool) -> str:
    """The tool's description as the model reads it: the server's, cut at
    :data:`MAX_DESCRIPTION_CHARS` with a note, and where it comes from."""
    text = (remote.description or remote.title or remote.name).strip()
    if len(text) > MAX_DESCRIPTION_CHARS:
        shown = f"{text[:MAX_DESCRIPTION_CHARS]}…"
        text = (
            f"{shown} [description cut: {len(text):,} chars, "
            f"showing the first {MAX_DESCRIPTION_CHARS:,}]"
        )
    if schema_cut:
        text += " [its input schema was too large to send: pass the arguments it documents]"
    return f"{text} (from MCP server {server})"


class McpTool(Tool[McpArguments]):
    """One tool of one MCP server (see the module doc)."""

    group = "mcp"
    params = McpArguments

    def __init__(self, server: ToolCaller, remote: types.Tool, record: CallRecorder) -> None:
        self._server = server
        self._record = record
        self.remote_name = remote.name
        self.name = tool_name(server.name, remote.name)
        self._schema, schema_cut = sent_schema(remote)
        self.description = description(remote, server.name, schema_cut=schema_cut)
        self.extra_groups = (f"mcp:{server.name}",)
        if schema_cut or len(remote.description or "") > MAX_DESCRIPTION_CHARS:
            logger.warning(
                "mcp tool's description or schema is past its limit; cut",
                extra={"server": server.name, "tool": remote.name},
            )

    def input_schema(self) -> dict[str, Any]:
        return self._schema

    async def run(self, params: McpArguments, ctx: ToolContext) -> ToolOutput:
        server = self._server.name
        try:
            result = await self._server.call(self.remote_name, dict(params.model_extra or {}))
        except McpCallError as exc:
            self._record(server, exc.outcome)
            return ToolOutput.error(str(exc))
        limit = ctx.settings.agent.tools.max_result_chars
        text, failed = result_text(result), result.is_error
        del result  # what is cut is not held past here
        if failed:
            self._record(server, "error")
            return ToolOutput.error(
                bounded_text(f"{self.name} (MCP server {server!r}) failed: {text}", limit)
            )
        self._record(server, "ok")
        return ToolOutput(content=bounded_text(text, limit))
