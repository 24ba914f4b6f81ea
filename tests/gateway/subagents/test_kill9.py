"""A real gateway killed with SIGKILL mid-run and restarted: nothing lost, nothing twice."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.constants import STATE_DB_NAME
from gateway.state import FINISHED_STATUSES, StateDB
from gateway.subagents.outbox import UNCERTAIN
from tests.gateway.daemon_process import HANG_GUARD_SECONDS, free_port, herald, write_config

pytestmark = pytest.mark.slow

RUNS = 6
SCRIPT = {
    "rules": [
        {"match": r"^\[announce\]", "reply": "ANNOUNCE {lastAssistant}"},
        {
            "match": r"^bg (?P<task>.+)$",
            "reply": "",
            "toolCalls": [{"name": "sessions_spawn", "arguments": {"task": "${task}"}}],
            "afterTool": "accepted {result.runId}",
        },
        {"match": r"^task-slow: (.+)$", "reply": "slow $1", "delaySeconds": 0.4},
    ],
    "default": {"reply": "?"},
}


def config(tmp_path: Path, port: int) -> Path:
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT), encoding="utf-8")
    return write_config(
        tmp_path / "herald.json",
        {
            "gateway": {"port": port, "stateDir": str(tmp_path / "state")},
            "agent": {"model": "t/m", "subagents": {"maxConcurrent": 2}},
            "models": {
                "providers": {
                    "t": {"api": "scripted", "script": str(script), "models": [{"id": "m"}]}
                }
            },
        },
    )


class Chat:
    """A web chat client that keeps every frame it receives."""

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

    async def wait(self, predicate: Any) -> None:
        async with asyncio.timeout(HANG_GUARD_SECONDS), self._changed:
            await self._changed.wait_for(lambda: predicate(self.frames))

    async def close(self) -> None:
        await self.ws.close()
        await self._reader


@contextlib.asynccontextmanager
async def chat(http: aiohttp.ClientSession, url: str) -> Any:
    async with asyncio.timeout(HANG_GUARD_SECONDS):
        while True:
            try:
                ws = await http.ws_connect(f"{url}/webchat/ws")
                break
            except aiohttp.ClientError:
                await asyncio.sleep(0.05)
    client = Chat(ws)
    await ws.send_json({"type": "hello", "clientId": "kill9-client"})
    try:
        yield client
    finally:
        await client.close()


def announces(frames: list[dict[str, Any]]) -> list[str]:
    return [
        f["runId"] for f in frames if f.get("type") == "message" and f.get("kind") == "announce"
    ]


async def test_sigkill_mid_run_then_restart_loses_nothing_and_repeats_nothing(
    tmp_path: Path,
) -> None:
    port = free_port()
    path = config(tmp_path, port)
    seen: Counter[str] = Counter()
    async with aiohttp.ClientSession() as http:
        async with herald("run", "--config", str(path), port=port) as first:
            await first.wait_healthy()
            async with chat(http, first.url) as client:
                for n in range(RUNS):
                    await client.ws.send_json({"type": "message", "text": f"bg task-slow: {n}"})
                await client.wait(lambda fs: sum(1 for f in fs if f.get("kind") == "reply") == RUNS)
                # Kill once some runs are done and others are mid-run.
                await client.wait(
                    lambda fs: (
                        len(announces(fs)) >= 1
                        and any(f.get("type") == "run" and f.get("status") == "running" for f in fs)
                    )
                )
                first.process.send_signal(signal.SIGKILL)
                assert await first.wait_exit() == -signal.SIGKILL
                seen.update(announces(client.frames))
        async with herald("run", "--config", str(path), port=port) as second:
            await second.wait_healthy()
            async with chat(http, second.url) as client:
                await client.wait(lambda fs: len(set(announces(fs)) | set(seen)) == RUNS)
                # The replay of the new process's history may repeat nothing of the old one:
                # it only holds what this process sent.
                seen.update(announces(client.frames))
            second.process.send_signal(signal.SIGTERM)
            assert await second.wait_exit() == 0
    assert len(seen) == RUNS
    assert set(seen.values()) == {1}, seen
    db = await StateDB.open(tmp_path / "state" / STATE_DB_NAME, readonly=True)
    try:
        runs = await db.runs.list()
        outbox = await db.outbox.list()
    finally:
        await db.close()
    assert len(runs) == RUNS
    assert all(run.status in FINISHED_STATUSES for run in runs)
    assert {run.status for run in runs} == {"done"}
    assert sorted(item.run_id or "" for item in outbox) == sorted(run.run_id for run in runs)
    # A kill between a send and its "delivered" record leaves the item "sending"; the restart
    # records it as uncertain instead of sending it twice (at most once). The chat saw each
    # announce exactly once either way (asserted above).
    for item in outbox:
        assert item.state == "delivered" or (
            item.state == "failed" and item.last_error == UNCERTAIN
        ), item
