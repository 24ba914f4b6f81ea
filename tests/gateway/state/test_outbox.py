"""The outbox table: one item per run, due items, updates."""

from __future__ import annotations

import pytest

from gateway.state import (
    InvalidUpdateError,
    OutboxRecord,
    RecordConflictError,
    RecordNotFoundError,
    StateDB,
)


def _item(**fields: object) -> OutboxRecord:
    values: dict[str, object] = {
        "channel": "slack",
        "account": "T1",
        "chat_id": "C1",
        "thread_id": "1712345678.123456",
        "text": "done.\n\nStats: runtime 5s",
        "created_at": 100.0,
    }
    values.update(fields)
    return OutboxRecord(**values)  # type: ignore[arg-type]


async def test_insert_assigns_ids_and_reads_back(db: StateDB) -> None:
    first = await db.outbox.insert(_item())
    second = await db.outbox.insert(_item(kind="notice"))
    assert first.id is not None
    assert second.id == first.id + 1
    assert await db.outbox.get(first.id) == first
    assert first.state == "pending"
    assert first.message_ids == ()
    assert await db.outbox.get(9999) is None


async def test_one_item_per_run(db: StateDB) -> None:
    await db.write(
        lambda c: c.execute(
            "INSERT INTO sessions (key, session_id, agent_id, kind, created_at, updated_at)"
            " VALUES ('agent:main:main', 's', 'main', 'main', 0, 0)"
        )
    )
    await db.write(
        lambda c: c.execute(
            "INSERT INTO runs (run_id, child_session_key, child_session_id, requester_agent_id,"
            " agent_id, task, status, created_at)"
            " VALUES ('r1', 'agent:main:main', 's', 'main', 'main', 't', 'done', 0)"
        )
    )
    item = await db.outbox.insert(_item(run_id="r1"))
    assert await db.outbox.get_by_run("r1") == item
    with pytest.raises(RecordConflictError):
        await db.outbox.insert(_item(run_id="r1"))
    with pytest.raises(InvalidUpdateError, match="FOREIGN KEY"):
        await db.outbox.insert(_item(run_id="unknown-run"))


async def test_due_items_and_delivery_updates(db: StateDB) -> None:
    now_item = await db.outbox.insert(_item())
    later = await db.outbox.insert(_item(next_attempt_at=500.0))
    soon = await db.outbox.insert(_item(next_attempt_at=150.0))
    assert now_item.id is not None
    assert later.id is not None
    assert soon.id is not None
    assert [i.id for i in await db.outbox.due(200.0)] == [now_item.id, soon.id]
    delivered = await db.outbox.update(
        now_item.id, state="delivered", delivered_at=201.0, attempts=1, message_ids=("1.2", "1.3")
    )
    assert delivered.message_ids == ("1.2", "1.3")
    assert [i.id for i in await db.outbox.due(1000.0)] == [later.id, soon.id]
    assert [i.id for i in await db.outbox.list(states=["delivered"])] == [now_item.id]
    assert len(await db.outbox.list()) == 3
    with pytest.raises(InvalidUpdateError):
        await db.outbox.update(later.id, state="lost")
    with pytest.raises(InvalidUpdateError):
        await db.outbox.update(later.id, id=5)
    with pytest.raises(RecordNotFoundError):
        await db.outbox.update(424242, attempts=2)


async def test_sends_a_crash_cut_off_are_reopened_in_doubt_and_due_now(db: StateDB) -> None:
    cut = await db.outbox.insert(
        _item(state="sending", attempts=2, next_attempt_at=900.0, first_attempt_at=120.5)
    )
    waiting = await db.outbox.insert(_item(attempts=1, next_attempt_at=900.0))
    done = await db.outbox.insert(_item(state="delivered", attempts=1))

    assert await db.outbox.reopen_interrupted_sends() == 1

    reopened = await db.outbox.get(cut.id or 0)
    assert reopened is not None
    assert (reopened.state, reopened.in_doubt, reopened.next_attempt_at) == ("pending", True, None)
    assert (reopened.attempts, reopened.first_attempt_at) == (2, 120.5)
    assert await db.outbox.get(waiting.id or 0) == waiting  # never handed over: untouched
    assert await db.outbox.get(done.id or 0) == done
    assert not waiting.in_doubt
    assert [i.id for i in await db.outbox.due(100.0)] == [cut.id]
