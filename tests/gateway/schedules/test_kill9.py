"""A real gateway killed with SIGKILL while jobs fire, twenty times over, then left to
finish: no occurrence is recorded or run twice, none is skipped silently (every due time
from a job's first to its last is recorded ``ran``, ``missed`` or ``skipped``), each
``ran`` has exactly its run, and every run ends final with one announce — but a run its job
started just as the last life's pause came, still queued, which that pause withdraws (as a
pause does: it ends ``cancelled`` and posts nothing).

Eight kills land at chosen points: at once (the start's catch-up of the due times missed
while it was down), just after each step of an occurrence's way as the gateway logs it (its
run inserted, the occurrence recorded, the run final with its announce queued, the announce
sent: the next step is then under way), and at three seeded moments spread over the two
seconds after the start, where due times fire while earlier runs still run. The other twelve
land at seeded random moments of those two seconds."""

from __future__ import annotations

import asyncio
import json
import random
import signal
from pathlib import Path
from typing import Any, Final

import aiohttp
import pytest

from gateway.state import StateDB
from tests.gateway.daemon_process import daemon_state, free_port, herald, write_config
from tests.gateway.harness import hang_guard

pytestmark = pytest.mark.slow

#: Where each life is cut: a log message, as soon as that life logs it; or a window of
#: seconds after it is healthy, a seeded moment in it (0 to 0: at once).
CUTS: Final[tuple[str | tuple[float, float], ...]] = (
    (0.0, 0.0),
    "sub-agent spawned",
    "scheduled occurrence started",
    "sub-agent finished",
    "announce delivered",
    (0.0, 0.7),
    (0.7, 1.4),
    (1.4, 2.0),
    *[(0.0, 2.0)] * 12,
)
CLIENT_ID = "kill-client"
#: Periods (seconds) of the declared jobs: short, so that kills land while they fire.
PERIODS = {"every1": 1, "every2": 2, "every3": 3}
SCRIPT = {
    "rules": [
        {"match": r"^\[announce\]", "reply": "ANNOUNCE {lastAssistant}"},
        {"match": r"^tick (\w+)$", "reply": "ticked $1"},
    ],
    "default": {"reply": "?"},
}


def config(tmp_path: Path, port: int) -> Path:
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT), encoding="utf-8")
    jobs = [
        {
            "id": job_id,
            "every": f"{period}s",
            "task": f"tick {job_id}",
            "to": f"webchat:{CLIENT_ID}",
        }
        for job_id, period in PERIODS.items()
    ]
    return write_config(
        tmp_path / "herald.json",
        {
            "gateway": {"port": port, "stateDir": str(tmp_path / "state")},
            "agent": {"model": "t/m", "subagents": {"maxConcurrent": 4}},
            "models": {
                "providers": {
                    "t": {"api": "scripted", "script": str(script), "models": [{"id": "m"}]}
                }
            },
            "schedules": {"minEverySeconds": 1, "misfireGraceSeconds": 3600, "jobs": jobs},
        },
    )


#: A run the last pause withdrew before it started (``gateway.state.WITHDRAWN``).
WITHDRAWN_SQL: Final = (
    "(r.status = 'cancelled' AND r.announce_state = 'skipped' AND o.run_id IS NULL)"
)


