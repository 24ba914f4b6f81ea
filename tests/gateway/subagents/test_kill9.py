"""A real gateway killed with SIGKILL mid-run and restarted: nothing lost, nothing twice."""

from __future__ import annotations

import json
import signal
from collections import Counter
from pathlib import Path

import aiohttp
import pytest

from gateway.state import FINISHED_STATUSES
from tests.gateway.daemon_process import (
    QUICK_HERALD,
    daemon_state,
    free_port,
    herald,
    on_backend,
    webchat_page,
    write_config,
)

pytestmark = pytest.mark.slow

RUNS = 6
CLIENT_ID = "kill9-client"
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


def config(tmp_path: Path, port: int, database_url: str | None) -> Path:
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT), encoding="utf-8")
    data = {
        "gateway": {"port": port, "stateDir": str(tmp_path / "state")},
        "agent": {"model": "t/m", "subagents": {"maxConcurrent": 2}},
        "models": {
            "providers": {"t": {"api": "scripted", "script": str(script), "models": [{"id": "m"}]}}
        },
    }
    return write_config(tmp_path / "herald.json", on_backend(data, database_url))


async def test_sigkill_mid_run_then_restart_loses_nothing_and_repeats_nothing(
    tmp_path: Path, database_url: str | None
) -> None:
    # On PostgreSQL the runs the kill cut off are taken over by the stalled-job check (a
    # dead worker is known after 5 s with QUICK_HERALD, 30 s by default).
    port = free_port()
    path = config(tmp_path, port, database_url)
    seen: dict[str, str] = {}  # announce message id → run id, across both processes
    async with aiohttp.ClientSession() as http:
        async with herald("run", "--config", str(path), port=port, command=QUICK_HERALD) as first:
            await first.wait_healthy()
            async with webchat_page(http, first.url, CLIENT_ID) as client:
                for n in range(RUNS):
                    await client.ws.send_json({"type": "message", "text": f"bg task-slow: {n}"})
                await client.wait(lambda fs: sum(1 for f in fs if f.get("kind") == "reply") == RUNS)
                # Kill once some runs are done and others are mid-run.
                await client.wait(
                    lambda fs: (
                        len(client.announced()) >= 1
                        and any(f.get("type") == "run" and f.get("status") == "running" for f in fs)
                    )
                )
                first.process.send_signal(signal.SIGKILL)
                assert await first.wait_exit() == -signal.SIGKILL
                seen.update(client.announced_ids())
        async with herald("run", "--config", str(path), port=port, command=QUICK_HERALD) as second:
            await second.wait_healthy()
            async with webchat_page(http, second.url, CLIENT_ID) as client:
                await client.wait(
                    lambda fs: len(set(client.announced()) | set(seen.values())) == RUNS
                )
                # The page is replayed what the first process sent it (the web chat keeps a
                # history file), with the same message ids: counted by id, never twice.
                seen.update(client.announced_ids())
            second.process.send_signal(signal.SIGTERM)
            assert await second.wait_exit() == 0
    per_run = Counter(seen.values())
    assert len(per_run) == RUNS
    assert set(per_run.values()) == {1}, per_run
    db = await daemon_state(tmp_path / "state", database_url)
    try:
        runs = await db.runs.list()
        outbox = await db.outbox.list()
    finally:
        await db.close()
    assert len(runs) == RUNS
    assert all(run.progress.status in FINISHED_STATUSES for run in runs)
    assert {run.progress.status for run in runs} == {"done"}
    assert sorted(item.run_id or "" for item in outbox) == sorted(run.run_id for run in runs)
    # A kill between a send and its "delivered" record leaves the item "sending"; the restart
    # asks the web chat's history (found: delivered; not found: sent again), so every
    # announce ends delivered, and the chat saw each exactly once (asserted above).
    for item in outbox:
        assert item.state == "delivered", item
