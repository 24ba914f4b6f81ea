"""A replica killed with SIGKILL mid-run: another replica takes its run over and resumes it
from the transcript, and never while the first one lives."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import signal
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import aiohttp
import psycopg
import pytest

from tests.gateway.daemon_process import QUICK_HERALD, free_port, herald, write_config
from tests.gateway.harness import FAST_TIMING, HANG_GUARD_SECONDS, Harness, running_gateway
from tests.gateway.quick_herald import QUICK

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

#: The killed replica's model never answers; the survivor's answers at once.
SLOW_SCRIPT: dict[str, Any] = {
    "rules": [{"match": r"^task: (.+)$", "reply": "slow $1", "delaySeconds": 600}],
    "default": {"reply": "?"},
}
QUICK_SCRIPT: dict[str, Any] = {
    "rules": [
        {"match": r"^\[announce\]", "reply": "ANNOUNCE {lastAssistant}"},
        {"match": r"^task: (.+)$", "reply": "done $1"},
        {"match": r"^focus on (.+)$", "reply": "done, focused on $1"},
    ],
    "default": {"reply": "?"},
}
#: The survivor's queue is the killed replica's (it beats every half second, and a worker
#: silent for 5 s is dead): the survivor takes a run over seconds after the kill.
SURVIVOR_TIMING = dataclasses.replace(FAST_TIMING, queue=QUICK.queue)


async def run_status(pg_url: str, run_id: str) -> str | None:
    async with await psycopg.AsyncConnection.connect(pg_url) as conn:
        cursor = await conn.execute("SELECT status FROM runs WHERE run_id = %s", [run_id])
        row = await cursor.fetchone()
        return None if row is None else str(row[0])


async def until_status(pg_url: str, run_id: str, status: str) -> None:
    async with asyncio.timeout(HANG_GUARD_SECONDS):
        while True:
            if await run_status(pg_url, run_id) == status:
                return
            await asyncio.sleep(0.1)


def doomed_config(tmp_path: Path, pg_url: str, port: int) -> Path:
    """The configuration of the replica to be killed: its model never answers."""
    script = tmp_path / "slow.json"
    script.write_text(json.dumps(SLOW_SCRIPT), encoding="utf-8")
    return write_config(
        tmp_path / "herald.json",
        {
            "gateway": {"port": port, "stateDir": str(tmp_path / "state")},
            "agent": {"model": "test/m1"},
            "models": {
                "providers": {
                    "test": {"api": "scripted", "script": str(script), "models": [{"id": "m1"}]}
                }
            },
            "channels": {"webchat": {"enabled": False}},
            "cluster": {"databaseUrl": pg_url, "replicaId": "doomed"},
        },
    )


async def spawn_on(url: str, task: str) -> str:
    """Spawn ``task`` through the gateway at ``url``; its run id."""
    async with aiohttp.ClientSession() as http:
        spawn = {"tool": "sessions_spawn", "args": {"task": task}}
        async with http.post(f"{url}/v1/tools/invoke", json=spawn) as response:
            assert response.status == 200, await response.text()
            return str((await response.json())["result"]["runId"])


def survivor_of(tmp_path: Path, pg_url: str) -> AbstractAsyncContextManager[Harness]:
    """The replica that outlives the doomed one: same database and state directory."""
    (tmp_path / "survivor").mkdir()
    return running_gateway(
        tmp_path / "survivor",
        script=QUICK_SCRIPT,
        state_dir=tmp_path / "state",
        database_url=pg_url,
        replica_id="survivor",
        timing=SURVIVOR_TIMING,
    )


async def test_a_killed_replicas_run_is_resumed_by_another(tmp_path: Path, pg_url: str) -> None:
    port = free_port()
    path = doomed_config(tmp_path, pg_url, port)
    async with herald("run", "--config", str(path), port=port, command=QUICK_HERALD) as doomed:
        await doomed.wait_healthy()
        run_id = await spawn_on(doomed.url, "task: failover")
        await until_status(pg_url, run_id, "running")
        async with survivor_of(tmp_path, pg_url) as survivor:
            # Started while the run's replica lives: the run is not the survivor's.
            assert survivor.lanes.subagent.stats().submitted == 0
            assert await run_status(pg_url, run_id) == "running"
            doomed.process.send_signal(signal.SIGKILL)
            assert await doomed.wait_exit() == -signal.SIGKILL
            await until_status(pg_url, run_id, "done")
            run = await survivor.db.runs.get(run_id)
            assert run is not None
            assert run.progress.result_text == "done failover"
            assert survivor.lanes.subagent.stats().done == 1
            records = (await survivor.store.read(run.child_session_key)).records
            events = [r.get("event") for r in records if r["type"] == "event"]
            assert "resumed" in events  # from its transcript, as after a restart
            said = [r["message"]["content"] for r in records if r["type"] == "message"]
            assert said.count("task: failover") == 1  # the task was not given again


async def test_a_steer_to_a_killed_replicas_run_reaches_it_where_it_resumes(
    tmp_path: Path, pg_url: str
) -> None:
    port = free_port()
    path = doomed_config(tmp_path, pg_url, port)
    async with herald("run", "--config", str(path), port=port, command=QUICK_HERALD) as doomed:
        await doomed.wait_healthy()
        run_id = await spawn_on(doomed.url, "task: steered")
        await until_status(pg_url, run_id, "running")
        async with survivor_of(tmp_path, pg_url) as survivor:
            run = await survivor.db.runs.get(run_id)
            assert run is not None
            assert run.request.parent_session_key is not None
            # Given on the survivor while the run executes on the doomed replica, which
            # dies before its model call returns: the steer is never read there.
            steered = await survivor.subagents.control.steer(
                run.request.parent_session_key, run_id, "focus on prices"
            )
            doomed.process.send_signal(signal.SIGKILL)
            assert await doomed.wait_exit() == -signal.SIGKILL
            await until_status(pg_url, run_id, "done")
            run = await survivor.db.runs.get(run_id)
            assert run is not None
            records = (await survivor.store.read(run.child_session_key)).records
            waiting = await survivor.db.steers.waiting(run_id)
    assert steered == {"status": "steered", "runId": run_id}
    assert run.progress.result_text == "done, focused on prices"
    said = [r["message"]["content"] for r in records if r["type"] == "message"]
    assert said.count("focus on prices") == 1
    assert waiting == []
