"""The steers table: a steer is kept only for a running run, at most ``limit`` at once, in the
order given, until deleted (written) or dropped (its run ended)."""

from __future__ import annotations

from gateway.state import StateDB
from tests.gateway.state.test_runs import _child, _run


async def test_steers_are_kept_for_a_running_run_in_order_until_written(db: StateDB) -> None:
    child = await _child(db)
    run = _run(child)
    await db.runs.insert(run)
    queued = await db.steers.add(run.run_id, "early", now=1.0, limit=2)
    await db.runs.update(run.run_id, status="running", started_at=2.0)
    first = await db.steers.add(run.run_id, "one", now=3.0, limit=2)
    second = await db.steers.add(run.run_id, "two", now=4.0, limit=2)
    third = await db.steers.add(run.run_id, "three", now=5.0, limit=2)
    unknown = await db.steers.add("no-such-run", "hi", now=5.0, limit=2)
    assert (queued, third, unknown) == ("not_running", "full", "not_running")
    assert not isinstance(first, str)
    assert not isinstance(second, str)
    waiting = await db.steers.waiting(run.run_id)
    assert [(s.message, s.created_at) for s in waiting] == [("one", 3.0), ("two", 4.0)]
    assert first.steer_id < second.steer_id
    await db.steers.delete([first.steer_id])
    assert [s.message for s in await db.steers.waiting(run.run_id)] == ["two"]
    assert await db.steers.drop(run.run_id) == 1
    assert await db.steers.waiting(run.run_id) == []
