"""Start-up recovery while other replicas run: a replica starting takes up only its own
holds, completions and follow-ups — a live replica's ``subagents wait``, the completion it
is handing on and the follow-up it is about to run are left to it — and a dead replica's are
taken over after a heartbeat, once, by one of the survivors."""

from __future__ import annotations

import asyncio
import copy
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from channels import OutboundMessage
from gateway.state import BatchRecord, Origin, RunRecord, StateDB
from gateway.state.postgres import PgStateDB
from gateway.subagents import SpawnRequest
from gateway.subagents.completions import COMPLETION_KIND, FOLLOWUP_KIND
from tests.gateway.cluster._replicas import eventually, replica, two_replicas
from tests.gateway.harness import TEST_SCRIPT, Harness
from tests.gateway.state.records import run_record, session_record

pytestmark = pytest.mark.postgres

PERSON = "agent:main:memory:channel:c1:thread:t1"
ORIGIN = Origin(channel="memory", account="default", chat_id="c1", thread_id="t1")
OTHER = "agent:main:memory:channel:c2"


def sent(*gws: Harness, kind: str) -> list[OutboundMessage]:
    return [m for gw in gws for m in gw.channel.sent if m.kind == kind]


async def meta_lines(gw: Harness, key: str, kind: str) -> list[dict[str, Any]]:
    """The meta of ``key``'s transcript lines of ``kind`` (written-in messages)."""
    records = (await gw.store.read(key)).records
    return [
        r["meta"]
        for r in records
        if isinstance(r.get("meta"), dict) and r["meta"].get("kind") == kind
    ]


async def no_session_job(gw: Harness) -> bool:
    """Whether ``gw`` never queued a job on its session lane (no turn, no completion write,
    no follow-up)."""
    return gw.lanes.session.stats().submitted == 0


async def test_a_replica_starting_leaves_a_live_replicas_wait_alone(
    tmp_path: Path, pg_url: str
) -> None:
    async with replica(tmp_path, pg_url, "a") as a:
        await a.store.ensure(PERSON, origin=ORIGIN)  # its runs announce in this thread
        ctx = await a.context(PERSON)
        accepted = await a.spawn(ctx, SpawnRequest(task="task-slow: x"))
        run_id = accepted["runId"]
        waiting = asyncio.ensure_future(a.subagents.control.wait(PERSON, [run_id], 25))

        async def held() -> bool:
            run = await a.db.runs.get(run_id)
            return (
                run is not None
                and run.delivery.state == "held"
                and run.progress.status == "running"
            )

        await eventually(held, "the run held by a's wait, and running")
        async with replica(tmp_path, pg_url, "b") as b:
            # The run ends while a's wait still waits: its result is the waiter's alone.
            await a.runs.abort_tree(run_id)
            result = await waiting
            assert [c["runId"] for c in result["completed"]] == [run_id]
            await a.runs_idle()
            await a.outbox.flush(5)
            await b.outbox.flush(5)
            assert sent(a, b, kind="announce") == []
        run = await a.db.runs.get(run_id)
        assert run is not None
        assert (run.progress.status, run.delivery.announce_state, run.delivery.state) == (
            "cancelled",
            "consumed",
            "consumed",
        )


async def test_a_replica_starting_leaves_a_completion_a_live_replica_hands_on(
    tmp_path: Path, pg_url: str
) -> None:
    async with replica(tmp_path, pg_url, "a") as a:
        ctx = await a.context(PERSON)
        # A turn of the session is under way on a (it holds the session's lock).
        gate = asyncio.Event()
        turn = a.lanes.session.submit(gate.wait, key=PERSON)
        accepted = await a.spawn(ctx, SpawnRequest(task="task: x"))
        run_id = accepted["runId"]
        run = await a.finished(run_id)
        assert run.delivery.state == "pending"
        async with replica(tmp_path, pg_url, "b") as b:
            gate.set()
            await turn
            await a.runs_idle()

            async def written() -> bool:
                done = await a.db.runs.get(run_id)
                return done is not None and done.delivery.state == "delivered"

            await eventually(written, "the completion written in")
            assert await no_session_job(b)  # b left it to a
        lines = await meta_lines(a, PERSON, COMPLETION_KIND)
        assert lines == [{"kind": COMPLETION_KIND, "runId": run_id}]


