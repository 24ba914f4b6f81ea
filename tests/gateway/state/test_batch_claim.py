"""Claiming a batch's follow-up: once, only when due, in one transaction."""

from __future__ import annotations

import asyncio

from gateway.state import StateDB
from tests.gateway.state.conftest import Requester


async def formed(db: StateDB, requester: Requester, runs: int) -> list[str]:
    """``runs`` live runs of the requester (no chat to post to), in batch ``b1``."""
    ids = await requester.spawn(runs, origin=False)
    assert await db.batches.form(requester.batch("b1")) is not None
    return ids


async def test_a_batch_is_claimed_once_and_only_when_every_run_is_final(
    db: StateDB, requester: Requester
) -> None:
    ids = await formed(db, requester, 2)
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


async def test_a_timed_out_claim_lets_the_live_runs_leave_the_batch(
    db: StateDB, requester: Requester
) -> None:
    ids = await formed(db, requester, 3)
    await db.ends.finish_run(ids[1], {"status": "done"}, now=0.0)
    claimed = await db.batches.claim("b1", 100.0, timed_out=True)
    assert claimed is not None
    batch, left = claimed
    assert batch.state == "following"
    assert sorted(left) == [ids[0], ids[2]]
    for run_id, in_batch in ((ids[0], None), (ids[1], "b1"), (ids[2], None)):
        run = await db.runs.get(run_id)
        assert run is not None
        assert run.delivery.batch_id == in_batch
    assert await db.batches.claim("b1", 101.0, timed_out=True) is None
