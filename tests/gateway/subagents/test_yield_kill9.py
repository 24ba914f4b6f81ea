"""A real gateway killed with SIGKILL around a ``sessions_yield`` batch, then restarted: the
follow-up happens exactly once — its user message written once, its reply queued once and
shown to the chat once — wherever the kill landed. On both state backends: on PostgreSQL
the gateway is a one-replica cluster (``cluster.databaseUrl``, a fixed ``replicaId``, as
one instance of ``herald@.service``), restarted under the same id."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

import aiohttp
import pytest

from gateway.delivery import UNCERTAIN
from gateway.sessions import read_transcript
from gateway.state import OutboxRecord
from tests.gateway.daemon_process import (
    QUICK_HERALD,
    Daemon,
    daemon_state,
    free_port,
    herald,
    on_backend,
    webchat_page,
    write_config,
)
from tests.gateway.harness import HANG_GUARD_SECONDS

pytestmark = pytest.mark.slow

CLIENT_ID = "yield-kill9"
SESSION_KEY = f"agent:main:webchat:{CLIENT_ID}"
SCRIPT = {
    "rules": [
        {
            "match": r"^fan$",
            "reply": "",
            "toolCalls": [
                {"name": "sessions_spawn", "arguments": {"task": "task-slow: tea"}},
                {"name": "sessions_spawn", "arguments": {"task": "task-slow: coffee"}},
                {"name": "sessions_yield", "arguments": {"message": "on it"}},
            ],
        },
        {
            "match": r"^\[sub-agent completion\] The sub-agents you waited for",
            "reply": "COMBINED tea and coffee",
            "delaySeconds": 0.6,
        },
        {"match": r"^task-slow: (.+)$", "reply": "slow $1", "delaySeconds": 0.6},
    ],
    "default": {"reply": "?"},
}
#: A cluster's runs cut off by a kill are taken over by the stalled-job check (a dead worker
#: is known after 5 s with QUICK_HERALD, 30 s by default): the wait leaves room for it.
RESUME_GUARD_SECONDS = HANG_GUARD_SECONDS + 60
#: Where the first process is killed: the log line it waits for.
KILL_POINTS = {
    "children running": "batch formed",
    "mid follow-up turn": "batch follow-up started",
    "follow-up queued": "batch follow-up queued",
}


def config(tmp_path: Path, port: int, database_url: str | None) -> Path:
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT), encoding="utf-8")
    data: dict[str, object] = {
        "gateway": {"port": port, "stateDir": str(tmp_path / "state")},
        "agent": {"model": "t/m", "subagents": {"maxConcurrent": 2}},
        "models": {
            "providers": {"t": {"api": "scripted", "script": str(script), "models": [{"id": "m"}]}}
        },
    }
    return write_config(tmp_path / "herald.json", on_backend(data, database_url))


def combined(frames: list[dict[str, object]]) -> dict[str, str]:
    """Follow-up replies the page was sent, by message id."""
    return {
        str(f["id"]): str(f["text"])
        for f in frames
        if f.get("type") == "message" and str(f.get("text", "")).startswith("COMBINED")
    }


async def settled_followup(tmp_path: Path, database_url: str | None) -> OutboxRecord:
    """Poll the live gateway's database until the batch's follow-up item has settled."""
    async with asyncio.timeout(RESUME_GUARD_SECONDS):
        while True:
            db = await daemon_state(tmp_path / "state", database_url)
            try:
                items = [i for i in await db.outbox.list() if i.batch_id is not None]
            finally:
                await db.close()
            if items and items[0].state in ("delivered", "failed"):
                return items[0]
            await asyncio.sleep(0.05)


async def kill(daemon: Daemon) -> None:
    daemon.process.send_signal(signal.SIGKILL)
    assert await daemon.wait_exit() == -signal.SIGKILL


@pytest.mark.parametrize("point", list(KILL_POINTS))
async def test_a_kill_anywhere_around_a_batch_gives_exactly_one_follow_up(
    tmp_path: Path, point: str, database_url: str | None
) -> None:
    port = free_port()
    path = config(tmp_path, port, database_url)
    seen: dict[str, str] = {}
    async with aiohttp.ClientSession() as http:
        async with herald("run", "--config", str(path), port=port, command=QUICK_HERALD) as first:
            await first.wait_healthy()
            async with webchat_page(http, first.url, CLIENT_ID) as client:
                await client.ws.send_json({"type": "message", "text": "fan"})
                await first.wait_log(KILL_POINTS[point])
                await kill(first)
                seen.update(combined(client.frames))
        async with herald("run", "--config", str(path), port=port, command=QUICK_HERALD) as second:
            await second.wait_healthy()
            async with webchat_page(http, second.url, CLIENT_ID) as client:
                settled = await settled_followup(tmp_path, database_url)
                if settled.state == "delivered":  # live now, or replayed from before the kill
                    await client.wait(lambda fs: bool(combined(fs)))
                seen.update(combined(client.frames))
            second.process.send_signal(signal.SIGTERM)
            assert await second.wait_exit() == 0
    db = await daemon_state(tmp_path / "state", database_url)
    try:
        assert await db.batches.open_batches() == []
        runs = await db.runs.list()
        (batch_id,) = {run.delivery.batch_id for run in runs}
        assert batch_id is not None
        done = await db.batches.get(batch_id)
        items = [item for item in await db.outbox.list() if item.batch_id == batch_id]
        session = await db.sessions.get(SESSION_KEY)
    finally:
        await db.close()
    assert done is not None
    assert done.state == "done"
    assert {run.progress.status for run in runs} == {"done"}
    assert {run.delivery.state for run in runs} == {"consumed"}
    (item,) = items  # queued once
    assert item.state == "delivered" or (item.state == "failed" and item.last_error == UNCERTAIN)
    # Shown once (the page dedupes replays by id): never twice, and once unless the kill
    # cut the send itself.
    assert len(seen) == 1 if item.state == "delivered" else len(seen) <= 1
    assert session is not None
    transcript = tmp_path / "state" / "agents" / "main" / "sessions" / f"{session.session_id}.jsonl"
    records = read_transcript(transcript).records
    followups = [r for r in records if (r.get("meta") or {}).get("kind") == "subagent_followup"]
    assert len(followups) == 1