def followup_script() -> dict[str, Any]:
    data = copy.deepcopy(TEST_SCRIPT)
    fan = {
        "match": r"^fan (?P<a>\S+)$",
        "reply": "",
        "toolCalls": [
            {"name": "sessions_spawn", "arguments": {"task": "task: ${a}", "label": "${a}"}},
            {"name": "sessions_yield", "arguments": {"message": "Working on ${a}."}},
        ],
    }
    followup = {
        "match": r"^\[sub-agent completion\] The sub-agents[\s\S]*?result:\n(?P<r>[^\n]+)",
        "reply": "follow-up with ${r}",
    }
    data["rules"] = [fan, followup, *data["rules"]]
    return data


async def test_a_replica_starting_leaves_a_follow_up_a_live_replica_is_about_to_run(
    tmp_path: Path, pg_url: str
) -> None:
    script = followup_script()
    async with replica(tmp_path, pg_url, "a", script=script) as a:
        runs_gate = asyncio.Event()
        blocker = a.lanes.subagent.submit(runs_gate.wait)  # the child ends after the yield
        await a.say("fan tea", thread_id="t1")
        await a.reply()
        turn_gate = asyncio.Event()
        turn = a.lanes.session.submit(turn_gate.wait, key=PERSON)  # a turn under way on a
        runs_gate.set()
        await blocker

        async def following() -> bool:
            batches = await a.db.batches.open_batches()
            return [b.state for b in batches] == ["following"]

        await eventually(following, "the batch's follow-up claimed by a")
        async with replica(tmp_path, pg_url, "b", script=script) as b:
            turn_gate.set()
            await turn

            async def posted() -> bool:
                return len(sent(a, b, kind="reply")) == 2

            await eventually(posted, "the follow-up reply posted")
            await a.runs_idle()
            assert await no_session_job(b)  # b left it to a
            await a.outbox.flush(5)
            await b.outbox.flush(5)
            replies = [m.text for m in sent(a, b, kind="reply")]
            assert replies[0] == "Working on tea."
            assert replies[1].startswith("follow-up with done: tea\n\nStats: 1 sub-agent (")
            assert len(replies) == 2
        assert len(await meta_lines(a, PERSON, FOLLOWUP_KIND)) == 1


# -- a dead replica's ------------------------------------------------------------------------


async def ghost_run(db: StateDB, parent: str, task: str) -> RunRecord:
    """A run ``parent`` spawned, announcing (its outcome decided), as the ghost left it."""
    now = time.time()
    key = f"agent:main:subagent:{uuid.uuid4()}"
    child, _ = await db.sessions.create(session_record(key, "subagent", at=now, parent_key=parent))
    run = run_record(
        child,
        task=task,
        created_at=now,
        started_at=now,
        status="announcing",
        outcome="done",
        result_text=f"result of {task}",
        parent_session_key=parent,
        origin_channel=ORIGIN.channel,
        origin_account=ORIGIN.account,
        origin_chat_id=ORIGIN.chat_id,
        origin_thread_id=ORIGIN.thread_id,
    )
    return await db.runs.insert(run)


async def leave_ghost_work(ghost: StateDB, survivor: Harness) -> dict[str, str]:
    """What replica "ghost" left in flight: a wait's hold on a final run, a completion not
    yet written, and one written but not yet recorded."""
    await survivor.store.ensure(PERSON, origin=ORIGIN)
    # A wait held this run; it ended while held (its announce and completion kept back).
    held = await ghost_run(ghost, PERSON, "held")
    await ghost.ends.hold([held.run_id], by="ghost")
    changes = {"status": "done", "announce_text": "the held announce"}
    await ghost.ends.finish_run(held.run_id, changes, now=0.0, by="ghost")
    # Ended, its completion on its way into the person's session.
    pending = await ghost_run(ghost, PERSON, "pending")
    await ghost.ends.finish_run(pending.run_id, {"status": "done"}, now=0.0, by="ghost")
    # Written into the session just before the ghost died, not yet recorded as delivered.
    written = await ghost_run(ghost, PERSON, "written")
    await ghost.ends.finish_run(written.run_id, {"status": "done"}, now=0.0, by="ghost")
    meta = {"kind": COMPLETION_KIND, "runId": written.run_id}
    assert await survivor.conversations.write_in(PERSON, "[sub-agent completion] written", meta)
    return {
        "held": held.run_id,
        "pending": pending.run_id,
        "written": written.run_id,
    }


