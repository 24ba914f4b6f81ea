"""Property tests: random programs of submits, cancels, width changes and loop turns.

The four promises checked on every example:
1. never more than ``max_concurrent`` jobs running (checked at every start);
2. FIFO start order: when a job starts, every earlier job still queued is blocked by a
   running job of its own key (and jobs of one key never run at once);
3. every job ends exactly once: done, failed or cancelled, matching what happened to it;
4. a job cancelled while queued never starts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from lanes import JobCancelled, JobHandle, JobState, Lane

KEYS = [None, "a", "b", "c"]


class BoomError(Exception):
    """The failure a job was told to raise."""


@dataclass(frozen=True)
class Submit:
    key: str | None
    turns: int  # loop turns the job takes
    fails: bool


@dataclass(frozen=True)
class Turns:
    count: int


@dataclass(frozen=True)
class Cancel:
    pick: int  # which submitted job, modulo how many there are


@dataclass(frozen=True)
class Width:
    value: int


Op = Submit | Turns | Cancel | Width

ops = st.one_of(
    st.builds(Submit, st.sampled_from(KEYS), st.integers(0, 4), st.booleans()),
    st.builds(Turns, st.integers(1, 4)),
    st.builds(Cancel, st.integers(0, 1000)),
    st.builds(Width, st.integers(0, 4)),
)


@dataclass
class Run:
    """What happened to the jobs of one program."""

    lane: Lane
    specs: list[Submit] = field(default_factory=list)
    handles: list[JobHandle[int]] = field(default_factory=list)
    factory_calls: list[int] = field(default_factory=list)
    body_ends: list[int] = field(default_factory=list)
    # Index -> (state when cancel() was called, what cancel() returned), first call only.
    cancels: dict[int, tuple[JobState, bool]] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)

    def check_start(self, index: int) -> None:
        """Called as job ``index`` starts (its factory runs inside the lane's start)."""
        lane = self.lane
        # Its own handle may not be returned by submit() yet, so it is counted apart.
        others = [h for i, h in enumerate(self.handles) if i != index]
        running = [h for h in others if h.state is JobState.RUNNING]
        running_keys = [h.key for h in running] + [self.specs[index].key]
        count = len(running) + 1
        if count != lane.active or count > lane.max_concurrent:
            self.violations.append(
                f"job {index} started with {count} running, active={lane.active}, "
                f"width={lane.max_concurrent}"
            )
        keyed = [k for k in running_keys if k is not None]
        if len(keyed) != len(set(keyed)):
            self.violations.append(f"job {index} started beside a job of its key")
        for earlier, handle in enumerate(self.handles[:index]):
            if handle.state is JobState.QUEUED and (
                handle.key is None or handle.key not in running_keys[:-1]
            ):
                self.violations.append(f"job {index} started before free job {earlier}")

    def factory(self, index: int) -> Callable[[], Awaitable[int]]:
        spec = self.specs[index]

        def make() -> Awaitable[int]:
            self.factory_calls[index] += 1
            self.check_start(index)
            return self.body(index, spec)

        return make

    async def body(self, index: int, spec: Submit) -> int:
        try:
            for _ in range(spec.turns):
                await asyncio.sleep(0)
            if spec.fails:
                raise BoomError(index)
            return index
        finally:
            self.body_ends[index] += 1


async def check_awaits(run: Run) -> None:
    for index, handle in enumerate(run.handles):
        try:
            result = await handle
        except BoomError:
            assert handle.state is JobState.FAILED
        except JobCancelled:
            assert handle.state is JobState.CANCELLED
        else:
            assert handle.state is JobState.DONE
            assert result == index


async def play(width: int, program: list[Op]) -> Run:
    run = Run(Lane("prop", width))
    for op in program:
        if isinstance(op, Submit):
            index = len(run.specs)
            run.specs.append(op)
            run.factory_calls.append(0)
            run.body_ends.append(0)
            run.handles.append(run.lane.submit(run.factory(index), key=op.key))
        elif isinstance(op, Turns):
            for _ in range(op.count):
                await asyncio.sleep(0)
        elif isinstance(op, Cancel) and run.handles:
            index = op.pick % len(run.handles)
            handle = run.handles[index]
            state = handle.state
            cancelled = handle.cancel()
            run.cancels.setdefault(index, (state, cancelled))
        elif isinstance(op, Width):
            run.lane.max_concurrent = op.value
    if run.lane.max_concurrent == 0:
        run.lane.max_concurrent = 1  # let everything finish
    # Counted loop turns, not a clock: even one job at a time, each job needs its own
    # turns plus a few for its task and callbacks. A job still unfinished after that is
    # stuck in the queue, which breaks promise 3.
    for _ in range(sum(spec.turns + 5 for spec in run.specs) + 10):
        if all(h.done() for h in run.handles):
            break
        await asyncio.sleep(0)
    stuck = [i for i, h in enumerate(run.handles) if not h.done()]
    if stuck:
        run.violations.append(f"jobs {stuck} never ended")
        return run
    await run.lane.join()
    await check_awaits(run)
    return run


def expected_state(run: Run, index: int) -> JobState:
    state, cancelled = run.cancels.get(index, (JobState.DONE, False))
    if state is JobState.QUEUED or (state is JobState.RUNNING and cancelled):
        return JobState.CANCELLED
    return JobState.FAILED if run.specs[index].fails else JobState.DONE


@settings(max_examples=300, deadline=None)
@given(width=st.integers(0, 4), program=st.lists(ops, max_size=40))
def test_lane_keeps_its_promises(width: int, program: list[Op]) -> None:
    run = asyncio.run(play(width, program))
    assert run.violations == []  # promises 1 and 2
    for index, handle in enumerate(run.handles):
        # Promise 3: one end, the one that matches what was done to the job.
        assert handle.done()
        assert handle.state is expected_state(run, index), index
        assert run.body_ends[index] <= 1
        # Promise 4: cancelled while queued means the factory never ran.
        if run.cancels.get(index, (None, False))[0] is JobState.QUEUED:
            assert run.factory_calls[index] == 0
        else:
            assert run.factory_calls[index] == 1
    stats = run.lane.stats()
    states = [h.state for h in run.handles]
    assert stats.submitted == len(run.handles)
    assert stats.done == states.count(JobState.DONE)
    assert stats.failed == states.count(JobState.FAILED)
    assert stats.cancelled == states.count(JobState.CANCELLED)
    assert (stats.active, stats.queued) == (0, 0)
