"""``key_guard``: a context manager entered around each keyed job and slot of a lane."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Hashable
from contextlib import asynccontextmanager

import pytest

from lanes import JobCancelled, JobState, Lane
from tests.lanes.conftest import MakeLane


class Guard:
    """Records what happens around each keyed job, in order."""

    def __init__(self, *, fail_enter: BaseException | None = None) -> None:
        self.events: list[str] = []
        self.held: set[Hashable] = set()
        self.fail_enter = fail_enter

    @asynccontextmanager
    async def __call__(self, key: Hashable) -> AsyncIterator[None]:
        if self.fail_enter is not None:
            raise self.fail_enter
        self.events.append(f"enter {key}")
        self.held.add(key)
        try:
            yield
        finally:
            self.held.discard(key)
            self.events.append(f"exit {key}")


async def test_a_keyed_job_runs_inside_its_guard(make_lane: MakeLane) -> None:
    guard = Guard()
    lane = make_lane(max_concurrent=2, key_guard=guard)
    seen: list[set[Hashable]] = []

    async def job() -> str:
        seen.append(set(guard.held))
        guard.events.append("job")
        return "ok"

    assert await lane.submit(job, key="a") == "ok"
    assert seen == [{"a"}]
    assert guard.events == ["enter a", "job", "exit a"]


async def test_unkeyed_jobs_are_not_guarded(make_lane: MakeLane) -> None:
    guard = Guard()
    lane = make_lane(key_guard=guard)

    async def job() -> int:
        return 1

    assert await lane.submit(job) == 1
    assert guard.events == []


async def test_the_guard_is_left_when_the_job_fails_or_is_cancelled(make_lane: MakeLane) -> None:
    guard = Guard()
    lane = make_lane(max_concurrent=2, key_guard=guard)
    gate = asyncio.Event()

    async def boom() -> None:
        raise ValueError("bad")

    async def blocked() -> None:
        await gate.wait()

    with pytest.raises(ValueError, match="bad"):
        await lane.submit(boom, key="a")
    handle = lane.submit(blocked, key="b")
    for _ in range(5):
        await asyncio.sleep(0)
    assert guard.held == {"b"}
    handle.cancel()
    with pytest.raises(JobCancelled):
        await handle
    assert guard.events == ["enter a", "exit a", "enter b", "exit b"]
    assert guard.held == set()


async def test_a_guard_that_cannot_be_entered_fails_the_job_and_frees_the_key(
    make_lane: MakeLane,
) -> None:
    guard = Guard(fail_enter=ConnectionError("lock server gone"))
    lane = make_lane(key_guard=guard)
    started: list[str] = []

    async def job() -> None:
        started.append("job")

    handle = lane.submit(job, key="a")
    with pytest.raises(ConnectionError, match="lock server gone"):
        await handle
    assert handle.state is JobState.FAILED
    assert started == []  # the factory is never called outside its guard
    guard.fail_enter = None
    await lane.submit(job, key="a")  # the key was released
    assert started == ["job"]


async def test_a_keyed_slot_holds_its_guard_for_the_body(make_lane: MakeLane) -> None:
    guard = Guard()
    lane = make_lane(key_guard=guard)
    async with lane.slot(key="s"):
        assert guard.held == {"s"}
    async with lane.slot():
        assert guard.held == set()
    assert guard.events == ["enter s", "exit s"]


async def test_jobs_of_one_key_enter_the_guard_one_after_the_other() -> None:
    guard = Guard()
    lane = Lane("test", 4, key_guard=guard)
    inside = 0
    most = 0

    async def job() -> None:
        nonlocal inside, most
        inside += 1
        most = max(most, inside)
        await asyncio.sleep(0)
        inside -= 1

    handles = [lane.submit(job, key="k") for _ in range(5)]
    for handle in handles:
        await handle
    await lane.shutdown(0)
    assert most == 1
    assert guard.events == ["enter k", "exit k"] * 5
