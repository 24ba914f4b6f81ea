"""Job handles: what ``Lane.submit`` returns, to await, cancel or inspect one job."""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Awaitable, Callable, Generator, Hashable
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from lanes.errors import JobCancelled, JobNotFinishedError, LaneClosed

if TYPE_CHECKING:
    from lanes.lane import Lane

T = TypeVar("T")


class JobState(enum.StrEnum):
    """Where a job is in its life. It ends in exactly one of done, failed or cancelled."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


QUEUED = JobState.QUEUED
RUNNING = JobState.RUNNING


class JobHandle(Generic[T]):
    """One job on a lane: await it for its result, cancel it, read its state.

    ``await handle`` returns the job's result, raises the job's own exception when it
    failed, ``JobCancelled`` when it was cancelled, or ``LaneClosed`` when shutdown left it
    queued. Cancelling the task that awaits a handle does not cancel the job: awaiting only
    observes. Handles are made by the lane, never by callers.
    """

    # Slots keep a queued job small (the bench goal is ≤ 1 KiB per queued job); the
    # coroutine itself is only made when the job starts.
    __slots__ = (
        "_exc",
        "_factory",
        "_key",
        "_lane",
        "_result",
        "_seq",
        "_state",
        "_t_left",
        "_t_submit",
        "_task",
        "_waiter",
    )

    def __init__(
        self,
        lane: Lane,
        factory: Callable[[], Awaitable[T]] | None,
        key: Hashable | None,
        seq: int,
        now: float,
    ) -> None:
        self._lane = lane
        self._factory = factory  # None for a slot, and once the job has started
        self._key = key
        self._seq = seq
        self._t_submit = now
        self._t_left: float | None = None  # when it left the queue: started or cancelled
        self._state = QUEUED
        # The job's task, or for a slot the task that holds it: what cancel() cancels.
        self._task: asyncio.Future[Any] | None = None
        self._result: T | None = None
        self._exc: BaseException | None = None
        # Made only when someone waits; for a slot it is the gate its owner waits on.
        self._waiter: asyncio.Future[None] | None = None

    @property
    def lane(self) -> Lane:
        """The lane this job was submitted to."""
        return self._lane

    @property
    def key(self) -> Hashable | None:
        """The serialisation key given to ``submit``, or None."""
        return self._key

    @property
    def state(self) -> JobState:
        """The job's current state."""
        return self._state

    @property
    def wait_seconds(self) -> float:
        """Seconds the job spent queued: so far while queued, else until it left the queue.

        A job cancelled while queued counts until its cancellation.
        """
        end = self._t_left if self._t_left is not None else self._lane._clock()
        return end - self._t_submit

    def done(self) -> bool:
        """True once the job has ended (done, failed or cancelled)."""
        return self._state is not QUEUED and self._state is not RUNNING

    def cancel(self, msg: str | None = None) -> bool:
        """Cancel the job: a queued job never starts, a running job's task is cancelled
        (with ``msg``, which the job's ``CancelledError`` carries, as ``Task.cancel``'s).

        Returns True when a cancellation was made or requested, False when the job had
        already ended (or its task had finished). A running job that catches the
        cancellation and returns normally ends ``done``, as with any asyncio task.
        """
        if self._state is QUEUED:
            self._lane._cancel_queued(self)
            return True
        if self._state is RUNNING and self._task is not None:
            return self._task.cancel(msg)
        return False

    def result(self) -> T:
        """The job's result now; raises like ``await`` does, or ``JobNotFinishedError``."""
        state = self._state
        if state is JobState.DONE:
            return cast(T, self._result)
        if state is JobState.FAILED and self._exc is not None:
            raise self._exc
        if state is JobState.CANCELLED:
            raise JobCancelled(self._lane.name)
        if state is QUEUED and self._lane.closed:
            raise LaneClosed(self._lane.name)
        raise JobNotFinishedError(self._lane.name, state)

    def __await__(self) -> Generator[Any, None, T]:
        while not self.done() and not (self._state is QUEUED and self._lane.closed):
            waiter = self._waiter
            if waiter is None or waiter.done():
                waiter = self._waiter = asyncio.get_running_loop().create_future()
            # Shielded so that one awaiter being cancelled leaves the others waiting.
            yield from asyncio.shield(waiter).__await__()
        return self.result()

    def _on_task_done(self, task: asyncio.Future[Any]) -> None:
        self._lane._task_done(self, task)

    def __repr__(self) -> str:
        key = "" if self._key is None else f" key={self._key!r}"
        return f"<JobHandle lane={self._lane.name} state={self._state.value}{key}>"
