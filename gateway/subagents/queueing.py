"""Where :class:`~gateway.subagents.manager.RunManager` sends a run to be executed.

One seam, two implementations: :class:`LaneQueue` (one process: the run goes straight onto
this gateway's ``subagent`` lane) and, with ``cluster.databaseUrl``, the procrastinate queue
of :mod:`gateway.cluster.queue` (the run becomes a job of the queue ``subagent`` that some
replica's worker takes and executes on its own lane). Either way a run is executed through
the manager's :class:`RunHost`, so retries, abort and a clean stop behave the same.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from gateway.state import RunRecord, StateDB
from lanes import JobHandle


class RunHost(Protocol):
    """What a queue calls back: the manager, executing runs on this gateway."""

    def run_here(self, run_id: str, attempt: int) -> JobHandle[None]:
        """Execute ``run_id`` on this gateway's lane (``attempt`` > 1: a retry after its
        bookkeeping failed); the lane job's handle."""
        ...

    def announce_here(self, run_id: str) -> None:
        """Run the announce step of a stopped run now, outside the lane (a stop never
        waits behind queued runs)."""
        ...

    async def announce_now(self, run_id: str) -> None:
        """:meth:`announce_here`, waited for (a queue's job that must end with it)."""
        ...

    async def stop_requested(self, run_id: str) -> None:
        """Another replica asked to abort ``run_id``, which this gateway executes."""
        ...

    async def taken_over(self, run_id: str) -> None:
        """``run_id`` comes from a replica that stopped or died: treat it as after a
        restart (``onRestart``) before executing it."""
        ...


class RunQueue(Protocol):
    """Queues runs for execution; see the module docstring."""

    #: True when other processes execute runs from the same queue (a cluster): then an
    #: unfinished run found at start may be live elsewhere, and is not this process's.
    shared: bool

    def bind(self, host: RunHost) -> None:
        """Execute runs through ``host`` (the manager binds itself as it is made)."""
        ...

    async def start(self) -> None:
        """Begin taking runs (once the channels are up, so announces find their chats)."""
        ...

    def submit(self, run_id: str, *, attempt: int = 1, urgent: bool = False) -> None:
        """Queue ``run_id``; ``urgent``: only its announce is left, run it before queued runs."""
        ...

    async def withdraw(self, run_id: str) -> bool:
        """Abort ``run_id`` where this gateway does not execute it: True when another
        replica executes it and was asked to stop it (it ends ``cancelled`` there); False
        when it is executing nowhere (a queued job of it will never start)."""
        ...

    async def recover(self, runs: list[RunRecord]) -> None:
        """Start-up: see that every unfinished run (``runs``) gets executed."""
        ...

    async def close(self, drain_seconds: float) -> None:
        """Refuse new runs; running ones get ``drain_seconds``, then are parked (they stay
        ``running`` and resume later, here or on another replica)."""
        ...


class LaneQueue:
    """One process: runs go straight onto the ``subagent`` lane (durable anyway: the runs
    table is the queue, and recovery queues its unfinished runs again at start)."""

    shared = False

    def __init__(self, host: RunHost | None = None) -> None:
        self._host = host

    def __repr__(self) -> str:
        return "<LaneQueue>"

    def bind(self, host: RunHost) -> None:
        self._host = host

    async def start(self) -> None:
        return None  # the lane takes runs from the start

    def submit(self, run_id: str, *, attempt: int = 1, urgent: bool = False) -> None:
        """Raises ``LaneClosed`` once the lane shut down."""
        if self._host is None:
            raise RuntimeError("LaneQueue: no run manager bound yet")
        if urgent:
            self._host.announce_here(run_id)
        else:
            self._host.run_here(run_id, attempt)

    async def withdraw(self, run_id: str) -> bool:
        return False  # a run executes here or nowhere

    async def recover(self, runs: list[RunRecord]) -> None:
        for run in runs:
            self.submit(run.run_id)

    async def close(self, drain_seconds: float) -> None:
        return None  # the manager shuts the lane down


class YieldedRunQueue:
    """A yielded run's way on (:class:`gateway.subagents.batches.YieldedRuns`): queued again
    when its batch ended, or ended ``timeout`` when its own timeout passed while it waited
    (announced at once, outside the lane, whose slots its own children may hold)."""

    def __init__(
        self, db: StateDB, queue: RunQueue, *, clock: Callable[[], float] = time.time
    ) -> None:
        self._db = db
        self._queue = queue
        self._clock = clock

    def __repr__(self) -> str:
        return f"<YieldedRunQueue {self._queue!r}>"

    def submit(self, run_id: str) -> None:
        self._queue.submit(run_id)

    async def expire(self, run_id: str) -> None:
        if await self._db.runs.end_waiting(run_id, "timeout", self._clock()):
            self._queue.submit(run_id, urgent=True)
