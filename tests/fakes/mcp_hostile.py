"""A hostile MCP server, written with the SDK's low-level ``Server`` (stdio), for what a
well-behaved server never sends: a ``tools/list`` that pages forever, a 40 MiB result, a
line of many small values, a 256 KiB tool description and schema, a tool name with ``__``,
and a child process left behind.

Run as ``python -m tests.fakes.mcp_hostile [--endless-pages [--page-size N]
[--page-seconds S]] [--exit-after-list] [--marks DIR]``. Tools:

- ``big`` {chars, text?}: one text block of ``chars`` characters (``text`` repeated, "x");
- ``many`` {count}: ``count`` text blocks of 64 characters each;
- ``grandchild`` {}: starts ``sleep 600`` (not waited for), writes its pid to
  ``<marks>/grandchild.pid`` and answers with it;
- ``wordy``: a 256 KiB description and a 300 KiB input schema;
- ``x__y``: a name with the separator in it; answers "x__y here".

With ``--endless-pages`` every ``tools/list`` page holds ``--page-size`` tools ``t<n>`` (1)
and a next cursor, forever, each after ``--page-seconds`` (0); ``<marks>/pages`` counts the
pages served. With
``--exit-after-list`` the server exits just after its first ``tools/list`` answer.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import threading
from pathlib import Path
from typing import Any

import anyio
from mcp import types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

WORDY_DESCRIPTION = "A tool that says far too much. " * (256 * 1024 // 31)
WORDY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {f"p{i}": {"type": "string", "description": "z" * 300} for i in range(1000)},
}


def _tool(name: str, description: str, schema: dict[str, Any] | None = None) -> types.Tool:
    return types.Tool(
        name=name,
        description=description,
        input_schema=schema or {"type": "object", "properties": {}},
    )


TOOLS = [
    _tool(
        "big",
        "One text block of `chars` characters.",
        {
            "type": "object",
            "properties": {"chars": {"type": "integer"}, "text": {"type": "string"}},
            "required": ["chars"],
        },
    ),
    _tool(
        "many",
        "`count` text blocks of 64 characters.",
        {"type": "object", "properties": {"count": {"type": "integer"}}, "required": ["count"]},
    ),
    _tool("grandchild", "Start a child process that outlives this call."),
    _tool("wordy", WORDY_DESCRIPTION, WORDY_SCHEMA),
    _tool("x__y", "A name with the separator in it."),
]


#: How long ``--exit-after-list`` gives its answer to reach the client before it exits.
EXIT_AFTER_SECONDS = 0.2


def build(
    endless_pages: bool,
    page_size: int,
    page_seconds: float,
    exit_after_list: bool,
    marks: Path | None,
) -> Server[Any]:
    pages = 0

    async def list_tools(
        _ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        nonlocal pages
        if exit_after_list:
            threading.Timer(EXIT_AFTER_SECONDS, os._exit, [0]).start()
        if not endless_pages:
            return types.ListToolsResult(tools=TOOLS)
        pages += 1
        await anyio.sleep(page_seconds)
        if marks is not None:
            (marks / "pages").write_text(str(pages))
        cursor = params.cursor if params is not None and params.cursor else "0"
        first = int(cursor)
        tools = [_tool(f"t{n}", f"Tool number {n}.") for n in range(first, first + page_size)]
        return types.ListToolsResult(tools=tools, next_cursor=str(first + page_size))

    async def call_tool(
        _ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        args = params.arguments or {}
        if params.name == "big":
            unit = str(args.get("text", "x"))
            chars = int(args["chars"])
            text = (unit * (chars // len(unit) + 1))[:chars]
            return types.CallToolResult(content=[types.TextContent(type="text", text=text)])
        if params.name == "many":
            blocks = [
                types.TextContent(type="text", text=f"{i:063d}") for i in range(int(args["count"]))
            ]
            return types.CallToolResult(content=list(blocks))
        if params.name == "grandchild":
            child = subprocess.Popen(  # noqa: ASYNC220 (started, never waited for: the point)
                ["sleep", "600"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL
            )
            if marks is not None:
                (marks / "grandchild.pid").write_text(str(child.pid))
            text = str(child.pid)
            return types.CallToolResult(content=[types.TextContent(type="text", text=text)])
        text = f"{params.name} here"
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    return Server("hostile", on_list_tools=list_tools, on_call_tool=call_tool)


async def serve(
    endless_pages: bool,
    page_size: int,
    page_seconds: float,
    exit_after_list: bool,
    marks: Path | None,
) -> None:
    server = build(endless_pages, page_size, page_seconds, exit_after_list, marks)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--endless-pages", action="store_true")
    parser.add_argument("--page-size", type=int, default=1)
    parser.add_argument("--page-seconds", type=float, default=0.0)
    parser.add_argument("--exit-after-list", action="store_true")
    parser.add_argument("--marks", type=Path, default=None)
    args = parser.parse_args()
    anyio.run(
        serve,
        args.endless_pages,
        args.page_size,
        args.page_seconds,
        args.exit_after_list,
        args.marks,
    )


if __name__ == "__main__":
    main()
