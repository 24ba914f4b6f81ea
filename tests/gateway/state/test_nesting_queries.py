"""The state queries of nested runs: the chain above a run, its live descendants, the live
runs a session may have, the completions routed to a session, and a batch dissolved."""

from __future__ import annotations

import uuid

import pytest

from gateway.state import (
    FINISHED_STATUSES,
    RUN_STATUSES,
    BatchRecord,
    ChildLimitError,
    RunRecord,
    StateDB,
)
from gateway.state.schema import LIVE_STATUS_SQL
from tests.gateway.state.records import child_session, run_record

PERSON = "agent:main:main"


async def spawned(
    db: StateDB, parent: RunRecord | None, *, at: float = 10.0, limit: int | None = None
) -> RunRecord:
    """A run spawned by ``parent``'s session (the person's session when None)."""
    parent_key = parent.child_session_key if parent is not None else PERSON
    child = await child_session(db, parent_key)
    run = run_record(
        child,
        created_at=at,
        parent_session_key=parent_key,
        parent_run_id=parent.run_id if parent is not None else None,
        depth=parent.request.depth + 1 if parent is not None else 1,
    )
    return await db.runs.insert(run, max_live_siblings=limit)


async def final(db: StateDB, run: RunRecord, at: float = 20.0) -> RunRecord:
    return await db.ends.finish_run(run.run_id, {"status": "done", "ended_at": at}, now=0.0)


def test_the_live_statuses_of_the_index_are_the_statuses_not_final() -> None:
    live = [s for s in RUN_STATUSES if s not in FINISHED_STATUSES]
    assert ", ".join(f"'{s}'" for s in live) == LIVE_STATUS_SQL


async def test_lineage_is_the_chain_above_a_run_shallowest_first(db: StateDB) -> None:
    top = await spawned(db, None)
    middle = await spawned(db, top)
    bottom = await spawned(db, middle)
    assert [r.run_id for r in await db.runs.lineage(bottom.run_id)] == [top.run_id, middle.run_id]
    assert await db.runs.lineage(top.run_id) == []


async def test_live_descendants_leave_out_final_runs_and_other_trees(db: StateDB) -> None:
    top = await spawned(db, None)
    done = await final(db, await spawned(db, top))
    live = await spawned(db, top)
    below_live = await spawned(db, live, at=11.0)
    below_done = await spawned(db, done, at=12.0)
    await spawned(db, None)  # another tree
    found = [r.run_id for r in await db.runs.live_descendants(top.run_id)]
    assert found == [live.run_id, below_live.run_id, below_done.run_id]  # shallowest first


async def test_a_session_past_its_live_run_limit_cannot_insert_another(db: StateDB) -> None:
    first = await spawned(db, None)
    await spawned(db, None)
    assert await db.runs.live_children(PERSON) == 2
    with pytest.raises(ChildLimitError):
        await spawned(db, None, limit=2)
    assert await db.runs.live_children(PERSON) == 2
    await final(db, first)
    assert await db.runs.live_children(PERSON) == 1
    await spawned(db, None, limit=2)
    assert await db.runs.live_children(PERSON) == 2


async def test_completions_are_routed_past_final_requesters_only(db: StateDB) -> None:
    orchestrator = await spawned(db, None)
    leaf = await final(db, await spawned(db, orchestrator))
    # The orchestrator is live: the leaf's completion is its own, not the person's.
    assert [r.run_id for r in await db.ends.routed_completions(orchestrator.child_session_key)] == [
        leaf.run_id
    ]
    assert await db.ends.routed_completions(PERSON) == []
    orchestrator = await final(db, orchestrator, at=30.0)
    # Final, the orchestrator no longer takes it: it reaches the person, after the
    # orchestrator's own.
    assert [r.run_id for r in await db.ends.routed_completions(PERSON)] == [
        leaf.run_id,
        orchestrator.run_id,
    ]
    await db.ends.mark_delivered(leaf.run_id)
    assert [r.run_id for r in await db.ends.routed_completions(PERSON)] == [orchestrator.run_id]


async def test_a_dissolved_batch_lets_its_runs_complete_on_their_own(db: StateDB) -> None:
    orchestrator = await spawned(db, None)
    ended = await spawned(db, orchestrator)
    running = await spawned(db, orchestrator)
    batch = await db.batches.form(
        BatchRecord(
            batch_id=str(uuid.uuid4()),
            session_key=orchestrator.child_session_key,
            run_ids=(),
            first_spawn_at=0.0,
            created_at=0.0,
            deadline_at=100.0,
            run_id=orchestrator.run_id,
        )
    )
    assert batch is not None
    assert await db.batches.open_for_run(orchestrator.run_id) == batch
    ended = await final(db, ended)
    assert ended.delivery.announce_state == "consumed"
    assert await db.ends.routed_completions(orchestrator.child_session_key) == []
    due = await db.batches.dissolve(batch.batch_id, 50.0)
    assert [r.run_id for r in due] == [ended.run_id]
    assert await db.batches.open_for_run(orchestrator.run_id) is None
    assert (await db.runs.get(running.run_id) or running).delivery.batch_id is None
    routed = await db.ends.routed_completions(orchestrator.child_session_key)
    assert [r.run_id for r in routed] == [ended.run_id]
    assert await db.batches.dissolve(batch.batch_id, 60.0) == []  # once
