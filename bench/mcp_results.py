"""Issue 35: a large MCP result, and ``/healthz`` while it is read
(``python -m bench.mcp_results``).

A gateway listening on loopback runs the stdio server :mod:`bench._mcp_big`; its tool
``big`` answers with one text block of 10, 20 and 40 MiB, called through Herald's tool (the
client session, the stdio reader, the cut to ``agent.tools.maxResultChars``). Meanwhile a
child process polls ``GET /healthz`` one request at a time.

Figures (medians of ``calls`` rounds):

- each size's wall time beside a bare client's: raw JSON-RPC lines on the same server's pipes,
  the response line read by ``asyncio``'s stream reader and nothing parsed (the server's own
  cost and the pipe's, which dominate);
- the gateway's CPU seconds for 40 MiB beside four times those for 10 MiB (linear: ratio
  near 1; the SDK's quadratic line assembly spent 19 CPU-s on 40 MiB);
- 10 MiB through the SDK's own ``stdio_client`` (what Herald used before), for scale;
- ``/healthz`` p99 during 40 MiB calls beside ``/healthz`` p99 of the same poller while
  nothing else runs (goal: under 50 ms); the calls are timed in a pass of their own, as the
  poller's requests take the gateway's CPU too.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from mcp import ClientSession, StdioServerParameters, stdio_client

from bench._common import (
    Row,
    bench_settings,
    fake_openai,
    format_table,
    percentile,
    row,
    running_app,
)
from gateway.mcp.setup import MCP
from gateway.tools import ToolContext

MIB = 1024 * 1024
#: Result sizes in MiB; the first is the one the others are compared with.
SIZES = (10, 20, 40)
SERVER = {"command": sys.executable, "args": ["-m", "bench._mcp_big"]}
TOOL = "big__big"
P99_GOAL_MS = 50.0
QUICK: dict[str, Any] = {"calls": 1, "sizes": (2, 4, 8)}


class Poller:
    """``GET /healthz`` from a child process, one request at a time, until stopped."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._process: asyncio.subprocess.Process | None = None

    async def __aenter__(self) -> Poller:
        self._process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bench.mcp_results",
            "poll",
            self.url,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert self._process.stdout is not None
        await self._process.stdout.readline()  # "polling": its first answer came
        return self

    async def stop(self) -> list[float]:
        """The latencies (seconds) it saw."""
        assert self._process is not None
        assert self._process.stdin is not None
        self._process.stdin.close()
        out, _ = await self._process.communicate()
        latencies: list[float] = orjson.loads(out)
        return latencies

    async def __aexit__(self, *_exc: object) -> None:
        if self._process is not None and self._process.returncode is None:
            self._process.kill()
            await self._process.wait()


async def _poll(url: str) -> None:
    latencies: list[float] = []
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

    async def until_eof() -> None:
        await reader.read()
        stop.set()

    waiter = asyncio.ensure_future(until_eof())
    async with aiohttp.ClientSession() as session:
        first = True
        while not stop.is_set():
            started = time.perf_counter()
            async with session.get(url) as response:
                await response.read()
            latencies.append(time.perf_counter() - started)
            if first:
                sys.stdout.write("polling\n")
                sys.stdout.flush()
                first = False
    await waiter
    sys.stdout.write(orjson.dumps(latencies[1:]).decode())


async def _herald(calls: int, sizes: tuple[int, ...], tmp: Path) -> dict[str, Any]:
    """Per size: call seconds and CPU seconds; /healthz latencies idle and during calls."""
    async with fake_openai() as fake:
        settings = bench_settings(tmp / "state", fake.base_url, mcp={"servers": {"big": SERVER}})
        async with running_app(settings, tmp) as (url, gw):
            await gw.app[MCP].settled()
            tool = gw.tools.get(TOOL)
            if tool is None:
                raise SystemExit(f"bench.mcp_results: no tool {TOOL}")
            workspace = tmp / "workspace"
            workspace.mkdir()
            ctx = ToolContext(
                agent_id="main", session_key="bench", workspace=workspace, settings=settings
            )
            limit = settings.agent.tools.max_result_chars

            async def call(chars: int) -> tuple[float, float]:
                params = tool.params.model_validate({"chars": chars})
                started, cpu = time.perf_counter(), time.process_time()
                output = await tool.run(params, ctx)
                elapsed, used = time.perf_counter() - started, time.process_time() - cpu
                if output.is_error or len(output.content) > limit:
                    raise SystemExit(f"bench.mcp_results: {output.content[:300]}")
                return elapsed, used

            await call(MIB)  # warm: the session, the first large line
            async with Poller(f"{url}/healthz") as idle_poller:
                await asyncio.sleep(2.0)  # the poller alone, for as long as a few calls
                idle = await idle_poller.stop()
            times: dict[int, list[float]] = {}
            cpu: dict[int, list[float]] = {}
            # Timed without the poller: its requests take the gateway's CPU too.
            for _ in range(calls):
                for size in sizes:
                    elapsed, used = await call(size * MIB)
                    times.setdefault(size, []).append(elapsed)
                    cpu.setdefault(size, []).append(used)
            async with Poller(f"{url}/healthz") as busy_poller:
                for _ in range(calls):
                    await call(max(sizes) * MIB)
                busy = await busy_poller.stop()
    return {"times": times, "cpu": cpu, "idle": idle, "busy": busy}


