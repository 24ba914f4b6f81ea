"""A real gateway killed with SIGKILL at random points of 50 in-flight runs, restarted each time.

``herald run`` is a subprocess (as in ``tests/gateway/subagents/test_kill9.py``) with the
scripted model: 50 sub-agent runs, spawned ten per chat turn from the web chat, on a
``subagent`` lane 4 wide; each task answers after a seeded random delay, some after a tool
call, and half the runs use ``cleanup: "delete"`` so archived transcripts are checked too.
The process is killed :data:`KILLS` times — after a seeded number of further announces, or
after a seeded short delay — and restarted; the last process is left to finish.

Announces are counted as the web chat client receives them, across every process, and as
the web chat's history file holds them. An outbox item a kill left ``sending`` is resolved
by the web chat's history (which holds each announce's stable message id): found, it is
recorded as delivered; not found, it is sent again. So: 50 delivered, none uncertain, and no
run shown twice. (:mod:`tests.faults.test_kill_mid_send` kills inside sends on purpose.)

The client is connected (and has had the ``ready`` frame) before each kill: the web chat
keeps a page's undelivered messages only in memory, so an announce delivered while no page
was open would die with the process — a property of the web chat, not of the outbox.

Whatever a kill cuts off, the records end consistent: an outbox item and its run settle in
one transaction (and start-up reconciles runs an older version left behind), so every run
records its announce's fate; and start-up archives, or schedules, the child of every
finished run that a kill left between its final status and its archive step.
"""

from __future__ import annotations

import asyncio
import json
import random
import signal
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.constants import STATE_DB_NAME
from gateway.state import FINISHED_STATUSES, Origin, SqliteStateDB
from gateway.subagents import SpawnRequest
from tests.faults._support import (
    audit_transcripts,
    chat_context,
    duplicates,
    fault_seed,
    plant_delivered_announce,
    spawn_runs,
)
from tests.gateway.daemon_process import (
    HANG_GUARD_SECONDS,
    WebchatPage,
    free_port,
    herald,
    webchat_page,
)
from tests.gateway.harness import running_gateway

pytestmark = pytest.mark.slow

RUNS = 50
PER_TURN = 10  # sessions_spawn calls honoured per model turn
KILLS = 3
CLIENT_ID = "fault-client"


