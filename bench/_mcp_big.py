"""An MCP server (the SDK's low-level ``Server``, stdio) whose one tool ``big`` {chars}
answers with one text block of ``chars`` characters: what :mod:`bench.mcp_results` reads.

Run as ``python -m bench._mcp_big``. Bench code never imports ``tests``: this is its own.
"""

from __future__ import annotations

from typing import Any

import anyio
from mcp import types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

TOOL = types.Tool(
    name="big",
    description="One text block of `chars` characters.",
    input_schema={
        "type": "object",
        "properties": {"chars": {"type": "integer"}},
        "required": ["chars"],
    },
)


async def list_tools(
    _ctx: ServerRequestContext[Any], _params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    return types.ListToolsResult(tools=[TOOL])


async def call_tool(
    _ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
) -> types.CallToolResult:
    chars = int((params.arguments or {})["chars"])
    return types.CallToolResult(content=[types.TextContent(type="text", text="x" * chars)])


async def serve() -> None:
    server = Server("big", on_list_tools=list_tools, on_call_tool=call_tool)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(serve)
