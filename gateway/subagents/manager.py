"""The live runs of this gateway: their lane jobs, abort, wait and a clean close.

:class:`RunManager` submits runs to the ``subagent`` lane and keeps each job's handle, so
an abort can tell a queued run (it never starts) from a running one (its task is cancelled
and it ends ``cancelled``). Abort is idempotent: the first call for a run stops it, every
later one — from the API, ``/stop`` or a cascade — is told the run is already stopping, and
nothing cancels the run's status update or announce after it was absorbed.
:meth:`RunManager.abort_tree` stops a run and every run spawned under it (its descendants
down the ``parent_run_id`` chain): the API's abort, ``/stop`` and ``subagents cancel``.
A run whose bookkeeping failed is retried with backoff, or at once through
:meth:`RunManager.resume_waiting` when the disk that refused it has room again.

Runs reach the lane through a :class:`~gateway.subagents.queueing.RunQueue`: straight
(:class:`~gateway.subagents.queueing.LaneQueue`, one process), or as jobs of a queue shared
by several replicas (``cluster.databaseUrl``), whose worker hands them to :meth:`run_here`.
An abort of a run this gateway does not execute goes to the queue (:meth:`RunQueue.withdraw`):
its queued job never starts, or the replica executing it stops it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from gateway.backoff import backoff
from gateway.state import DiskFullError, RunRecord, StateDB
from gateway.subagents.errors import RunFinishedError, RunNotFoundError
from gateway.subagents.feed import RunFeed
from gateway.subagents.queueing import LaneQueue, RunQueue
from gateway.subagents.runner import RunnerParts, RunRunner
from lanes import JobHandle, JobState, Lane

logger = logging.getLogger(__name__)

#: Backoff of a run whose bookkeeping failed (the database locked past its own retries).
RETRY_FIRST_SECONDS = 1.0
RETRY_MAX_SECONDS = 60.0
#: The handle map is pruned when it reaches this size (then at twice what remains).
PRUNE_AT = 64


@dataclass(frozen=True, slots=True)
class StoppedTree:
    """What :meth:`RunManager.abort_tree` stopped: the run, then the descendants it stopped
    (those already finished or stopping are left out)."""

    run: RunRecord
    descendants: tuple[str, ...] = ()

    @property
    def run_ids(self) -> tuple[str, ...]:
        return (self.run.run_id, *self.descendants)


class RunManager:
    """Keeps the runs' lane jobs; see the module docstring."""

    def __init__(
        self,
        *,
        db: StateDB,
        lane: Lane,
        runner: RunnerParts,
        feed: RunFeed,
        queue: RunQueue | None = None,
        on_restart: Callable[[], str] = lambda: "resume",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._db = db
        self._lane = lane
        self._queue: RunQueue = queue if queue is not None else LaneQueue(self)
        self._queue.bind(self)
        #: The manager makes its runner: it is how the runner stops a run's descendants and
        #: has a deferred announce run.
        self._runner = RunRunner(
            runner, control=self, defer_announces=not self._queue.shared, clock=clock
        )
        self._feed = feed
        self._clock = clock
        #: ``agent.subagents.onRestart`` in force (a run taken over from another replica).
        self._on_restart = on_restart
        self._handles: dict[str, JobHandle[None]] = {}
        self._prune_at = PRUNE_AT
        self._stopping: set[str] = set()
        #: Runs whose bookkeeping failed, waiting for their retry.
        self._retries: dict[str, asyncio.TimerHandle] = {}
        self._closing = False

    def __repr__(self) -> str:
        return f"<RunManager runs={len(self._handles)} closing={self._closing} {self._queue!r}>"

    @property
    def closing(self) -> bool:
        return self._closing

    @property
    def queue(self) -> RunQueue:
        return self._queue

    async def start(self) -> None:
        """Begin taking runs from the queue (once the channels are up)."""
        await self._queue.start()

    async def recover(self, runs: list[RunRecord]) -> None:
        """Start-up: the queue sees that every unfinished run in ``runs`` gets executed."""
        await self._queue.recover(runs)

    def submit(self, run_id: str) -> None:
        """Queue ``run_id`` (raises ``LaneClosed`` once closing began)."""
        self._queue.submit(run_id)

    def run_here(self, run_id: str, attempt: int = 1) -> JobHandle[None]:
        """Execute ``run_id`` on this gateway's lane (the queue's call); the job's handle."""
        if len(self._handles) >= self._prune_at:
            # Pruned here rather than by a watcher task per run; only when the map has doubled,
            # so spawning many runs stays linear.
            for done in [k for k, h in self._handles.items() if h.done()]:
                del self._handles[done]
                self._stopping.discard(done)
            self._prune_at = max(PRUNE_AT, 2 * len(self._handles))
        handle = self._lane.submit(lambda: self._guarded(run_id, attempt))
        self._handles[run_id] = handle
        return handle

    def announce_here(self, run_id: str) -> None:
        """Announce a stopped run now, outside the lane (a stop should not wait behind
        queued runs), yet with the same retry as a run whose bookkeeping failed."""
        self._feed.spawn(self._guarded(run_id))

    async def announce_now(self, run_id: str) -> None:
        """:meth:`announce_here`, waited for: the cluster queue's job for a stopped run."""
        await self._guarded(run_id)

    async def _guarded(self, run_id: str, attempt: int = 1) -> None:
        """Execute the run; when recording fails (a locked or full disk), try again later
        instead of leaving it stranded until a restart. Execution picks up from the
        recorded status, so a retry resumes rather than repeats."""
        recoveries = self._db.space.recoveries
        try:
            await self._runner.execute(run_id)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            delay = backoff(attempt, base=RETRY_FIRST_SECONDS, cap=RETRY_MAX_SECONDS)
            if isinstance(exc, DiskFullError) and self._db.space.recoveries != recoveries:
                # Space came back while this attempt ran: :meth:`resume_waiting` was called
                # before this run waited, so nothing else would cut its backoff short.
                delay = 0.0
            if isinstance(exc, DiskFullError):  # logged once, by the disk-full state
                logger.debug("sub-agent run waits for disk space", extra={"run_id": run_id})
            else:
                logger.exception(
                    "sub-agent run failed to record; retrying",
                    extra={"run_id": run_id, "in": delay},
                )
            if not self._closing:
                self._retries[run_id] = asyncio.get_running_loop().call_later(
                    delay, self._retry, run_id, attempt + 1
                )

    def _retry(self, run_id: str, attempt: int) -> None:
        self._retries.pop(run_id, None)
        if self._closing:
            return
        self._queue.submit(run_id, attempt=attempt)

    def resume_waiting(self) -> int:
        """Queue now every run waiting for its retry after its bookkeeping failed (space is
        back after the disk filled: no run should sit out its backoff); returns how many."""
        if self._closing:
            return 0
        waiting, self._retries = self._retries, {}
        for run_id, retry in waiting.items():
            retry.cancel()
            self._queue.submit(run_id)
        if waiting:
            logger.info(
                "sub-agent runs resumed after the disk filled", extra={"count": len(waiting)}
            )
        return len(waiting)

    async def side_tasks_done(self) -> None:
        """Return once no announce runs outside the lane (a stopped run's, or one that
        waited for its requester's turn): for a caller waiting for quiet (tests, benches)."""
        await self._feed.side_tasks_done()

    async def wait(self, run_id: str) -> RunRecord:
        """Wait until ``run_id`` has its final status (tests, ``herald spawn --wait``)."""
        return await self._feed.wait(run_id)

    async def abort(self, run_id: str) -> RunRecord:
        """Stop a run: a queued one never starts, a running one is cancelled; either is
        announced as ``cancelled``. Raises :class:`RunNotFoundError`, or
        :class:`RunFinishedError` when it has finished or is already stopping."""
        run = await self._db.runs.get(run_id)
        if run is None:
            raise RunNotFoundError(run_id)
        if run.progress.finished or run.progress.status == "announcing":
            raise RunFinishedError(run)
        # No await from this check to the add below: of concurrent aborts, one wins.
        if run_id in self._stopping:
            raise RunFinishedError(run, stopping=True)
        self._stopping.add(run_id)
        if self._runner.cancel(run_id):
            return run
        if self._runner.executing(run_id):  # past its child phase: it is ending on its own
            raise RunFinishedError(run, stopping=True)
        handle = self._handles.get(run_id)
        if handle is not None and handle.state in (JobState.QUEUED, JobState.RUNNING):
            handle.cancel()  # queued, or started but not yet begun: it never runs
        elif await self._queue.withdraw(run_id):
            return run  # another replica executes it: it ends cancelled there
        run = await self._db.runs.update(
            run_id, status="announcing", outcome="cancelled", ended_at=self._clock()
        )
        self._queue.submit(run_id, urgent=True)
        return run

    async def drop_queued(self, run_id: str, why: str) -> bool:
        """Stop a run that has not started, quietly: it never starts (or, caught as it
        starts, stops at once), ends ``cancelled`` with ``why`` as its error, and posts
        nothing — a deleted or paused job's occurrence, which its chat no longer wants.
        False when it has started or ended: it goes on."""
        if not await self._db.runs.withdraw_queued(run_id, why):
            return False
        with contextlib.suppress(RunNotFoundError, RunFinishedError):  # stopping already
            await self.abort(run_id)
        return True

    async def taken_over(self, run_id: str) -> None:
        """The run's job was handed back by a stopping replica or taken from a dead one:
        as after a restart, a ``running`` run resumes, or with ``onRestart: "fail"`` is
        announced ``interrupted`` (its job goes on to the announce)."""
        if self._on_restart() != "fail":
            return
        run = await self._db.runs.get(run_id)
        if run is not None and run.progress.status == "running":
            await self._db.runs.update(
                run_id, status="announcing", outcome="interrupted", ended_at=self._clock()
            )

    async def stop_requested(self, run_id: str) -> None:
        """Another replica asked to abort ``run_id``, which this gateway executes: stop it
        as :meth:`abort` would (a run already ending or stopping goes on). The request may
        be this gateway's own: an abort that looked while the job was being taken here
        asked the queue, so it is not yet stopping here."""
        self._stopping.discard(run_id)  # the abort below re-checks the run's state
        with contextlib.suppress(RunNotFoundError, RunFinishedError):
            await self.abort(run_id)

    async def abort_tree(self, run_id: str) -> StoppedTree:
        """Stop ``run_id`` as :meth:`abort` does (raising as it does, and then stopping
        nothing else), then every unfinished run spawned under it."""
        run = await self.abort(run_id)
        # Read after the run is stopped: it spawns nothing more, so none is missed.
        return StoppedTree(run, tuple(await self._abort_below(run_id)))

    async def stop_session(self, session_key: str) -> int:
        """``/stop``: :meth:`stop_all` of the session; returns how many runs it stopped."""
        return len(await self.stop_all(session_key))

    async def stop_all(self, session_key: str) -> list[str]:
        """Abort every unfinished run the session spawned and every unfinished run spawned
        under those (even under one that has ended); the ids of those this call stopped.
        The session's yielded batches are marked stopped first: this answer tells the chat,
        and their runs' end runs no follow-up turn."""
        await self._db.batches.mark_stopped(session_key, self._clock())
        stopped: list[str] = []
        for run in await self._db.runs.session_tree(session_key):
            if run.progress.status not in ("queued", "running"):
                continue
            with contextlib.suppress(RunNotFoundError, RunFinishedError):
                await self.abort(run.run_id)
                stopped.append(run.run_id)
        return stopped

    async def abort_descendants(self, run_id: str) -> int:
        """Stop every live run below ``run_id`` (its run ended ``timeout`` or
        ``cancelled``); returns how many this call stopped."""
        return len(await self._abort_below(run_id))

    async def _abort_below(self, run_id: str) -> list[str]:
        stopped: list[str] = []
        for run in await self._db.runs.live_descendants(run_id):
            with contextlib.suppress(RunNotFoundError, RunFinishedError):
                await self.abort(run.run_id)
                stopped.append(run.run_id)
        return stopped

    async def close(self, drain_seconds: float) -> None:
        """Refuse new runs; let running runs finish for ``drain_seconds``, then cancel them
        (they stay ``running`` and resume on the next start); queued ones stay queued."""
        self._closing = True
        for retry in self._retries.values():
            retry.cancel()
        self._retries.clear()
        # Together: the queue stops taking runs while the lane drains, and hands back
        # (cluster) the runs the drain cut off.
        await asyncio.gather(self._queue.close(drain_seconds), self._lane.shutdown(drain_seconds))
        await self._feed.close()
