"""The runs table: insert, update by id, list filters, constraints."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from gateway.llm import Usage
from gateway.state import (
    InvalidUpdateError,
    Origin,
    RecordConflictError,
    RecordNotFoundError,
    RunRecord,
    SessionRecord,
    Spent,
    SqliteStateDB,
    StateDB,
)
from gateway.state._sql import insert_sql
from gateway.state.connection import Connection
from gateway.state.rows import to_column_value
from gateway.state.runrows import RUN_COLUMNS, run_columns
from gateway.state.schema import migrations
from gateway.state.sqlite import schema as db_module
from tests.gateway.state.records import child_session, run_record


async def _child(db: StateDB) -> SessionRecord:
    return await child_session(db, "agent:main:main")


def _run(child: SessionRecord, *, at: float = 10.0, **fields: Any) -> RunRecord:
    """A run the main session spawned from a Slack thread."""
    spawned_from_slack: dict[str, Any] = {
        "task": "summarise the logs",
        "created_at": at,
        "parent_session_key": "agent:main:main",
        "origin_channel": "slack",
        "origin_account": "T1",
        "origin_chat_id": "C1",
        "origin_thread_id": "1712345678.123456",
        "origin_chat_type": "channel",
    }
    return run_record(child, **{**spawned_from_slack, **fields})


async def test_insert_get_and_views(db: StateDB) -> None:
    run = _run(await _child(db), model_applied=False, cleanup="delete", label="logs")
    assert await db.runs.insert(run) == run
    stored = await db.runs.get(run.run_id)
    assert stored == run
    assert stored.request.model_applied is False
    assert stored.request.origin == Origin("slack", "T1", "C1", "1712345678.123456", "channel")
    assert stored.progress.usage == Usage()
    assert not stored.progress.finished
    assert await db.runs.get("nope") is None


async def test_update_sets_columns_and_returns_the_row(db: StateDB) -> None:
    run = await db.runs.insert(_run(await _child(db)))
    updated = await db.runs.update(run.run_id, status="done", ended_at=20.0, result_text="ok")
    assert (updated.progress.status, updated.progress.ended_at, updated.progress.result_text) == (
        "done",
        20.0,
        "ok",
    )
    assert updated.progress.finished
    totals = await db.runs.add_usage(run.run_id, Usage(10, 5, 1, 0), 0.01)
    totals = await db.runs.add_usage(run.run_id, Usage(1, 1), None)
    assert totals.progress.usage == Usage(11, 6, 1, 0)
    assert totals.progress.cost_usd == pytest.approx(0.01)


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


async def _counted(db: StateDB, parent: str) -> int:
    """A session's live runs, counted from the runs themselves."""
    sql = (
        "SELECT COUNT(*) FROM runs WHERE parent_session_key = ?"
        " AND status IN ('queued', 'running', 'announcing')"
    )
    return int(await db.read(lambda c: c.execute(sql, (parent,)).fetchone()[0]))


async def _kept(db: StateDB, parent: str) -> int:
    """A session's live runs as the ``live_runs`` table keeps them."""
    sql = "SELECT live FROM live_runs WHERE parent_session_key = ?"
    row = await db.read(lambda c: c.execute(sql, (parent,)).fetchone())
    return int(row[0]) if row is not None else 0


async def test_live_runs_are_counted_per_requester_through_every_status_change(
    db: StateDB,
) -> None:
    person, other = "agent:main:main", "agent:main:webchat:other"

    async def assert_live(expected: int, parent: str = person) -> None:
        assert await _kept(db, parent) == expected
        assert await _counted(db, parent) == expected
        assert await db.runs.live_children(parent) == expected

    a = await db.runs.insert(_run(await _child(db)))
    b = await db.runs.insert(_run(await _child(db), status="running"))
    c = await db.runs.insert(_run(await _child(db), status="done"))
    await db.runs.insert(_run(await _child(db), parent_session_key=other))
    await assert_live(2)
    await assert_live(1, other)
    await db.runs.update(a.run_id, status="announcing")  # live to live
    await assert_live(2)
    await db.runs.update(a.run_id, status="done", ended_at=20.0)
    await assert_live(1)
    await db.runs.update(c.run_id, status="queued")  # final back to live (a repair)
    await assert_live(2)
    await db.runs.update(c.run_id, label="relabelled")  # no status: no change
    await assert_live(2)
    await db.ends.finish_run(b.run_id, {"status": "error"}, now=0.0)
    await assert_live(1)
    with pytest.raises(RecordNotFoundError):
        await db.runs.update("missing", status="done")
    await assert_live(1)
    await assert_live(1, other)


