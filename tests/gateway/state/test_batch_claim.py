"""Claiming a batch's follow-up: once, only when due, in one transaction."""

from __future__ import annotations

import asyncio
import uuid

from gateway.state import BatchRecord, RunRecord, SessionRecord, StateDB

REQUESTER = "agent:main:memory:channel:c1"


async def setup(db: StateDB, runs: int) -> tuple[BatchRecord, list[str]]:
    await db.sessions.create(
        SessionRecord(
            key=REQUESTER,
            session_id=str(uuid.uuid4()),
            agent_id="main",
            kind="chat",
            created_at=1.0,
            updated_at=1.0,
        )
    )
    ids = []
    for n in range(runs):
        child, _ = await db.sessions.create(
            SessionRecord(
                key=f"agent:main:subagent:{uuid.uuid4()}",
                session_id=str(uuid.uuid4()),
                agent_id="main",
                kind="subagent",
                created_at=1.0,
                updated_at=1.0,
                parent_key=REQUESTER,
            )
        )
        run = RunRecord(
            run_id=f"run-{n}",
            child_session_key=child.key,
            child_session_id=child.session_id,
            requester_agent_id="main",
            agent_id="main",
            task="t",
            created_at=float(n),
            status="running",
            parent_session_key=REQUESTER,
        )
        await db.runs.insert(run)
        ids.append(run.run_id)
    batch = BatchRecord(
        batch_id="b1",
        session_key=REQUESTER,
        run_ids=(),
        first_spawn_at=0.0,
        created_at=0.0,
        deadline_at=100.0,
    )
    formed = await db.batches.form(batch)
    assert formed is not None
    return formed, ids


async def test_a_batch_is_claimed_once_and_only_when_every_run_is_final(db: StateDB) -> None:
    _, ids = await setup(db, 2)
    await db.ends.finish_run(ids[0], {"status": "done"}, now=0.0)
    assert await db.batches.claim("b1", 5.0, timed_out=False) is None  # one still runs
    await db.ends.finish_run(ids[1], {"status": "error"}, now=0.0)
    first, second = await asyncio.gather(
        db.batches.claim("b1", 6.0, timed_out=False),
        db.batches.claim("b1", 6.0, timed_out=False),
    )
    claims = [c for c in (first, second) if c is not None]
    assert len(claims) == 1  # two runs ending together start one follow-up
    batch, left = claims[0]
    assert (batch.state, batch.followup_started_at, left) == ("following", 6.0, [])


async def test_a_timed_out_claim_lets_the_live_runs_leave_the_batch(db: StateDB) -> None:
    _, ids = await setup(db, 3)
    await db.ends.finish_run(ids[1], {"status": "done"}, now=0.0)
    claimed = await db.batches.claim("b1", 100.0, timed_out=True)
    assert claimed is not None
    batch, left = claimed
    assert batch.state == "following"
    assert sorted(left) == [ids[0], ids[2]]
    for run_id, in_batch in ((ids[0], None), (ids[1], "b1"), (ids[2], None)):
        run = await db.runs.get(run_id)
        assert run is not None
        assert run.batch_id == in_batch
    assert await db.batches.claim("b1", 101.0, timed_out=True) is None
