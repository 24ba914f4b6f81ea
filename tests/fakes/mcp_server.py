"""An MCP server written with the official SDK (``MCPServer``), for the failure paths the
reference servers never take: slow calls, ``isError``, a crash, images, a tool list that
changes, the environment a stdio server sees, and (for the sandbox) what files and ports it
can reach.

Run as ``python -m tests.fakes.mcp_server [--http PORT] [--marks DIR] [--name NAME]``:
stdio by default, Streamable HTTP at ``http://127.0.0.1:PORT/mcp`` with ``--http``. Marks
(files in ``--marks``) let tests see what happened inside the server: ``<tag>.started`` when a
slow call began, ``<tag>.cancelled`` when its cancellation arrived.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import socket
from pathlib import Path

from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

#: A 1×1 PNG (70 bytes).
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


def build(name: str, marks: Path | None) -> MCPServer:
    server = MCPServer(name)

    def mark(tag: str) -> None:
        if marks is not None:
            (marks / tag).write_text("1")

    @server.tool()
    def echo(text: str) -> str:
        """Answer with the text it was given."""
        return f"echo: {text}"

    @server.tool()
    async def slow(seconds: float, tag: str = "slow") -> str:
        """Wait, then answer; marks its start and its cancellation."""
        mark(f"{tag}.started")
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            mark(f"{tag}.cancelled")
            raise
        return f"slept {seconds}"

    @server.tool()
    def fail(message: str) -> str:
        """Always fails, with an error result (isError) holding ``message``."""
        raise ToolError(message)

    @server.tool()
    def crash() -> str:
        """End the server's process at once."""
        os._exit(3)

    @server.tool()
    def picture() -> Image:
        """A small PNG."""
        return Image(data=PNG, format="png")

    @server.tool()
    def environment() -> str:
        """The server's environment as JSON."""
        return json.dumps(dict(os.environ))

    @server.tool()
    def read(path: str) -> str:
        """The text of the file at ``path``; an error result when it cannot be read."""
        try:
            return Path(path).read_text()
        except OSError as exc:
            raise ToolError(f"cannot read {path}: {exc.strerror}") from None

    @server.tool()
    def connect(port: int) -> str:
        """Open a TCP connection to 127.0.0.1:``port``; an error result when it fails."""
        try:
            socket.create_connection(("127.0.0.1", port), timeout=10).close()
        except OSError as exc:
            raise ToolError(f"cannot connect to port {port}: {exc.strerror}") from None
        return "connected"

    @server.tool()
    async def grow(tool: str, ctx: Context) -> str:
        """Add a tool named ``tool`` and tell the client the tool list changed."""

        def added() -> str:
            return f"{tool} here"

        server.add_tool(added, name=tool, description=f"The added tool {tool}.")
        await ctx.session.send_tool_list_changed()
        return f"added {tool}"

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, default=None)
    parser.add_argument("--marks", type=Path, default=None)
    parser.add_argument("--name", default="fake")
    args = parser.parse_args()
    server = build(args.name, args.marks)
    if args.http is None:
        server.run("stdio")
    else:
        asyncio.run(server.run_streamable_http_async(host="127.0.0.1", port=args.http))


if __name__ == "__main__":
    main()