async def test_migration_counts_the_live_runs_an_older_database_has(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "herald.db"
    counted = next(i for i, m in enumerate(migrations()) if "CREATE TABLE live_runs" in m[0])
    older = migrations()[:counted]  # the schema before the count was kept
    monkeypatch.setattr(db_module, "migrations", lambda: older)
    monkeypatch.setattr(db_module, "LATEST_VERSION", len(older))
    db = await SqliteStateDB.open(path)
    statuses = ["queued", "running", "announcing", "done", "error", "queued"]
    children = [await _child(db) for _ in statuses]
    runs = [
        _run(child, status=status, parent_session_key="agent:main:main" if n < 4 else "p:other")
        for n, (child, status) in enumerate(zip(children, statuses, strict=True))
    ]

    def insert_old(conn: Connection) -> None:  # as the older code did: no count kept
        # Only the columns the older schema has (later migrations add more).
        present = {row[1] for row in conn.execute("PRAGMA table_info(runs)")}
        columns = [name for name in RUN_COLUMNS if name in present]
        for run in runs:
            values = [to_column_value(run_columns(run)[name]) for name in columns]
            conn.execute(insert_sql("runs", columns), values)

    await db.write(insert_old)
    await db.close()
    monkeypatch.undo()
    db = await SqliteStateDB.open(path)
    try:
        assert await _kept(db, "agent:main:main") == 3
        assert await _kept(db, "p:other") == 1
    finally:
        await db.close()


async def test_a_turns_usage_goes_to_its_session_and_its_run_in_one_write(db: StateDB) -> None:
    child = await _child(db)
    run = await db.runs.insert(_run(child))
    writes = db.write_groups.writes if db.write_groups is not None else None
    await db.sessions.add_usage(child.key, Usage(input=5, output=2), 0.25, run_id=run.run_id)
    if db.write_groups is not None:  # SQLite counts its writes (each a function)
        assert db.write_groups.writes == (writes or 0) + 1
    session = await db.sessions.get(child.key)
    stored = await db.runs.get(run.run_id)
    assert session is not None
    assert stored is not None
    assert (session.usage, session.cost_usd) == (Usage(input=5, output=2), 0.25)
    assert (stored.progress.usage, stored.progress.cost_usd) == (Usage(input=5, output=2), 0.25)
    # An unknown run is reported, after the session's totals were kept.
    with pytest.raises(RecordNotFoundError):
        await db.sessions.add_usage(child.key, Usage(input=1), None, run_id="no-such-run")
    session = await db.sessions.get(child.key)
    assert session is not None
    assert session.usage == Usage(input=6, output=2)


async def test_a_runs_end_carries_its_turns_usage_to_the_run_and_its_session(
    db: StateDB,
) -> None:
    child = await _child(db)
    run = await db.runs.insert(_run(child, status="running"))
    seen = await db.sessions.get(child.key)  # cached: the write must drop it
    assert seen is not None
    assert seen.usage == Usage()
    writes = db.write_groups.writes if db.write_groups is not None else None
    spent = Spent(Usage(input=7, output=3), 0.5)
    ended = await db.runs.update(run.run_id, spent=spent, status="announcing", outcome="done")
    if db.write_groups is not None:  # SQLite counts its writes (each a function)
        assert db.write_groups.writes == (writes or 0) + 1
    assert (ended.progress.status, ended.progress.usage, ended.progress.cost_usd) == (
        "announcing",
        Usage(7, 3),
        0.5,
    )
    session = await db.sessions.get(child.key)
    assert session is not None
    assert (session.usage, session.cost_usd) == (Usage(input=7, output=3), 0.5)
    assert await _kept(db, "agent:main:main") == 1  # still live
    # A run already final takes the general write: its usage is still added once.
    final = await db.runs.insert(_run(await _child(db), status="done"))
    again = await db.runs.update(final.run_id, spent=Spent(Usage(input=2)), status="running")
    child_of_final = await db.sessions.get(final.child_session_key)
    assert child_of_final is not None
    assert (again.progress.usage, child_of_final.usage) == (Usage(input=2), Usage(input=2))
    # A missing run changes nothing.
    with pytest.raises(RecordNotFoundError):
        await db.runs.update("no-such-run", spent=spent, status="announcing")
    session = await db.sessions.get(child.key)
    assert session is not None
    assert session.usage == Usage(input=7, output=3)


async def test_a_runs_final_status_and_its_childs_archive_time_are_one_write(
    db: StateDB,
) -> None:
    child = await _child(db)
    run = await db.runs.insert(_run(child, status="announcing"))
    final = await db.ends.finish_run(run.run_id, {"status": "done"}, now=0.0, archive_due_at=99.0)
    assert final.progress.status == "done"
    session = await db.sessions.get(child.key)
    assert session is not None
    assert session.archive_due_at == 99.0
    # A refused second end changes nothing, the archive time included.
    with pytest.raises(RecordConflictError):
        await db.ends.finish_run(run.run_id, {"status": "error"}, now=0.0, archive_due_at=5.0)
    sql = "SELECT archive_due_at FROM sessions WHERE key = ?"
    assert await db.read(lambda c: c.execute(sql, (child.key,)).fetchone()[0]) == 99.0


async def test_a_run_withdrawn_before_it_began_never_begins(db: StateDB) -> None:
    run = _run(await _child(db))
    await db.runs.insert(run)
    assert await db.runs.withdraw_queued(run.run_id, "its scheduled job was paused")
    assert await db.runs.begin(run.run_id, 20.0) is None
    stored = await db.runs.get(run.run_id)
    assert stored is not None
    assert (stored.progress.status, stored.progress.started_at) == ("queued", None)


async def test_a_run_that_began_first_is_not_withdrawn(db: StateDB) -> None:
    run = _run(await _child(db))
    await db.runs.insert(run)
    begun = await db.runs.begin(run.run_id, 20.0)
    assert begun is not None
    assert (begun.progress.status, begun.progress.started_at) == ("running", 20.0)
    assert not await db.runs.withdraw_queued(run.run_id, "its scheduled job was paused")
    stored = await db.runs.get(run.run_id)
    assert stored is not None
    assert stored.delivery.announce_state is None
    # A run resumed after a restart begins again.
    assert await db.runs.begin(run.run_id, 20.0) is not None
