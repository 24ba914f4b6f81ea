"""Lane behaviour: order, width, keys, figures, slots, shutdown."""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from lanes import InvalidWidthError, JobCancelled, JobState, Lane, LaneClosed, LaneFullError
from tests.lanes.conftest import FakeClock, MakeLane


async def settle(turns: int = 10) -> None:
    """Give the event loop a few turns, so started tasks run up to their next wait."""
    for _ in range(turns):
        await asyncio.sleep(0)


class Probe:
    """Makes job factories that record their starts and wait until released."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.running: set[str] = set()
        self.most_running = 0
        self.gates: dict[str, asyncio.Event] = {}

    def job(
        self, name: str, *, gated: bool = True, error: BaseException | None = None
    ) -> Callable[[], Awaitable[str]]:
        gate = self.gates[name] = asyncio.Event()

        async def run() -> str:
            self.started.append(name)
            self.running.add(name)
            self.most_running = max(self.most_running, len(self.running))
            try:
                if gated:
                    await gate.wait()
                if error is not None:
                    raise error
                return name
            finally:
                self.running.discard(name)

        return run

    def release(self, *names: str) -> None:
        for name in names:
            self.gates[name].set()


# -- order and width ----------------------------------------------------------------


async def test_jobs_start_in_submission_order(make_lane: MakeLane) -> None:
    lane = make_lane(max_concurrent=1)
    probe = Probe()
    names = [f"j{i}" for i in range(6)]
    for name in names:
        lane.submit(probe.job(name, gated=False))
    await lane.join()
    assert probe.started == names


async def test_width_bounds_the_running_jobs(make_lane: MakeLane) -> None:
    lane = make_lane(max_concurrent=2)
    probe = Probe()
    handles = [lane.submit(probe.job(f"j{i}")) for i in range(5)]
    await settle()
    assert probe.started == ["j0", "j1"]
    assert (lane.active, lane.queued) == (2, 3)
    assert [h.state for h in handles] == ["running"] * 2 + ["queued"] * 3
    probe.release("j0")
    await settle()
    assert probe.started == ["j0", "j1", "j2"]
    probe.release(*probe.gates)
    await lane.join()
    assert probe.most_running == 2
    assert [await h for h in handles] == [f"j{i}" for i in range(5)]


async def test_raising_the_width_starts_waiting_jobs_at_once(make_lane: MakeLane) -> None:
    lane = make_lane(max_concurrent=0)
    probe = Probe()
    handles = [lane.submit(probe.job(f"j{i}")) for i in range(4)]
    await settle()
    assert probe.started == []
    lane.max_concurrent = 3
    # Started by the setter itself, before the loop gets a turn.
    assert [h.state for h in handles] == ["running"] * 3 + ["queued"]
    assert lane.active == 3


async def test_lowering_the_width_lets_running_jobs_finish(make_lane: MakeLane) -> None:
    lane = make_lane(max_concurrent=3)
    probe = Probe()
    handles = [lane.submit(probe.job(f"j{i}")) for i in range(5)]
    await settle()
    lane.max_concurrent = 1
    assert lane.active == 3  # nobody is stopped
    probe.release("j0", "j1")
    await settle()
    assert probe.started == ["j0", "j1", "j2"]  # one still runs: width 1 is full
    assert handles[3].state is JobState.QUEUED
    probe.release("j2")
    await settle()
    assert probe.started == ["j0", "j1", "j2", "j3"]


@pytest.mark.parametrize("width", [-1, 1.5, True, "2"])
def test_invalid_width_is_refused(width: Any) -> None:
    with pytest.raises(InvalidWidthError) as caught:
        Lane("bad", width)
    assert isinstance(caught.value, ValueError)
    lane = Lane("ok", 1)
    with pytest.raises(InvalidWidthError):
        lane.max_concurrent = width
    assert lane.max_concurrent == 1


async def test_max_queued_bounds_the_waiting_jobs(make_lane: MakeLane) -> None:
    lane = make_lane(max_concurrent=1, max_queued=2)
    probe = Probe()
    lane.submit(probe.job("j0"))  # starts at once: not queued
    waiting = [lane.submit(probe.job(f"q{i}"), key="k") for i in range(2)]
    with pytest.raises(LaneFullError) as caught:
        lane.submit(probe.job("refused"))
    assert caught.value.max_queued == lane.max_queued == 2
    assert lane.queued == 2
    waiting[1].cancel()
    lane.submit(probe.job("q2"))
    probe.release(*probe.gates)
    await lane.join()
    assert probe.started == ["j0", "q0", "q2"]


def test_invalid_max_queued_is_refused() -> None:
    with pytest.raises(InvalidWidthError):
        Lane("bad", 1, max_queued=-1)


# -- keys -----------------------------------------------------------------------------


async def test_jobs_of_one_key_run_one_at_a_time_in_order(make_lane: MakeLane) -> None:
    lane = make_lane(max_concurrent=4)
    probe = Probe()
    for i in range(3):
        lane.submit(probe.job(f"a{i}"), key="a")
    await settle()
    assert probe.started == ["a0"]
    assert (lane.active, lane.queued) == (1, 2)
    probe.release("a0")
    await settle()
    assert probe.started == ["a0", "a1"]
    probe.release("a1", "a2")
    await lane.join()
    assert probe.started == ["a0", "a1", "a2"]
    assert probe.most_running == 1


async def test_other_keys_overtake_a_blocked_key(make_lane: MakeLane) -> None:
    lane = make_lane(max_concurrent=2)
    probe = Probe()
    lane.submit(probe.job("a0"), key="a")
    blocked = lane.submit(probe.job("a1"), key="a")
    lane.submit(probe.job("b0"), key="b")
    await settle()
    assert probe.started == ["a0", "b0"]
    assert blocked.state is JobState.QUEUED


async def test_a_released_key_starts_before_later_jobs(make_lane: MakeLane) -> None:
    lane = make_lane(max_concurrent=2)
    probe = Probe()
    lane.submit(probe.job("a0"), key="a")
    lane.submit(probe.job("a1"), key="a")  # blocked behind a0
    lane.submit(probe.job("x0"))  # takes the second place
    later = lane.submit(probe.job("x1"))
    await settle()
    probe.release("a0")
    await settle()
    # a1 was submitted before x1, so it gets the freed place.
    assert probe.started == ["a0", "x0", "a1"]
    assert later.state is JobState.QUEUED


async def test_cancelling_a_key_holder_while_queued_frees_the_key(
    make_lane: MakeLane,
) -> None:
    lane = make_lane(max_concurrent=0)
    probe = Probe()
    first = lane.submit(probe.job("a0"), key="a")
    lane.submit(probe.job("a1"), key="a")
    first.cancel()
    lane.max_concurrent = 2
    await settle()
    assert probe.started == ["a1"]


# -- figures ----------------------------------------------------------------------------


async def test_figures_and_repr(make_lane: MakeLane, clock: FakeClock) -> None:
    waits: list[float] = []
    lane = make_lane("subagent", 1, on_wait=waits.append, clock=clock)
    probe = Probe()
    first = lane.submit(probe.job("j0"))
    clock.now += 2.0
    second = lane.submit(probe.job("j1", error=ValueError("boom")))
    third = lane.submit(probe.job("j2"))
    assert repr(lane) == "<Lane subagent active=1 queued=2>"
    clock.now += 3.0
    third.cancel()
    probe.release("j0", "j1")
    await lane.join()
    stats = lane.stats()
    assert (stats.submitted, stats.done, stats.failed, stats.cancelled) == (3, 1, 1, 1)
    assert (stats.active, stats.queued, stats.max_concurrent) == (0, 0, 1)
    # j0 started at once; j1 waited from 102 to 105. The cancelled job never started.
    assert waits == [0.0, 3.0]
    assert (stats.wait_count, stats.wait_total_seconds, stats.wait_max_seconds) == (2, 3.0, 3.0)
    assert (first.wait_seconds, second.wait_seconds, third.wait_seconds) == (0.0, 3.0, 3.0)
    assert stats.name == lane.name == "subagent"


async def test_a_failing_wait_hook_is_logged_and_the_job_runs(
    make_lane: MakeLane, caplog: pytest.LogCaptureFixture
) -> None:
    def hook(seconds: float) -> None:
        raise OSError("metrics down")

    lane = make_lane(on_wait=hook)
    probe = Probe()
    with caplog.at_level(logging.ERROR, logger="lanes.lane"):
        handle = lane.submit(probe.job("j0", gated=False))
        assert await handle == "j0"
    assert "on_wait hook failed" in caplog.text


# -- failures never leak -----------------------------------------------------------------


async def test_unawaited_failures_reach_no_exception_handler(make_lane: MakeLane) -> None:
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    try:
        lane = make_lane(max_concurrent=2)
        probe = Probe()
        for i in range(4):
            lane.submit(probe.job(f"j{i}", gated=False, error=RuntimeError("boom")))
        await lane.join()
        lane.submit(probe.job("after", gated=False))
        await lane.join()
        gc.collect()
        await settle()
    finally:
        loop.set_exception_handler(None)
    assert reported == []
    assert lane.stats().failed == 4
    assert "after" in probe.started  # the lane still works after failures


async def test_a_factory_that_raises_fails_its_job_only(make_lane: MakeLane) -> None:
    lane = make_lane(max_concurrent=1)

    def broken() -> Awaitable[None]:
        raise KeyError("no such session")

    def not_awaitable() -> Awaitable[None]:
        return 42  # type: ignore[return-value]

    first = lane.submit(broken)
    second = lane.submit(not_awaitable)
    probe = Probe()
    third = lane.submit(probe.job("ok", gated=False))
    with pytest.raises(KeyError):
        await first
    with pytest.raises(TypeError):
        await second
    assert await third == "ok"
    assert (first.state, second.state) == (JobState.FAILED, JobState.FAILED)


async def test_join_returns_at_once_when_idle(make_lane: MakeLane) -> None:
    lane = make_lane()
    await lane.join()
    assert (lane.active, lane.queued) == (0, 0)


# -- slots ------------------------------------------------------------------------------


async def test_a_slot_queues_fifo_with_jobs_and_counts_as_active(make_lane: MakeLane) -> None:
    lane = make_lane(max_concurrent=1)
    probe = Probe()
    lane.submit(probe.job("j0"))
    order: list[str] = []

    async def holder() -> None:
        async with lane.slot():
            order.append("slot")
            assert lane.active == 1
            await asyncio.sleep(0)

    task = asyncio.create_task(holder())
    await settle()
    lane.submit(probe.job("j1", gated=False))
    assert lane.queued == 2
    assert order == []
    probe.release("j0")
    await task
    await lane.join()
    assert order == ["slot"]
    assert probe.started == ["j0", "j1"]
    assert lane.stats().done == 3


async def test_a_slot_obeys_keys(make_lane: MakeLane) -> None:
    lane = make_lane(max_concurrent=4)
    probe = Probe()
    lane.submit(probe.job("a0"), key="a")
    entered = asyncio.Event()

    async def holder() -> None:
        async with lane.slot(key="a"):
            entered.set()

    task = asyncio.create_task(holder())
    await settle()
    assert not entered.is_set()
    probe.release("a0")
    await task
    assert entered.is_set()


async def test_cancelling_a_waiting_slot_withdraws_it(make_lane: MakeLane) -> None:
    lane = make_lane(max_concurrent=1)
    probe = Probe()
    lane.submit(probe.job("j0"))

    async def holder() -> None:
        async with lane.slot():
            pytest.fail("a withdrawn slot must never be entered")

    task = asyncio.create_task(holder())
    lane.submit(probe.job("j1", gated=False))
    await settle()
    assert lane.queued == 2
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert lane.queued == 1
    probe.release("j0")
    await lane.join()
    assert probe.started == ["j0", "j1"]


async def test_a_slot_cancelled_as_it_is_granted_frees_the_place(
    make_lane: MakeLane,
) -> None:
    lane = make_lane(max_concurrent=0)

    async def holder() -> None:
        async with lane.slot():
            pytest.fail("the caller was cancelled before it could enter")

    task = asyncio.create_task(holder())
    await settle()
    probe = Probe()
    after = lane.submit(probe.job("next", gated=False))
    lane.max_concurrent = 1  # grants the slot at once, before the caller runs again
    assert lane.active == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await after == "next"
    assert lane.stats().cancelled == 1


async def test_an_error_in_a_slot_body_propagates_and_frees_the_place(
    make_lane: MakeLane,
) -> None:
    lane = make_lane(max_concurrent=1)
    with pytest.raises(ZeroDivisionError):
        async with lane.slot():
            _ = 1 / 0
    assert lane.active == 0
    probe = Probe()
    assert await lane.submit(probe.job("j0", gated=False)) == "j0"
    assert lane.stats().failed == 1


async def test_session_then_main_composition(make_lane: MakeLane) -> None:
    """The gateway's shape: a keyed per-session lane, each turn holding a main slot."""
    sessions = make_lane("session", 8)
    main = make_lane("main", 1)
    log: list[tuple[str, int]] = []
    in_main = 0

    def turn(session: str, n: int) -> Callable[[], Awaitable[str]]:
        async def run() -> str:
            nonlocal in_main
            async with main.slot():
                in_main += 1
                assert in_main == 1
                log.append((session, n))
                await settle(2)
                in_main -= 1
            return f"{session}-{n}"

        return run

    handles = [sessions.submit(turn(s, n), key=s) for n in range(3) for s in ("s1", "s2")]
    results = [await h for h in handles]
    assert results == [f"{s}-{n}" for n in range(3) for s in ("s1", "s2")]
    for s in ("s1", "s2"):
        assert [n for who, n in log if who == s] == [0, 1, 2]


