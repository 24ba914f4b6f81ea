"""A real ``herald run`` subprocess for tests: free port, temp state dir, JSON log lines."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import aiohttp

from gateway.constants import STATE_DB_NAME
from gateway.state import SqliteStateDB, StateDB
from gateway.state.postgres import PgStateDB

HERALD = [sys.executable, "-m", "gateway"]
#: ``herald`` at test speed
#: (:mod:`tests.gateway.quick_herald`): for tests that wait for a takeover.
QUICK_HERALD = [sys.executable, "-m", "tests.gateway.quick_herald"]
#: Guard against a hung test; never an assertion about speed.
HANG_GUARD_SECONDS = 60


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def write_config(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def on_backend(data: dict[str, Any], database_url: str | None) -> dict[str, Any]:
    """``data`` (a configuration) on PostgreSQL when ``database_url`` is given: a one-replica
    cluster with a fixed ``replicaId`` (one ``herald@.service`` instance), so a restarted
    process is the same replica and takes up its own work at once."""
    if database_url is None:
        return data
    return {**data, "cluster": {"databaseUrl": database_url, "replicaId": "r1"}}


async def daemon_state(state_dir: Path, database_url: str | None) -> StateDB:
    """A daemon's state database, read-only, on its backend (close it after)."""
    if database_url is None:
        return await SqliteStateDB.open(state_dir / STATE_DB_NAME, readonly=True)
    return await PgStateDB.connect(
        database_url, readonly=True, replica_id="test-reader", state_dir=state_dir
    )


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERALD_")}
    env.pop("NOTIFY_SOCKET", None)
    env.update(extra)
    return env


class Daemon:
    """A started ``herald run``; ``logs`` collects its JSON log lines as they arrive."""

    def __init__(self, process: asyncio.subprocess.Process, port: int) -> None:
        self.process = process
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.logs: list[dict[str, Any]] = []
        self.raw: list[str] = []
        self._changed = asyncio.Condition()
        self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        assert self.process.stdout is not None
        async for line in self.process.stdout:
            text = line.decode(errors="replace").rstrip("\n")
            async with self._changed:
                self.raw.append(text)
                with contextlib.suppress(ValueError):
                    self.logs.append(json.loads(text))
                self._changed.notify_all()

    async def wait_log(self, msg: str, count: int = 1) -> dict[str, Any]:
        async with asyncio.timeout(HANG_GUARD_SECONDS), self._changed:
            await self._changed.wait_for(
                lambda: (
                    sum(1 for r in self.logs if r.get("msg") == msg) >= count
                    or self.process.returncode is not None
                )
            )
        matches = [r for r in self.logs if r.get("msg") == msg]
        assert len(matches) >= count, f"{msg!r} not logged; log:\n" + "\n".join(self.raw)
        return matches[count - 1]

    async def wait_healthy(self) -> None:
        async with asyncio.timeout(HANG_GUARD_SECONDS), aiohttp.ClientSession() as http:
            while True:
                if self.process.returncode is not None:
                    raise AssertionError("daemon exited:\n" + "\n".join(self.raw))
                with contextlib.suppress(aiohttp.ClientError):
                    async with http.get(f"{self.url}/healthz") as response:
                        if response.status == 200:
                            return
                await asyncio.sleep(0.05)

    async def wait_exit(self) -> int:
        async with asyncio.timeout(HANG_GUARD_SECONDS):
            code = await self.process.wait()
            await self._reader
        return code

    async def kill(self) -> None:
        if self.process.returncode is None:
            self.process.kill()
        await self.wait_exit()


@contextlib.asynccontextmanager
async def herald(
    *args: str,
    env: dict[str, str] | None = None,
    port: int | None = None,
    command: Sequence[str] = HERALD,
) -> AsyncIterator[Daemon]:
    """Start ``herald <args>`` (``command``: :data:`QUICK_HERALD` for a quick takeover);
    kill it on exit if it is still running."""
    process = await asyncio.create_subprocess_exec(
        *command,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=env if env is not None else clean_env(),
        cwd=Path(__file__).resolve().parents[2],
    )
    daemon = Daemon(process, port or 0)
    try:
        yield daemon
    finally:
        await daemon.kill()


def daemon_config(tmp_path: Path, port: int, **extra: Any) -> Path:
    data: dict[str, Any] = {
        "gateway": {"port": port, "stateDir": str(tmp_path / "state"), "shutdownDrainSeconds": 1},
        "channels": {"webchat": {"enabled": False}},
    }
    for key, value in extra.items():
        data[key] = value
    return write_config(tmp_path / "herald.json", data)


class WebchatPage:
    """A web chat page (a WebSocket client), keeping every frame it receives."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.frames: list[dict[str, Any]] = []
        self._changed = asyncio.Condition()
        self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        with contextlib.suppress(aiohttp.ClientError, ConnectionResetError):
            async for message in self.ws:
                if message.type == aiohttp.WSMsgType.TEXT:
                    async with self._changed:
                        self.frames.append(json.loads(message.data))
                        self._changed.notify_all()
        async with self._changed:
            self._changed.notify_all()

    async def wait(self, predicate: Callable[[list[dict[str, Any]]], bool]) -> None:
        async with asyncio.timeout(HANG_GUARD_SECONDS), self._changed:
            await self._changed.wait_for(lambda: predicate(self.frames) or self._reader.done())
        assert predicate(self.frames), "the page's socket closed first"

    def announced_ids(self) -> dict[str, str]:
        """Announce frames by message id → run id. A page that reconnects to a restarted
        gateway is replayed what it was sent before, with the same ids (as the page dedupes)."""
        return {
            str(f["id"]): str(f["runId"])
            for f in self.frames
            if f.get("type") == "message" and f.get("kind") == "announce"
        }

    def announced(self) -> list[str]:
        return [
            str(f["runId"])
            for f in self.frames
            if f.get("type") == "message" and f.get("kind") == "announce"
        ]

    async def close(self) -> None:
        await self.ws.close()
        await self._reader


@contextlib.asynccontextmanager
async def webchat_page(
    http: aiohttp.ClientSession, url: str, client_id: str
) -> AsyncIterator[WebchatPage]:
    """Open a page on the web chat at ``url``, say hello as ``client_id``, wait for ``ready``."""
    async with asyncio.timeout(HANG_GUARD_SECONDS):
        while True:
            try:
                ws = await http.ws_connect(f"{url}/webchat/ws")
                break
            except aiohttp.ClientError:
                await asyncio.sleep(0.02)
    client = WebchatPage(ws)
    try:
        await ws.send_json({"type": "hello", "clientId": client_id})
        await client.wait(lambda fs: any(f.get("type") == "ready" for f in fs))
        yield client
    finally:
        await client.close()