def withdrawn_last(
    runs: list[dict[str, Any]], occurrences: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The runs withdrawn by the pause that stopped the jobs (each must be its job's last
    occurrence's: nothing else withdraws a run here); the others are returned."""
    last = {o["job_id"]: o["run_id"] for o in occurrences if o["outcome"] == "ran"}
    kept = []
    for run in runs:
        if run["status"] == "cancelled" and run["announce_state"] == "skipped":
            assert last[run["job_id"]] == run["run_id"], f"{run['run_id']} withdrawn mid-way"
        else:
            kept.append(run)
    return kept


async def rows(db: StateDB, sql: str) -> list[dict[str, Any]]:
    """``sql``'s rows by column name (the names as its SELECT list gives them)."""
    listed = sql.split("SELECT ", 1)[1].split(" FROM ", 1)[0]
    names = [part.strip().split()[-1].split(".")[-1] for part in listed.split(",")]

    def read(conn: Any) -> list[dict[str, Any]]:
        return [dict(zip(names, tuple(row), strict=True)) for row in conn.execute(sql).fetchall()]

    return await db.read(read)


async def settled(state_dir: Path, url: str | None = None) -> bool:
    """Every scheduled run is final and its announce delivered, or it was withdrawn (the
    pause that stops the jobs withdraws a run its job started just before, still queued:
    it ends ``cancelled`` and posts nothing)."""
    db = await daemon_state(state_dir, url)
    try:
        open_runs = await rows(
            db,
            "SELECT r.run_id FROM runs r LEFT JOIN outbox o ON o.run_id = r.run_id"
            " WHERE r.job_id IS NOT NULL AND (r.status NOT IN ('done', 'error', 'timeout',"
            " 'cancelled', 'interrupted') OR ((o.state IS NULL OR o.state != 'delivered')"
            f" AND NOT {WITHDRAWN_SQL}))",
        )
        ran = await rows(db, "SELECT COUNT(*) AS n FROM runs WHERE job_id IS NOT NULL")
    finally:
        await db.close()
    return not open_runs and ran[0]["n"] > 0


async def settled_on(state_dir: Path, url: str | None = None) -> None:
    """Wait until :func:`settled`."""
    async with hang_guard("scheduled runs settling"):
        while not await settled(state_dir, url):  # noqa: ASYNC110 - another process
            await asyncio.sleep(0.1)


async def test_sigkill_while_jobs_fire_neither_doubles_nor_drops_an_occurrence(
    tmp_path: Path,
) -> None:
    port = free_port()
    path = config(tmp_path, port)
    seed = random.randrange(1 << 30)
    moments = random.Random(seed)
    for cut in CUTS:
        async with herald("run", "--config", str(path), port=port) as daemon:
            await daemon.wait_healthy()
            if isinstance(cut, str):
                await daemon.wait_log(cut)
            else:
                await asyncio.sleep(moments.uniform(*cut))  # a seeded moment, not a wait
            daemon.process.send_signal(signal.SIGKILL)
            assert await daemon.wait_exit() == -signal.SIGKILL
    async with herald("run", "--config", str(path), port=port) as last:
        await last.wait_healthy()
        # Stop the jobs from firing (paused jobs fire no more), then let every run end.
        async with aiohttp.ClientSession() as http:
            for job_id in PERIODS:
                async with http.post(f"{last.url}/v1/schedules/{job_id}/pause") as response:
                    assert response.status == 200
        await settled_on(tmp_path / "state")
        last.process.send_signal(signal.SIGTERM)
        assert await last.wait_exit() == 0

    db = await daemon_state(tmp_path / "state", None)
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

    for job_id, period in PERIODS.items():
        times = [o["occurrence_at"] for o in occurrences if o["job_id"] == job_id]
        assert times, f"{job_id} never fired (seed {seed})"
        # From the first due time to the last, every one recorded, once.
        assert [round(t - times[0]) for t in times] == list(
            range(0, round(times[-1] - times[0]) + 1, period)
        ), f"{job_id}: a due time skipped or doubled (seed {seed})"
    ran = {
        (o["job_id"], o["occurrence_at"]): o["run_id"] for o in occurrences if o["outcome"] == "ran"
    }
    by_occurrence = {(r["job_id"], r["occurrence_at"]): r["run_id"] for r in runs}
    assert by_occurrence == ran, f"runs and ran occurrences differ (seed {seed})"
    runs = withdrawn_last(runs, occurrences)
    assert {r["status"] for r in runs} == {"done"}
    announces = [o["run_id"] for o in outbox]
    assert sorted(announces) == sorted(r["run_id"] for r in runs)
    assert {o["state"] for o in outbox} == {"delivered"}