# -- shutdown ---------------------------------------------------------------------------


async def test_shutdown_refuses_new_work(make_lane: MakeLane) -> None:
    lane = make_lane()
    await lane.shutdown(0)
    probe = Probe()
    with pytest.raises(LaneClosed) as caught:
        lane.submit(probe.job("late"))
    assert caught.value.lane == lane.name
    with pytest.raises(LaneClosed):
        async with lane.slot():
            pass
    assert lane.closed
    assert repr(lane) == "<Lane test closed active=0 queued=0>"


async def test_shutdown_cancels_queued_jobs_and_drains_running(make_lane: MakeLane) -> None:
    lane = make_lane(max_concurrent=1)
    probe = Probe()
    running = lane.submit(probe.job("j0"))
    queued = [lane.submit(probe.job(f"q{i}"), key="k") for i in range(3)]
    await settle()
    shutdown = asyncio.create_task(lane.shutdown(drain_seconds=60))
    await settle()
    assert [h.state for h in queued] == ["cancelled"] * 3
    assert lane.queued == 0
    assert not shutdown.done()  # still draining j0
    probe.release("j0")
    await shutdown
    assert await running == "j0"
    assert probe.started == ["j0"]
    for handle in queued:
        with pytest.raises(JobCancelled):
            await handle