def script(rng: random.Random) -> dict[str, Any]:
    """The scripted model: batches of spawns, and each job with its own seeded delay."""
    rules: list[dict[str, Any]] = [{"match": r"^\[announce\]", "reply": "ANNOUNCE {lastAssistant}"}]
    for batch in range(RUNS // PER_TURN):
        calls = [
            {
                "name": "sessions_spawn",
                "arguments": {
                    "task": f"job-{n:02d}",
                    "label": f"job-{n:02d}",
                    "cleanup": "delete" if n % 2 else "keep",
                },
            }
            for n in range(batch * PER_TURN, (batch + 1) * PER_TURN)
        ]
        rules.append(
            {
                "match": f"^batch {batch}$",
                "reply": "",
                "toolCalls": calls,
                "afterTool": f"spawned batch {batch}",
            }
        )
    for n in range(RUNS):
        rule: dict[str, Any] = {
            "match": f"^job-{n:02d}$",
            "reply": f"result {n:02d}",
            "delaySeconds": round(rng.uniform(0.05, 0.5), 3),
        }
        if rng.random() < 0.4:
            rule["reply"] = ""
            rule["toolCalls"] = [{"name": "ls", "arguments": {"path": "."}}]
            rule["afterTool"] = f"listed {n:02d}"
            rule["afterToolError"] = f"listing failed {n:02d}"
        rules.append(rule)
    return {"rules": rules, "default": {"reply": "?"}}


def write_config(tmp_path: Path, port: int, rng: random.Random) -> Path:
    script_path = tmp_path / "script.json"
    script_path.write_text(json.dumps(script(rng)), encoding="utf-8")
    config = {
        "gateway": {"port": port, "stateDir": str(tmp_path / "state")},
        # Every run comes from one chat session, faster than they finish.
        "agent": {
            "model": "t/m",
            "subagents": {"maxConcurrent": 4, "maxChildrenPerSession": 1000},
        },
        "models": {
            "providers": {
                "t": {"api": "scripted", "script": str(script_path), "models": [{"id": "m"}]}
            }
        },
        "channels": {"webchat": {"historySize": 1000}},
    }
    path = tmp_path / "herald.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


def reached(
    received: Counter[str], chat: WebchatPage, target: int
) -> Callable[[list[dict[str, Any]]], bool]:
    """A predicate: ``target`` runs announced in all, counting earlier processes."""

    def check(frames: list[dict[str, Any]]) -> bool:
        return len(set(received) | set(chat.announced())) >= target

    return check


def kept_announces(state: Path) -> Counter[str]:
    """Announce frames by run id in the web chat's history file (what a page is replayed)."""
    kept: Counter[str] = Counter()
    for line in (state / "webchat" / f"{CLIENT_ID}.jsonl").read_text().splitlines():
        frame = json.loads(line)
        if frame.get("type") == "message" and frame.get("kind") == "announce":
            kept[str(frame["runId"])] += 1
    return kept


async def settled(db_path: Path) -> tuple[bool, int]:
    """(every run final and every announce settled, runs still unfinished) from the DB."""
    db = await SqliteStateDB.open(db_path, readonly=True)
    try:
        runs = await db.runs.list(limit=RUNS + 10)
        items = await db.outbox.list()
    finally:
        await db.close()
    unfinished = sum(1 for run in runs if run.progress.status not in FINISHED_STATUSES)
    open_items = sum(1 for item in items if item.state in ("pending", "sending"))
    done = len(runs) == RUNS and unfinished == 0 and len(items) == RUNS and open_items == 0
    return done, unfinished


async def test_sigkill_at_random_points_of_50_runs_loses_and_repeats_no_announce(
    tmp_path: Path,
) -> None:
    seed = fault_seed(5150)
    rng = random.Random(seed)
    port = free_port()
    config = write_config(tmp_path, port, rng)
    db_path = tmp_path / "state" / STATE_DB_NAME
    received: Counter[str] = Counter()  # announces by run, each message id counted once
    ids: dict[str, str] = {}
    unfinished_at_kill: list[int] = []
    async with aiohttp.ClientSession() as http:
        for life in range(KILLS + 1):
            async with herald("run", "--config", str(config), port=port) as daemon:
                await daemon.wait_healthy()
                async with webchat_page(http, daemon.url, CLIENT_ID) as chat:
                    if life == 0:
                        for batch in range(RUNS // PER_TURN):
                            await chat.ws.send_json({"type": "message", "text": f"batch {batch}"})
                        await chat.wait(
                            lambda fs: (
                                sum(1 for f in fs if f.get("kind") == "reply") == RUNS // PER_TURN
                            )
                        )
                    if life < KILLS:
                        if rng.random() < 0.5:
                            # After a few more announces; never more than can still come.
                            target = min(len(set(received)) + rng.randint(1, 8), RUNS - KILLS)
                            await chat.wait(reached(received, chat, target))
                        else:
                            await asyncio.sleep(rng.uniform(0.05, 0.8))
                        daemon.process.send_signal(signal.SIGKILL)
                        assert await daemon.wait_exit() == -signal.SIGKILL
                        unfinished_at_kill.append((await settled(db_path))[1])
                    else:
                        async with asyncio.timeout(HANG_GUARD_SECONDS):
                            # The state is another process's database: nothing to await.
                            while not (await settled(db_path))[0]:  # noqa: ASYNC110
                                await asyncio.sleep(0.1)
                        # Every delivered announce has reached this page (sent before the
                        # outbox records it); a short wait covers the last frames in flight.
                        await asyncio.sleep(0.2)
                    ids.update(chat.announced_ids())
                    received = Counter(ids.values())
                if life == KILLS:
                    daemon.process.send_signal(signal.SIGTERM)
                    assert await daemon.wait_exit() == 0

    db = await SqliteStateDB.open(db_path, readonly=True)
    try:
        runs = await db.runs.list(limit=RUNS + 10)
        items = await db.outbox.list()
        children = await db.sessions.get_many([run.child_session_key for run in runs])
    finally:
        await db.close()
    delivered = {item.run_id for item in items if item.state == "delivered"}
    # 50 runs, every one final.
    assert len(runs) == RUNS
    assert {run.progress.status for run in runs} == {"done"}, Counter(
        run.progress.status for run in runs
    )
    assert any(unfinished_at_kill), f"no kill hit a run in flight: {unfinished_at_kill}"
    # Each announce exactly once: shown once, kept once, delivered, none uncertain.
    assert duplicates(received) == {}
    assert duplicates(kept_announces(tmp_path / "state")) == {}
    assert len(items) == RUNS
    assert len(delivered) == RUNS
    assert set(received) == delivered
    assert set(kept_announces(tmp_path / "state")) == delivered

    # Each run records its announce's fate: the item and the run settle together.
    disagreeing = {
        run.run_id: (run.delivery.announce_state, run.delivery.announce_error)
        for run in runs
        if (run.delivery.announce_state, run.delivery.announce_error) != ("delivered", None)
    }
    assert disagreeing == {}, "runs whose announce state is not their item's"
    # Every finished run's child is archived (cleanup "delete") or scheduled for it: the
    # archive step a kill cut off is taken at the next start.
    unarchived = {
        run.run_id: run.request.cleanup
        for run in runs
        if not children[run.child_session_key].archived
        and (
            run.request.cleanup == "delete"
            or children[run.child_session_key].archive_due_at is None
        )
    }
    assert unarchived == {}, "children neither archived nor scheduled for it"
    # Every transcript, live and archived: complete lines valid, at most a torn last line.
    audit = audit_transcripts(tmp_path / "state")
    assert audit.files >= RUNS + 1
    assert audit.invalid == []
    assert audit.headless == []


async def test_a_delivery_the_run_never_heard_of_is_recorded_on_it_after_a_restart(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    origin = Origin(channel="memory", account="default", chat_id="c1", chat_type="channel")
    async with running_gateway(tmp_path, state_dir=state) as gw:
        gw.lanes.subagent.submit(asyncio.Event().wait)  # the run never starts here
        ctx = await chat_context(gw, origin)
        (run_id,) = await spawn_runs(gw, ctx, ["task: x"])
        # What a kill between the outbox's two writes leaves: delivered, the run not told.
        await plant_delivered_announce(
            gw, run_id, {"status": "done", "outcome": "done", "announce_state": "queued"}
        )
    async with running_gateway(tmp_path, state_dir=state) as gw:
        run = await gw.db.runs.get(run_id)
        assert gw.channel.sent == []  # never sent twice
    assert run is not None
    assert run.delivery.announce_state == "delivered", run


async def test_a_cleanup_delete_child_a_kill_left_live_is_archived_after_a_restart(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    origin = Origin(channel="memory", account="default", chat_id="c1", chat_type="channel")
    async with running_gateway(tmp_path, state_dir=state) as gw:
        gw.lanes.subagent.submit(asyncio.Event().wait)  # the run never starts here
        ctx = await chat_context(gw, origin)
        result = await gw.spawn(ctx, SpawnRequest(task="task: x", cleanup="delete"))
        run_id, child_key = result["runId"], result["childSessionKey"]
        # What a kill right after the announce was queued leaves: final, child still live.
        await plant_delivered_announce(
            gw,
            run_id,
            {"status": "done", "outcome": "done", "announce_state": "delivered"},
        )
    async with running_gateway(tmp_path, state_dir=state) as gw:
        child = await gw.store.require(child_key)
    assert child.archived, child
