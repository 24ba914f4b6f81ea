"""Job handles: awaiting, results, cancellation and wait figures."""

from __future__ import annotations

import asyncio

import pytest

from lanes import JobCancelled, JobNotFinishedError, JobState
from tests.lanes.conftest import FakeClock, MakeLane


async def test_await_returns_the_result(make_lane: MakeLane) -> None:
    lane = make_lane()

    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    handle = lane.submit(answer)
    assert await handle == 42
    assert handle.done()
    assert handle.state is JobState.DONE
    assert handle.result() == 42
    assert await handle == 42  # awaiting again gives the same result


async def test_await_raises_the_jobs_own_exception(make_lane: MakeLane) -> None:
    lane = make_lane()

    async def fail() -> None:
        raise LookupError("missing")

    handle = lane.submit(fail)
    with pytest.raises(LookupError, match="missing"):
        await handle
    assert handle.state is JobState.FAILED
    with pytest.raises(LookupError):
        handle.result()


async def test_result_before_the_end_is_refused(make_lane: MakeLane) -> None:
    lane = make_lane(max_concurrent=0)

    async def job() -> None:
        return None

    handle = lane.submit(job)
    with pytest.raises(JobNotFinishedError) as caught:
        handle.result()
    assert caught.value.state == "queued"
    assert not handle.done()


async def test_a_job_cancelled_while_queued_never_starts(make_lane: MakeLane) -> None:
    lane = make_lane(max_concurrent=0)
    calls: list[str] = []

    def factory() -> asyncio.Future[None]:
        calls.append("called")
        return asyncio.get_running_loop().create_future()

    handle = lane.submit(factory, key="k")
    assert handle.cancel() is True
    assert handle.state is JobState.CANCELLED
    assert lane.queued == 0
    lane.max_concurrent = 5
    await asyncio.sleep(0)
    assert calls == []
    with pytest.raises(JobCancelled) as caught:
        await handle
    assert not isinstance(caught.value, asyncio.CancelledError)
    assert handle.cancel() is False  # already ended


async def test_a_running_job_is_cancelled_through_its_task(make_lane: MakeLane) -> None:
    lane = make_lane()
    seen: list[str] = []
    started = asyncio.Event()

    async def job() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    handle = lane.submit(job)
    await started.wait()
    assert handle.state.value == "running"
    assert handle.cancel() is True
    with pytest.raises(JobCancelled):
        await handle
    assert seen == ["cancelled"]
    assert handle.state is JobState.CANCELLED
    assert lane.active == 0


async def test_a_cancellation_carries_the_message_it_was_given(make_lane: MakeLane) -> None:
    lane = make_lane()
    started = asyncio.Event()

    async def job() -> tuple[object, ...]:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError as stop:
            return stop.args  # why it was cancelled: the job may answer differently
        return ()

    handle = lane.submit(job)
    await started.wait()
    assert handle.cancel("asked to stop") is True
    assert await handle == ("asked to stop",)


async def test_a_job_that_swallows_cancellation_ends_done(make_lane: MakeLane) -> None:
    lane = make_lane()
    started = asyncio.Event()

    async def stubborn() -> str:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            return "kept going"
        return "unreachable"

    handle = lane.submit(stubborn)
    await started.wait()
    handle.cancel()
    assert await handle == "kept going"
    assert handle.state is JobState.DONE


async def test_cancelling_an_awaiter_leaves_the_job_and_other_awaiters(
    make_lane: MakeLane,
) -> None:
    lane = make_lane()
    gate = asyncio.Event()

    async def job() -> str:
        await gate.wait()
        return "finished"

    handle = lane.submit(job)

    async def watch() -> str:
        return await handle

    first = asyncio.create_task(watch())
    second = asyncio.create_task(watch())
    await asyncio.sleep(0)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert handle.state is JobState.RUNNING
    gate.set()
    assert await second == "finished"


async def test_wait_seconds_counts_time_in_the_queue(make_lane: MakeLane, clock: FakeClock) -> None:
    lane = make_lane(max_concurrent=0, clock=clock)

    async def job() -> None:
        return None

    handle = lane.submit(job)
    clock.now += 1.5
    assert handle.wait_seconds == 1.5  # still queued: so far
    lane.max_concurrent = 1
    clock.now += 10.0
    assert handle.wait_seconds == 1.5  # fixed once started
    await handle
    assert handle.wait_seconds == 1.5


async def test_handle_identity_and_repr(make_lane: MakeLane) -> None:
    lane = make_lane("subagent", 0)

    async def job() -> None:
        return None

    handle = lane.submit(job, key="agent:main:subagent:1")
    assert handle.lane is lane
    assert handle.key == "agent:main:subagent:1"
    assert repr(handle) == ("<JobHandle lane=subagent state=queued key='agent:main:subagent:1'>")
    plain = lane.submit(job)
    assert repr(plain) == "<JobHandle lane=subagent state=queued>"