async def test_shutdown_cancels_running_jobs_after_the_drain(make_lane: MakeLane) -> None:
    lane = make_lane(max_concurrent=2)
    saw_cancel: list[str] = []

    async def stuck() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            saw_cancel.append("stuck")
            raise

    async def failing_on_cancel() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise ValueError("cleanup failed") from None

    first = lane.submit(stuck)
    second = lane.submit(failing_on_cancel)
    await settle()
    await lane.shutdown(drain_seconds=0)
    assert saw_cancel == ["stuck"]
    assert first.state is JobState.CANCELLED
    assert second.state is JobState.FAILED
    assert lane.active == 0


async def test_shutdown_can_leave_queued_jobs_unstarted(make_lane: MakeLane) -> None:
    lane = make_lane(max_concurrent=1)
    probe = Probe()
    lane.submit(probe.job("j0", gated=False))
    kept = [lane.submit(probe.job(f"q{i}")) for i in range(2)]
    await lane.shutdown(drain_seconds=60, cancel_queued=False)
    await settle()
    assert probe.started == ["j0"]
    assert [h.state for h in kept] == ["queued", "queued"]
    assert lane.queued == 2
    with pytest.raises(LaneClosed):
        await kept[0]
    await lane.join()  # nothing will start: join does not hang


