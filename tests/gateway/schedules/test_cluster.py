"""Two replicas on PostgreSQL firing the same five jobs, one killed with SIGKILL half-way:
each due time is recorded once (no gap, no double), each ``ran`` has exactly one run, and
every run ends done with one announce (but one the last pause withdrew before it started)."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.gateway.daemon_process import (
    QUICK_HERALD,
    daemon_state,
    free_port,
    herald,
    write_config,
)
from tests.gateway.harness import hang_guard
from tests.gateway.schedules.test_kill9 import rows, settled_on, withdrawn_last

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

JOBS = {f"job{n}": 1 for n in range(5)}
OCCURRENCES = 100
SCRIPT = {
    "rules": [
        {"match": r"^\[announce\]", "reply": "ANNOUNCE {lastAssistant}"},
        {"match": r"^tick (\w+)$", "reply": "ticked $1"},
    ],
    "default": {"reply": "?"},
}


def config(tmp_path: Path, name: str, port: int, url: str) -> Path:
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT), encoding="utf-8")
    jobs = [
        {"id": job_id, "every": f"{period}s", "task": f"tick {job_id}", "to": "webchat:room"}
        for job_id, period in JOBS.items()
    ]
    return write_config(
        tmp_path / f"{name}.json",
        {
            "gateway": {"port": port, "stateDir": str(tmp_path / "state")},
            "agent": {"model": "t/m", "subagents": {"maxConcurrent": 4}},
            "models": {
                "providers": {
                    "t": {"api": "scripted", "script": str(script), "models": [{"id": "m"}]}
                }
            },
            "schedules": {"minEverySeconds": 1, "jobs": jobs},
            "cluster": {"databaseUrl": url, "replicaId": name},
        },
    )


async def recorded(state_dir: Path, url: str) -> int:
    db = await daemon_state(state_dir, url)
    try:
        found = await rows(db, "SELECT COUNT(*) AS n FROM schedule_occurrences")
    finally:
        await db.close()
    return int(found[0]["n"])


async def at_least(state_dir: Path, url: str, count: int) -> None:
    async with hang_guard(f"{count} occurrences"):
        while await recorded(state_dir, url) < count:  # noqa: ASYNC110 - another process
            await asyncio.sleep(0.2)


async def test_two_replicas_run_each_occurrence_once(tmp_path: Path, pg_url: str) -> None:
    state = tmp_path / "state"
    ports = {"r1": free_port(), "r2": free_port()}
    paths = {name: config(tmp_path, name, port, pg_url) for name, port in ports.items()}
    async with herald(
        "run", "--config", str(paths["r2"]), port=ports["r2"], command=QUICK_HERALD
    ) as r2:
        async with herald(
            "run", "--config", str(paths["r1"]), port=ports["r1"], command=QUICK_HERALD
        ) as r1:
            await r1.wait_healthy()
            await r2.wait_healthy()
            await at_least(state, pg_url, OCCURRENCES // 2)
            r1.process.send_signal(signal.SIGKILL)
            assert await r1.wait_exit() == -signal.SIGKILL
        await at_least(state, pg_url, OCCURRENCES)
        async with aiohttp.ClientSession() as http:
            for job_id in JOBS:
                async with http.post(f"{r2.url}/v1/schedules/{job_id}/pause") as response:
                    assert response.status == 200
        # The replica's runs the kill cut off: the same replica, restarted, takes them up.
        async with herald(
            "run", "--config", str(paths["r1"]), port=ports["r1"], command=QUICK_HERALD
        ) as again:
            await again.wait_healthy()
            await settled_on(state, pg_url)
            again.process.send_signal(signal.SIGTERM)
            assert await again.wait_exit() == 0
        r2.process.send_signal(signal.SIGTERM)
        assert await r2.wait_exit() == 0

    db = await daemon_state(state, pg_url)
    try:
        occurrences = await rows(
            db,
            "SELECT job_id, occurrence_at, outcome, run_id FROM schedule_occurrences"
            " ORDER BY job_id, occurrence_at",
        )
        runs = await rows(
            db,
            "SELECT run_id, job_id, occurrence_at, status, announce_state FROM runs"
            " WHERE job_id IS NOT NULL",
        )
        outbox = await rows(db, "SELECT run_id, state FROM outbox WHERE run_id IS NOT NULL")
    finally:
        await db.close()
    assert len(occurrences) >= OCCURRENCES
    for job_id, period in JOBS.items():
        times = [o["occurrence_at"] for o in occurrences if o["job_id"] == job_id]
        assert [round(t - times[0]) for t in times] == list(
            range(0, round(times[-1] - times[0]) + 1, period)
        ), f"{job_id}: a due time skipped or doubled"
    ran: dict[tuple[Any, Any], Any] = {
        (o["job_id"], o["occurrence_at"]): o["run_id"] for o in occurrences if o["outcome"] == "ran"
    }
    assert {(r["job_id"], r["occurrence_at"]): r["run_id"] for r in runs} == ran
    runs = withdrawn_last(runs, occurrences)
    assert {r["status"] for r in runs} == {"done"}
    assert sorted(o["run_id"] for o in outbox) == sorted(r["run_id"] for r in runs)
    assert {o["state"] for o in outbox} == {"delivered"}