async def leave_ghost_followup(ghost: StateDB) -> str:
    """A yield's batch whose one run ended, its follow-up claimed by replica "ghost" and not
    run; the batch's id. Left before the other replicas start: a live replica's heartbeat
    starts any batch whose runs have all ended, so it could claim this one first."""
    origin = Origin("memory", "default", "c2")
    await ghost.sessions.create(replace(session_record(OTHER, at=time.time()), origin=origin))
    batched = await ghost_run(ghost, OTHER, "batched")
    await ghost.runs.update(batched.run_id, status="running", outcome=None)
    now = time.time()
    batch = await ghost.batches.form(
        BatchRecord(
            batch_id=str(uuid.uuid4()),
            session_key=OTHER,
            run_ids=(),
            first_spawn_at=now,
            created_at=now,
            deadline_at=now + 3600,
            origin_channel="memory",
            origin_account="default",
            origin_chat_id="c2",
        )
    )
    assert batch is not None
    await ghost.ends.finish_run(batched.run_id, {"status": "done"}, now=0.0, by="ghost")
    assert await ghost.batches.claim(batch.batch_id, now, timed_out=False, by="ghost")
    return batch.batch_id


async def test_a_dead_replicas_holds_completions_and_follow_ups_are_taken_over_once(
    tmp_path: Path, pg_url: str
) -> None:
    ghost = await PgStateDB.connect(pg_url, replica_id="ghost", state_dir=tmp_path / "state")
    try:
        await ghost.replicas.register("ghost", host="h", pid=1, now=time.time())
        batch_id = await leave_ghost_followup(ghost)
        async with two_replicas(tmp_path, pg_url) as (a, b):
            await ghost.replicas.beat("ghost", time.time())  # alive until told otherwise
            left = await leave_ghost_work(ghost, a)
            assert a.cluster is not None
            beats = a.cluster.heartbeat.beats

            async def beaten() -> bool:
                return a.cluster is not None and a.cluster.heartbeat.beats > beats + 3

            await eventually(beaten, "a few heartbeats while the ghost lives")
            assert await no_session_job(a)
            assert await no_session_job(b)
            held = await a.db.runs.get(left["held"])
            assert held is not None
            assert (held.delivery.state, held.delivery.announce_state) == ("held", None)

            # The ghost falls silent: dead to both survivors.
            await ghost.write(lambda conn: conn.execute("UPDATE replicas SET heartbeat_at = 0"))

            async def settled() -> bool:
                runs = [await a.db.runs.get(left[k]) for k in ("held", "pending", "written")]
                done = [r is not None and r.delivery.state == "delivered" for r in runs]
                batch = await a.db.batches.get(batch_id)
                return all(done) and batch is not None and batch.state == "done"

            await eventually(settled, "the ghost's work taken over")
            await a.outbox.flush(5)
            await b.outbox.flush(5)

            async def replied() -> bool:
                return len(sent(a, b, kind="reply")) == 1 and len(sent(a, b, kind="announce")) == 1

            await eventually(replied, "the held announce and the follow-up reply posted")
            for gw in (a, b):
                await gw.runs_idle()
            announces = sent(a, b, kind="announce")
            assert len(announces) == 1
            assert (announces[0].chat_id, announces[0].thread_id) == ("c1", "t1")
            (reply,) = sent(a, b, kind="reply")
            assert (reply.chat_id, reply.text.split("\n\n")[-1][:6]) == ("c2", "Stats:")
            completions = await meta_lines(a, PERSON, COMPLETION_KIND)
            assert sorted(m["runId"] for m in completions) == sorted(
                left[k] for k in ("held", "pending", "written")
            )
            assert len(await meta_lines(a, OTHER, FOLLOWUP_KIND)) == 1
    finally:
        await ghost.close()