async def test_shutdown_wakes_slots_waiting_in_the_queue(make_lane: MakeLane) -> None:
    for cancel_queued, expected in ((True, JobCancelled), (False, LaneClosed)):
        lane = make_lane(max_concurrent=0)

        async def holder(lane: Lane = lane) -> None:
            async with lane.slot():
                pytest.fail("a slot must not be entered after shutdown")

        task = asyncio.create_task(holder())
        await settle()
        await lane.shutdown(0, cancel_queued=cancel_queued)
        with pytest.raises(expected):
            await task


async def test_shutdown_cancels_a_held_slot_after_the_drain(make_lane: MakeLane) -> None:
    lane = make_lane(max_concurrent=1)
    entered = asyncio.Event()

    async def holder() -> None:
        async with lane.slot():
            entered.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(holder())
    await entered.wait()
    await lane.shutdown(drain_seconds=0)
    assert task.cancelled()
    assert (lane.active, lane.stats().cancelled) == (0, 1)


async def test_shutdown_is_idempotent(make_lane: MakeLane) -> None:
    lane = make_lane(max_concurrent=1)
    probe = Probe()
    handle = lane.submit(probe.job("j0"))
    await settle()
    calls = [asyncio.create_task(lane.shutdown(60)) for _ in range(3)]
    await settle()
    assert not any(c.done() for c in calls)
    probe.release("j0")
    await asyncio.gather(*calls)
    await lane.shutdown(0)  # again, after completion: returns, changes nothing
    assert await handle == "j0"
    assert lane.stats().cancelled == 0
