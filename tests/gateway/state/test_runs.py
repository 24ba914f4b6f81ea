"""The runs table: insert, update by id, list filters, constraints."""

from __future__ import annotations

import uuid

import pytest

from gateway.llm import Usage
from gateway.state import (
    InvalidUpdateError,
    Origin,
    RecordConflictError,
    RecordNotFoundError,
    RunRecord,
    SessionRecord,
    StateDB,
)


async def _child(db: StateDB) -> SessionRecord:
    key = f"agent:main:subagent:{uuid.uuid4()}"
    record = SessionRecord(
        key=key,
        session_id=str(uuid.uuid4()),
        agent_id="main",
        kind="subagent",
        created_at=1.0,
        updated_at=1.0,
        parent_key="agent:main:main",
    )
    stored, _ = await db.sessions.create(record)
    return stored


def _run(child: SessionRecord, *, at: float = 10.0, **fields: object) -> RunRecord:
    values: dict[str, object] = {
        "run_id": str(uuid.uuid4()),
        "child_session_key": child.key,
        "child_session_id": child.session_id,
        "requester_agent_id": "main",
        "agent_id": "main",
        "task": "summarise the logs",
        "created_at": at,
        "parent_session_key": "agent:main:main",
        "origin_channel": "slack",
        "origin_account": "T1",
        "origin_chat_id": "C1",
        "origin_thread_id": "1712345678.123456",
        "origin_chat_type": "channel",
    }
    values.update(fields)
    return RunRecord(**values)  # type: ignore[arg-type]


async def test_insert_get_and_views(db: StateDB) -> None:
    run = _run(await _child(db), model_applied=False, cleanup="delete", label="logs")
    assert await db.runs.insert(run) == run
    stored = await db.runs.get(run.run_id)
    assert stored == run
    assert stored.model_applied is False
    assert stored.origin == Origin("slack", "T1", "C1", "1712345678.123456", "channel")
    assert stored.usage == Usage()
    assert not stored.finished
    assert await db.runs.get("nope") is None


async def test_update_sets_columns_and_returns_the_row(db: StateDB) -> None:
    run = await db.runs.insert(_run(await _child(db)))
    updated = await db.runs.update(run.run_id, status="done", ended_at=20.0, result_text="ok")
    assert (updated.status, updated.ended_at, updated.result_text) == ("done", 20.0, "ok")
    assert updated.finished
    totals = await db.runs.add_usage(run.run_id, Usage(10, 5, 1, 0), 0.01)
    totals = await db.runs.add_usage(run.run_id, Usage(1, 1), None)
    assert totals.usage == Usage(11, 6, 1, 0)
    assert totals.cost_usd == pytest.approx(0.01)


async def test_bad_updates_are_refused(db: StateDB) -> None:
    run = await db.runs.insert(_run(await _child(db)))
    with pytest.raises(InvalidUpdateError, match="run_id"):
        await db.runs.update(run.run_id, run_id="other")
    with pytest.raises(InvalidUpdateError, match="colour"):
        await db.runs.update(run.run_id, colour="red")
    with pytest.raises(InvalidUpdateError, match="nothing"):
        await db.runs.update(run.run_id)
    with pytest.raises(InvalidUpdateError, match="CHECK"):
        await db.runs.update(run.run_id, status="finished")
    with pytest.raises(RecordNotFoundError):
        await db.runs.update("missing", status="done")
    assert (await db.runs.get(run.run_id)) == run


async def test_insert_constraints(db: StateDB) -> None:
    child = await _child(db)
    run = await db.runs.insert(_run(child))
    with pytest.raises(RecordConflictError):
        await db.runs.insert(run)
    orphan = _run(child, child_session_key="agent:main:subagent:" + str(uuid.uuid4()))
    with pytest.raises(InvalidUpdateError, match="FOREIGN KEY"):
        await db.runs.insert(orphan)


async def test_list_filters_and_order(db: StateDB) -> None:
    child = await _child(db)
    a = await db.runs.insert(_run(child, at=1.0))
    b = await db.runs.insert(_run(child, at=2.0, status="running"))
    c = await db.runs.insert(_run(child, at=3.0, parent_session_key="agent:ops:main"))
    assert [r.run_id for r in await db.runs.list()] == [c.run_id, b.run_id, a.run_id]
    assert [r.run_id for r in await db.runs.list(oldest_first=True, limit=2)] == [
        a.run_id,
        b.run_id,
    ]
    assert [r.run_id for r in await db.runs.list(statuses=["running"])] == [b.run_id]
    assert [r.run_id for r in await db.runs.list(statuses=["queued", "running"])] == [
        c.run_id,
        b.run_id,
        a.run_id,
    ]
    assert await db.runs.list(statuses=["done"]) == []
    assert [r.run_id for r in await db.runs.list(parent_session_key="agent:ops:main")] == [c.run_id]
    assert len(await db.runs.list(child_session_key=child.key)) == 3
