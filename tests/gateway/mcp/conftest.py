"""MCP servers for the tests: the official reference server ``mcp-server-time`` (a dev
dependency) and the SDK-written fake of :mod:`tests.fakes.mcp_server`, over stdio or over
Streamable HTTP (a process of its own on a free loopback port)."""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.gateway.harness import hang_guard

#: The repository root: where ``python -m tests.fakes.mcp_server`` finds its module.
ROOT = Path(__file__).resolve().parents[3]


def fake_stdio(marks: Path | None = None, **extra: Any) -> dict[str, Any]:
    """The config of the fake server over stdio (``--marks`` given when ``marks`` is)."""
    args = ["-m", "tests.fakes.mcp_server"]
    if marks is not None:
        args += ["--marks", str(marks)]
    return {"command": sys.executable, "args": args, "cwd": str(ROOT), **extra}


def time_stdio() -> dict[str, Any]:
    """The config of the official reference server ``mcp-server-time``."""
    return {"command": sys.executable, "args": ["-m", "mcp_server_time"]}


async def until(condition: Callable[[], bool], what: str) -> None:
    """Wait until ``condition()`` holds (checked every 20 ms), failing after the hang guard."""
    async with hang_guard(what):
        # Files another process writes and a server's state have no event to wait on.
        while not condition():  # noqa: ASYNC110
            await asyncio.sleep(0.02)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


HttpServer = Callable[..., Awaitable[str]]


@pytest.fixture
async def http_server(tmp_path: Path) -> AsyncIterator[HttpServer]:
    """Start the fake server over Streamable HTTP; returns its URL. Stopped at the end."""
    started: list[asyncio.subprocess.Process] = []

    async def start(marks: Path | None = None, port: int | None = None) -> str:
        port = port or free_port()
        args = [sys.executable, "-m", "tests.fakes.mcp_server", "--http", str(port)]
        if marks is not None:
            args += ["--marks", str(marks)]
        with (tmp_path / f"http-{port}.log").open("wb") as log:
            process = await asyncio.create_subprocess_exec(*args, cwd=ROOT, stdout=log, stderr=log)
        started.append(process)

        def accepting() -> bool:
            with socket.socket() as sock:
                return sock.connect_ex(("127.0.0.1", port)) == 0

        await until(accepting, "the MCP HTTP server's start")
        return f"http://127.0.0.1:{port}/mcp"

    yield start
    for process in started:
        if process.returncode is None:
            process.terminate()
    for process in started:
        try:
            await asyncio.wait_for(process.wait(), 10)
        except TimeoutError:
            process.kill()
            await process.wait()
