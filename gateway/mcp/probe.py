"""Connect to one MCP server once and list its tools: ``herald mcp list|probe`` and
``herald doctor``, which work without a running gateway."""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import TextIO

from gateway.mcp.transport import (
    describe_failure,
    list_all_tools,
    listing_seconds,
    open_session,
    server_secrets,
)
from gateway.schema.mcp import McpServerConfig


@dataclass(frozen=True, slots=True)
class ToolInfo:
    name: str
    description: str


@dataclass(frozen=True, slots=True)
class ProbeReport:
    """What a probe found: the tools, or why it failed (secrets masked)."""

    server: str
    error: str | None = None
    tools: tuple[ToolInfo, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return self.error is None


async def probe(
    name: str,
    config: McpServerConfig,
    *,
    seconds: float | None = None,
    environ: Mapping[str, str] = os.environ,
) -> ProbeReport:
    """Start (or reach) the server, initialize, list its tools, close; bounded by
    ``seconds`` (default its ``startupTimeoutSeconds``). A stdio server's last line on
    stderr is added to the reason it failed."""
    limit = seconds if seconds is not None else config.startup_timeout_seconds
    secrets = server_secrets(config)
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as errlog:
        try:
            async with asyncio.timeout(limit), AsyncExitStack() as stack:
                session = await open_session(stack, config, environ=environ, errlog=errlog)
                tools = await list_all_tools(session, name, seconds=listing_seconds(config))
        except TimeoutError:
            error = f"no answer within {limit:g}s" + _last_line(errlog, secrets)
            return ProbeReport(name, error=error)
        except Exception as exc:
            error = describe_failure(exc, secrets) + _last_line(errlog, secrets)
            return ProbeReport(name, error=error)
    infos = tuple(ToolInfo(t.name, (t.description or "").strip()) for t in tools)
    return ProbeReport(name, tools=infos)


def _last_line(errlog: TextIO, secrets: list[str]) -> str:
    errlog.flush()
    errlog.seek(0)
    lines = [line.strip() for line in errlog.read().splitlines() if line.strip()]
    if not lines:
        return ""
    last = lines[-1][:300]
    for secret in secrets:
        last = last.replace(secret, "********")
    return f" (stderr: {last})"
