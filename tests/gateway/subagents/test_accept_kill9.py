"""A real gateway killed with SIGKILL right after it accepted a burst of spawns: every run it
answered ``accepted`` for runs and announces after the restart.

The spawns arrive together (so they share group commits) while the ``subagent`` lane is
held, so they are all still queued when the process dies: their transcripts were never
begun (the accept path writes only the database rows). The restarted gateway runs each one,
begins its transcript (header first, then its ``spawned`` event) and announces it to the
web chat that asked.
"""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.constants import STATE_DB_NAME
from gateway.state import SqliteStateDB
from tests.gateway.daemon_process import free_port, herald, webchat_page, write_config

pytestmark = pytest.mark.slow

SPAWNS = 24
CLIENT_ID = "accept-client"
SESSION_KEY = f"agent:main:webchat:{CLIENT_ID}"
#: Holds the lane (width 1) until the kill, however long the burst takes to be accepted.
HOLD_SECONDS = 3600.0


def script(hold_seconds: float) -> dict[str, Any]:
    return {
        "rules": [
            {"match": r"^\[announce\]", "reply": "ANNOUNCE {lastAssistant}"},
            {"match": r"^hello$", "reply": "hi"},
            {"match": r"^hold$", "reply": "held", "delaySeconds": hold_seconds},
            {"match": r"^job-(\d+)$", "reply": "result $1"},
        ],
        "default": {"reply": "?"},
    }


def config(tmp_path: Path, port: int, *, hold_seconds: float) -> Path:
    """The config (and its model's script: the held run waits ``hold_seconds``)."""
    script_path = tmp_path / "script.json"
    script_path.write_text(json.dumps(script(hold_seconds)), encoding="utf-8")
    return write_config(
        tmp_path / "herald.json",
        {
            "gateway": {"port": port, "stateDir": str(tmp_path / "state")},
            "agent": {
                "model": "t/m",
                "subagents": {"maxConcurrent": 1, "maxChildrenPerSession": 100},
            },
            "models": {
                "providers": {
                    "t": {"api": "scripted", "script": str(script_path), "models": [{"id": "m"}]}
                }
            },
        },
    )


async def spawn(http: aiohttp.ClientSession, url: str, task: str) -> str:
    body = {"tool": "sessions_spawn", "args": {"task": task}, "sessionKey": SESSION_KEY}
    async with http.post(f"{url}/v1/tools/invoke", json=body) as response:
        answer: dict[str, Any] = await response.json()
    assert response.status == 200, answer
    assert answer["result"]["status"] == "accepted", answer
    return str(answer["result"]["runId"])


def transcript_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


async def test_sigkill_after_accepted_spawns_loses_no_run(tmp_path: Path) -> None:
    port = free_port()
    path = config(tmp_path, port, hold_seconds=HOLD_SECONDS)
    async with aiohttp.ClientSession() as http:
        async with herald("run", "--config", str(path), port=port) as first:
            await first.wait_healthy()
            async with webchat_page(http, first.url, CLIENT_ID) as client:
                await client.ws.send_json({"type": "message", "text": "hello"})
                await client.wait(lambda fs: any(f.get("kind") == "reply" for f in fs))
            held = await spawn(http, first.url, "hold")
            accepted = await asyncio.gather(
                *(spawn(http, first.url, f"job-{n}") for n in range(SPAWNS))
            )
            first.process.send_signal(signal.SIGKILL)
            assert await first.wait_exit() == -signal.SIGKILL

        db = await SqliteStateDB.open(tmp_path / "state" / STATE_DB_NAME, readonly=True)
        try:
            queued = {run.run_id: run for run in await db.runs.list(statuses=["queued"])}
        finally:
            await db.close()
        # Every accepted run is recorded, and none had its transcript begun at accept.
        assert set(accepted) <= set(queued)
        assert not [r for r in queued.values() if Path(r.progress.transcript_path or "").exists()]

        config(tmp_path, port, hold_seconds=0)  # the held run is quick after the restart
        async with herald("run", "--config", str(path), port=port) as second:
            await second.wait_healthy()
            async with webchat_page(http, second.url, CLIENT_ID) as client:
                await client.wait(lambda fs: {held, *accepted} <= set(client.announced()))
            second.process.send_signal(signal.SIGTERM)
            assert await second.wait_exit() == 0

    db = await SqliteStateDB.open(tmp_path / "state" / STATE_DB_NAME, readonly=True)
    try:
        runs = {run.run_id: run for run in await db.runs.list()}
    finally:
        await db.close()
    for run_id in accepted:
        run = runs[run_id]
        assert run.progress.status == "done", run
        lines = transcript_lines(Path(run.progress.transcript_path or ""))
        assert lines[0]["type"] == "session"
        assert lines[0]["id"] == run.child_session_id
        assert lines[0]["key"] == run.child_session_key
        assert lines[1]["type"] == "event"
        assert lines[1]["event"] == "spawned"
        assert lines[1]["data"]["runId"] == run_id
        assert [line["type"] for line in lines[2:]].count("session") == 0