class BareClient:
    """JSON-RPC lines written to the server and read back, nothing parsed but the line's end."""

    def __init__(self) -> None:
        self._process: asyncio.subprocess.Process | None = None
        self._next_id = 0

    async def __aenter__(self) -> BareClient:
        self._process = await asyncio.create_subprocess_exec(
            str(SERVER["command"]),
            *SERVER["args"],
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            limit=64 * MIB,  # the reader's line limit: a 40 MiB line is one line
        )
        init = {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "bench", "version": "0"},
        }
        await self._request("initialize", init)
        await self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return self

    async def __aexit__(self, *_exc: object) -> None:
        if self._process is not None and self._process.stdin is not None:
            self._process.stdin.close()
            await self._process.wait()

    async def _send(self, message: dict[str, Any]) -> None:
        assert self._process is not None
        assert self._process.stdin is not None
        self._process.stdin.write(orjson.dumps(message) + b"\n")
        await self._process.stdin.drain()

    async def _request(self, method: str, params: dict[str, Any]) -> bytes:
        assert self._process is not None
        assert self._process.stdout is not None
        self._next_id += 1
        await self._send(
            {"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params}
        )
        return await self._process.stdout.readline()

    async def call(self, chars: int) -> float:
        started = time.perf_counter()
        line = await self._request("tools/call", {"name": "big", "arguments": {"chars": chars}})
        elapsed = time.perf_counter() - started
        if len(line) < chars:
            raise SystemExit(f"bench.mcp_results: the bare call got {len(line)} bytes")
        return elapsed


async def _bare(calls: int, sizes: tuple[int, ...]) -> dict[int, list[float]]:
    times: dict[int, list[float]] = {}
    async with BareClient() as client:
        await client.call(MIB)
        for _ in range(calls):
            for size in sizes:
                times.setdefault(size, []).append(await client.call(size * MIB))
    return times


async def _sdk_call(chars: int) -> float:
    """Seconds for one ``big`` call of ``chars`` through the SDK's own stdio client."""
    params = StdioServerParameters(command=str(SERVER["command"]), args=list(SERVER["args"]))
    async with AsyncExitStack() as stack:
        read, write = await stack.enter_async_context(stdio_client(params))
        session = await stack.enter_async_context(ClientSession(read, write))
        await session.initialize()
        started = time.perf_counter()
        await session.call_tool("big", {"chars": chars})
        return time.perf_counter() - started


async def _measure(calls: int, sizes: tuple[int, ...]) -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="herald-bench-") as tmp:
        herald = await _herald(calls, sizes, Path(tmp))
    bare = await _bare(calls, sizes)
    first, largest = sizes[0], max(sizes)
    sdk = await _sdk_call(first * MIB)
    wall = {size: statistics.median(values) for size, values in herald["times"].items()}
    cpu = {size: statistics.median(values) for size, values in herald["cpu"].items()}
    ms = 1000.0
    return [
        *(
            row(
                f"{s} MiB MCP result vs bare client (s)",
                wall[s],
                statistics.median(bare[s]),
                "report",
            )
            for s in sizes
        ),
        row(f"{first} MiB MCP result vs SDK's stdio_client (s)", wall[first], sdk, "< 1x"),
        *(
            row(
                f"gateway CPU-s: {s} MiB vs {s // first}x {first} MiB",
                cpu[s],
                s // first * cpu[first],
                "~1x (linear)",
                digits=4,
            )
            for s in sizes[1:]
        ),
        row(
            f"/healthz p99 during {largest} MiB calls vs idle (ms)",
            percentile(herald["busy"], 99) * ms,
            percentile(herald["idle"], 99) * ms,
            f"herald < {P99_GOAL_MS:g} ms",
        ),
        row(
            f"/healthz p50 during {largest} MiB calls vs idle (ms)",
            percentile(herald["busy"], 50) * ms,
            percentile(herald["idle"], 50) * ms,
            "report",
        ),
    ]


def run(calls: int = 3, sizes: tuple[int, ...] = SIZES) -> list[Row]:
    """``calls`` rounds of one call of each of ``sizes`` (MiB); medians."""
    rows = asyncio.run(_measure(calls, sizes))
    print(format_table(rows))
    return rows


if __name__ == "__main__":
    if sys.argv[1:2] == ["poll"]:
        asyncio.run(_poll(sys.argv[2]))
    else:
        run()
