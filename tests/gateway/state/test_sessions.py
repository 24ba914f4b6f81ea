"""The sessions table: create, find, list filters, usage totals, archive bookkeeping."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import uuid

import pytest

from gateway.llm import Usage
from gateway.state import (
    Origin,
    RecordConflictError,
    RecordNotFoundError,
    SessionRecord,
    StateDB,
)
from tests.gateway.harness import HANG_GUARD_SECONDS
from tests.gateway.state.records import session_record


async def test_create_then_find_by_key_and_id(db: StateDB) -> None:
    origin = Origin("slack", "T1", "C1", thread_id="1712345678.123456", chat_type="channel")
    record = SessionRecord(
        key="agent:main:slack:channel:c1:thread:1712345678_123456",
        session_id=str(uuid.uuid4()),
        agent_id="main",
        kind="chat",
        created_at=1.5,
        updated_at=1.5,
        parent_key=None,
        label="triage",
        model="demo/scripted",
        origin=origin,
    )
    stored, created = await db.sessions.create(record)
    assert created
    assert stored == record
    assert await db.sessions.get(record.key) == record
    assert await db.sessions.get_by_id(record.session_id) == record
    assert await db.sessions.get("agent:main:main") is None


async def test_create_twice_keeps_the_first(db: StateDB) -> None:
    first, _ = await db.sessions.create(session_record("agent:main:main", "main"))
    second, created = await db.sessions.create(session_record("agent:main:main", "main"))
    assert not created
    assert second == first


async def test_a_reused_session_id_is_a_conflict(db: StateDB) -> None:
    first, _ = await db.sessions.create(session_record("agent:main:main", "main"))
    clash = dataclasses.replace(session_record("agent:main:webchat:x"), session_id=first.session_id)
    with pytest.raises(RecordConflictError):
        await db.sessions.create(clash)


async def test_listing_hides_subagents_and_archived_unless_asked(db: StateDB) -> None:
    await db.sessions.create(session_record("agent:main:main", "main", at=1))
    child = f"agent:main:subagent:{uuid.uuid4()}"
    await db.sessions.create(session_record(child, "subagent", at=2))
    await db.sessions.create(session_record("agent:main:webchat:old", at=3))
    await db.sessions.mark_archived([("agent:main:webchat:old", 5.0, "/x")])

    def keys(records: list[SessionRecord]) -> list[str]:
        return [r.key for r in records]

    assert keys(await db.sessions.list()) == ["agent:main:main"]
    assert keys(await db.sessions.list(include_subagents=True)) == [child, "agent:main:main"]
    assert keys(await db.sessions.list(include_archived=True)) == [
        "agent:main:webchat:old",
        "agent:main:main",
    ]
    assert len(await db.sessions.list(include_subagents=True, include_archived=True)) == 3
    assert keys(await db.sessions.list(include_subagents=True, limit=1)) == [child]
    assert await db.sessions.list(agent_id="other") == []


async def test_usage_adds_up_and_cost_stays_unknown_until_priced(db: StateDB) -> None:
    await db.sessions.create(session_record("agent:main:main", "main"))
    after = await db.sessions.add_usage("agent:main:main", Usage(100, 20, 50, 5), at=2000.0)
    assert after.usage == Usage(100, 20, 50, 5)
    assert after.cost_usd is None
    assert after.updated_at == 2000.0
    after = await db.sessions.add_usage("agent:main:main", Usage(1, 2), 0.25, at=1500.0)
    after = await db.sessions.add_usage("agent:main:main", Usage(1, 2), 0.5)
    assert after.usage == Usage(102, 24, 50, 5)
    assert after.cost_usd == pytest.approx(0.75)
    assert after.updated_at >= 2000.0  # never moves backwards


async def test_origin_model_label_and_touch(db: StateDB) -> None:
    await db.sessions.create(session_record("agent:main:main", "main"))
    origin = Origin("discord", "bot", "42", None, "dm")
    assert (await db.sessions.set_origin("agent:main:main", origin, at=3000.0)).origin == origin
    assert (await db.sessions.set_origin("agent:main:main", None)).origin is None
    assert (await db.sessions.set_model("agent:main:main", "a/b")).model == "a/b"
    assert (await db.sessions.set_label("agent:main:main", "x")).label == "x"
    assert (await db.sessions.touch("agent:main:main", at=4e9)).updated_at == 4e9


async def test_updates_of_unknown_sessions_raise(db: StateDB) -> None:
    with pytest.raises(RecordNotFoundError):
        await db.sessions.add_usage("agent:main:main", Usage(1, 1))
    with pytest.raises(RecordNotFoundError):
        await db.sessions.set_archive_due("agent:main:main", 1.0)


async def test_archive_schedule_and_marking(db: StateDB) -> None:
    keys = [f"agent:main:subagent:{uuid.uuid4()}" for _ in range(3)]
    for key in keys:
        await db.sessions.create(session_record(key, "subagent"))
    await db.sessions.set_archive_due(keys[0], 50.0)
    await db.sessions.set_archive_due(keys[1], 10.0)
    assert await db.sessions.archive_schedule() == [(keys[1], 10.0), (keys[0], 50.0)]
    assert await db.sessions.mark_archived([(keys[1], 60.0, "/a"), (keys[2], 60.0, None)]) == 2
    assert await db.sessions.mark_archived([(keys[1], 70.0, "/b")]) == 0  # first record stays
    archived = await db.sessions.get(keys[1])
    assert archived is not None
    assert archived.archived
    assert (archived.archived_at, archived.archived_path, archived.archive_due_at) == (
        60.0,
        "/a",
        None,
    )
    assert await db.sessions.archive_schedule() == [(keys[0], 50.0)]
    found = await db.sessions.get_many([*keys, "agent:main:main"])
    assert set(found) == set(keys)


async def test_due_for_archive_and_the_schedule_after_a_time(db: StateDB) -> None:
    keys = [f"agent:main:subagent:{uuid.uuid4()}" for _ in range(3)]
    for key, due in zip(keys, (10.0, 20.0, 30.0), strict=True):
        await db.sessions.create(session_record(key, "subagent"))
        await db.sessions.set_archive_due(key, due)
    assert [r.key for r in await db.sessions.due_for_archive(20.0)] == keys[:2]
    assert await db.sessions.archive_schedule(after=20.0) == [(keys[2], 30.0)]
    await db.sessions.mark_archived([(keys[0], 25.0, None)])
    assert [r.key for r in await db.sessions.due_for_archive(20.0)] == [keys[1]]


async def test_a_read_while_an_archive_is_being_recorded_is_never_cached_over_it(
    db: StateDB,
) -> None:
    """A read made while ``mark_archived`` waits for the writer gets the row from before;
    once the write is done, reads see the session archived (the older row is not kept)."""
    key = "agent:main:main"
    await db.sessions.create(session_record(key))
    writer_free = threading.Event()
    async with asyncio.timeout(HANG_GUARD_SECONDS):
        busy = asyncio.ensure_future(db.write(lambda _: writer_free.wait(HANG_GUARD_SECONDS)))
        marking = asyncio.ensure_future(db.sessions.mark_archived([(key, 60.0, "/a")]))
        await asyncio.sleep(0)  # the record waits behind the busy writer
        during = await db.sessions.get(key)
        writer_free.set()
        await busy
        assert await marking == 1
        after = await db.sessions.get(key)
    assert during is not None
    assert not during.archived
    assert after is not None
    assert after.archived
