"""Auto-archive: due times persist, start-up archives overdue sessions at once and schedules
the rest, ``archiveAfterMinutes: 0`` disables it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from gateway.archive import ArchiveScheduler
from gateway.sessions import SessionKey, SessionStore
from gateway.state import SessionRecord
from tests.gateway.sessions.support import opened_store

#: Upper bound for awaiting an archive that is due in a fraction of a second (not a timing
#: assertion: only keeps a broken scheduler from hanging the suite).
GUARD_SECONDS = 20


class Archived:
    """Collects on_archived calls and lets a test await a given key."""

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.paths: dict[str, Path | None] = {}
        self._events: dict[str, asyncio.Event] = {}

    def __call__(self, key: str, path: Path | None) -> None:
        self.keys.append(key)
        self.paths[key] = path
        self._event(key).set()

    def _event(self, key: str) -> asyncio.Event:
        return self._events.setdefault(key, asyncio.Event())

    async def wait_for(self, key: str) -> None:
        await asyncio.wait_for(self._event(key).wait(), GUARD_SECONDS)


SchedulerFactory = Callable[..., ArchiveScheduler]


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SessionStore]:
    async with opened_store(tmp_path / "state") as opened:
        yield opened


@pytest.fixture
async def make_scheduler(store: SessionStore) -> AsyncIterator[SchedulerFactory]:
    made: list[ArchiveScheduler] = []

    def make(minutes: float = 60, on_archived: Archived | None = None) -> ArchiveScheduler:
        scheduler = ArchiveScheduler(store, archive_after_minutes=minutes, on_archived=on_archived)
        made.append(scheduler)
        return scheduler

    yield make
    for scheduler in made:
        await scheduler.shutdown()


async def _child(store: SessionStore) -> SessionRecord:
    return await store.ensure(SessionKey.subagent("main"), parent_key="agent:main:main")


async def test_start_archives_overdue_at_once_and_schedules_the_rest(
    store: SessionStore, make_scheduler: SchedulerFactory
) -> None:
    overdue, soon, later, never = [await _child(store) for _ in range(4)]
    now = time.time()
    await store.db.sessions.set_archive_due(overdue.key, now - 3600)
    await store.db.sessions.set_archive_due(soon.key, now + 0.3)
    await store.db.sessions.set_archive_due(later.key, now + 3600)
    archived = Archived()
    scheduler = make_scheduler(on_archived=archived)

    assert await scheduler.start() == 1

    assert archived.keys == [overdue.key]
    assert (await store.require(overdue.key)).archived
    assert scheduler.is_scheduled(soon.key)
    assert scheduler.is_scheduled(later.key)
    assert not scheduler.is_scheduled(overdue.key)
    assert not scheduler.is_scheduled(never.key)
    await archived.wait_for(soon.key)
    record = await store.require(soon.key)
    assert record.archived
    assert record.archived_path == str(archived.paths[soon.key])
    assert not (await store.require(later.key)).archived
    assert not (await store.require(never.key)).archived
    assert scheduler.scheduled_count == 1


async def test_schedule_persists_the_due_time_for_the_next_start(
    store: SessionStore, make_scheduler: SchedulerFactory
) -> None:
    child = await _child(store)
    first = make_scheduler(minutes=60)
    await first.start()
    before = time.time()
    due = await first.schedule(child.key)
    assert due is not None
    assert before + 3600 <= due <= time.time() + 3600
    assert (await store.require(child.key)).archive_due_at == due
    assert first.is_scheduled(child.key)
    await first.shutdown()

    second = make_scheduler(minutes=60)
    assert await second.start() == 0
    assert second.is_scheduled(child.key)  # rebuilt from the database


async def test_scheduling_a_past_time_archives_promptly(
    store: SessionStore, make_scheduler: SchedulerFactory
) -> None:
    child = await _child(store)
    archived = Archived()
    scheduler = make_scheduler(on_archived=archived)
    await scheduler.start()
    await scheduler.schedule(child.key, time.time() - 1)
    await archived.wait_for(child.key)
    assert (await store.require(child.key)).archived


async def test_cancel_and_archive_now(
    store: SessionStore, make_scheduler: SchedulerFactory
) -> None:
    kept, deleted = await _child(store), await _child(store)
    archived = Archived()
    scheduler = make_scheduler(on_archived=archived)
    await scheduler.start()
    await scheduler.schedule(kept.key)
    await scheduler.schedule(deleted.key)
    await scheduler.cancel(kept.key)
    assert not scheduler.is_scheduled(kept.key)
    assert (await store.require(kept.key)).archive_due_at is None
    path = await scheduler.archive_now(deleted.key)
    assert path is not None
    assert archived.paths == {deleted.key: path}
    assert not scheduler.is_scheduled(deleted.key)
    await scheduler.cancel("agent:main:webchat:unknown")  # nothing to forget: no error


async def test_zero_minutes_disables_everything(
    store: SessionStore, make_scheduler: SchedulerFactory
) -> None:
    overdue, fresh = await _child(store), await _child(store)
    await store.db.sessions.set_archive_due(overdue.key, time.time() - 60)
    scheduler = make_scheduler(minutes=0)
    assert not scheduler.enabled
    assert await scheduler.start() == 0
    assert await scheduler.schedule(fresh.key) is None
    assert scheduler.scheduled_count == 0
    assert not (await store.require(overdue.key)).archived
    assert (await store.require(fresh.key)).archive_due_at is None
    assert "disabled" in repr(scheduler)


async def test_an_overdue_session_whose_file_is_gone_is_still_archived(
    store: SessionStore, make_scheduler: SchedulerFactory
) -> None:
    child = await _child(store)
    store.transcript_path(child).unlink()
    await store.db.sessions.set_archive_due(child.key, time.time() - 1)
    archived = Archived()
    assert await make_scheduler(on_archived=archived).start() == 1
    assert archived.paths == {child.key: None}


async def test_shutdown_is_idempotent_and_stops_scheduling(
    store: SessionStore, make_scheduler: SchedulerFactory
) -> None:
    child = await _child(store)
    scheduler = make_scheduler()
    await scheduler.start()
    await scheduler.shutdown()
    await scheduler.shutdown()
    assert await scheduler.schedule(child.key) is None
    assert "stopped" in repr(scheduler)


def test_negative_minutes_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="archive_after_minutes"):
        ArchiveScheduler(None, archive_after_minutes=-1)  # type: ignore[arg-type]
