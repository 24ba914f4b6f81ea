"""Issue 25: MCP tools, against the bare SDK client (``python -m bench.mcp``).

**A call through a turn.** Eight chats hold turns at once; in each turn the model (the
zero-latency fake) calls ``time__get_current_time`` of the official reference server
``mcp-server-time`` (stdio) ``TOOL_ROUNDS`` times, then answers. Herald's figure is the p50
wall time of one call as the turn makes it: ``ToolRegistry.invoke`` (validation, policy,
the tool adapter, the shared client session, result conversion). The baseline is the same
call from the SDK's own ``ClientSession`` on its own server process, in this process, eight
workers calling at once, in rounds alternating with the turns'. Goal: ≤ 1.3× per call at p50.

**Start with five stdio servers.** Herald's figure is the time from building the gateway to
all five servers ready with their tools (they start in parallel with the gateway and each
other). The baseline is the gateway's start without servers plus the slowest of five servers
started at once by the bare SDK client (connect, initialize, list tools): what a start in
parallel can at best achieve on this machine. Medians of ``rounds``.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from mcp import ClientSession, StdioServerParameters, stdio_client

from bench._common import (
    CountingChannel,
    Row,
    bench_settings,
    fake_openai,
    format_table,
    row,
    running_services,
)
from gateway.llm import ToolCall
from gateway.mcp.setup import MCP
from gateway.tools import ToolContext, ToolOutput

TOOL = "time__get_current_time"
REMOTE = "get_current_time"
ARGUMENTS = {"timezone": "UTC"}
SERVER = {"command": sys.executable, "args": ["-m", "mcp_server_time"]}
CONCURRENCY = 8
TOOL_ROUNDS = 4
SERVERS_AT_START = 5
QUICK: dict[str, Any] = {"turns": 4, "rounds": 1}


async def _calls(turns: int, tmp: Path) -> tuple[list[float], list[float]]:
    """Seconds of each MCP call the turns made (8 chats at once, ``turns`` rounds) and of
    each bare call (8 workers at once, as many calls), rounds alternating so that both
    sides meet the same machine."""
    params = StdioServerParameters(command=str(SERVER["command"]), args=list(SERVER["args"]))
    async with fake_openai(tool_rounds=TOOL_ROUNDS, tool=TOOL) as fake, AsyncExitStack() as stack:
        read, write = await stack.enter_async_context(stdio_client(params))
        bare = await stack.enter_async_context(ClientSession(read, write))
        await bare.initialize()
        await bare.list_tools()
        settings = bench_settings(
            tmp / "state", fake.base_url, main_width=CONCURRENCY, mcp={"servers": {"time": SERVER}}
        )
        channel = CountingChannel()
        async with running_services(settings, tmp, channel) as gw:
            await gw.app[MCP].settled()
            registry = gw.tools
            if TOOL not in registry:
                raise SystemExit(f"bench.mcp: the reference server offers no {TOOL}")
            herald: list[float] = []
            baseline: list[float] = []
            invoke: Callable[[ToolCall, ToolContext, frozenset[str]], Awaitable[ToolOutput]]
            invoke = registry.invoke

            async def timed(call: ToolCall, ctx: ToolContext, allowed: frozenset[str]) -> Any:
                started = time.perf_counter()
                output = await invoke(call, ctx, allowed)
                if call.name == TOOL:
                    if output.is_error:
                        raise SystemExit(f"bench.mcp: the call failed: {output.content}")
                    herald.append(time.perf_counter() - started)
                return output

            async def worker() -> None:
                for _ in range(TOOL_ROUNDS):
                    started = time.perf_counter()
                    result = await bare.call_tool(REMOTE, ARGUMENTS)
                    if result.is_error:
                        raise SystemExit("bench.mcp: the bare call failed")
                    baseline.append(time.perf_counter() - started)

            registry.invoke = timed  # type: ignore[method-assign]
            sent = 0
            for _ in range(turns):
                for chat in range(CONCURRENCY):
                    await channel.receive(channel.message("what time is it?", f"chat-{chat}"))
                sent += CONCURRENCY
                await channel.wait_sent(sent)
                await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
            if len(herald) != turns * CONCURRENCY * TOOL_ROUNDS:
                raise SystemExit(f"bench.mcp: {len(herald)} calls timed")
            return herald, baseline


async def _gateway_start(tmp: Path, servers: int) -> float:
    """Seconds from building the gateway to every one of ``servers`` servers ready."""
    async with fake_openai() as fake:
        mcp = {"servers": {f"time{i}": SERVER for i in range(servers)}}
        settings = bench_settings(tmp / "state", fake.base_url, mcp=mcp)
        started = time.perf_counter()
        async with running_services(settings, tmp, CountingChannel()) as gw:
            if not servers:  # no manager then: the gateway started without the SDK
                return time.perf_counter() - started
            await gw.app[MCP].settled()
            elapsed = time.perf_counter() - started
            states = gw.app[MCP].states()
            if set(states.values()) != {"ready"}:
                raise SystemExit(f"bench.mcp: servers not ready: {states}")
            return elapsed


async def _bare_start() -> float:
    params = StdioServerParameters(command=str(SERVER["command"]), args=list(SERVER["args"]))
    started = time.perf_counter()
    async with AsyncExitStack() as stack:
        read, write = await stack.enter_async_context(stdio_client(params))
        session = await stack.enter_async_context(ClientSession(read, write))
        await session.initialize()
        await session.list_tools()
        return time.perf_counter() - started


async def _measure(turns: int, rounds: int) -> list[Row]:
    herald_p50: list[float] = []
    bare_p50: list[float] = []
    with_servers: list[float] = []
    without: list[float] = []
    slowest: list[float] = []
    for n in range(rounds):
        with tempfile.TemporaryDirectory(prefix="herald-bench-") as tmp:
            herald, baseline = await _calls(turns, Path(tmp))
        herald_p50.append(statistics.median(herald))
        bare_p50.append(statistics.median(baseline))
        with tempfile.TemporaryDirectory(prefix="herald-bench-") as tmp:
            with_servers.append(await _gateway_start(Path(tmp) / f"a{n}", SERVERS_AT_START))
        with tempfile.TemporaryDirectory(prefix="herald-bench-") as tmp:
            without.append(await _gateway_start(Path(tmp) / f"b{n}", 0))
        bare = await asyncio.gather(*(_bare_start() for _ in range(SERVERS_AT_START)))
        slowest.append(max(bare))
    call_ms = statistics.median(herald_p50) * 1000
    bare_ms = statistics.median(bare_p50) * 1000
    start = statistics.median(with_servers)
    bound = statistics.median(without) + statistics.median(slowest)
    return [
        row("MCP call in a turn, p50, 8 at once (ms)", call_ms, bare_ms, "<= 1.3x"),
        row("start with 5 stdio servers (s)", start, bound, "<= 1x"),
    ]


def run(turns: int = 25, rounds: int = 3) -> list[Row]:
    """``turns`` turns in each of 8 chats (4 MCP calls each); ``rounds`` medians."""
    rows = asyncio.run(_measure(turns, rounds))
    print(format_table(rows))
    return rows


if __name__ == "__main__":
    run()
