"""The cluster's ``subagent`` lane: runs are jobs of procrastinate's queue ``subagent``.

Every replica runs one procrastinate worker on the queue, as wide as
``agent.subagents.maxConcurrent``; a job it takes is executed on the replica's own
``subagent`` lane through the run manager (:class:`RunHost`), so retries, abort and a clean
stop work as in one process. A job's ``lock`` is its run id (a run never executes on two
replicas at once) and so is its ``queueing_lock`` (a run never has two waiting jobs: a
second defer is a no-op). Everything that executes a run goes through a job — its start,
its resumption, the announce of a stopped run (a job of the queue ``subagent-urgent``,
whose own worker makes it at once, outside the lane: never behind the runs).

- **Abort from any replica.** :meth:`withdraw` cancels a waiting job (it never starts) or
  asks procrastinate to abort a running one. Procrastinate 3 aborts an async job by
  cancelling its asyncio task; the job body catches that cancellation, sees the reason is
  a request (not a shutdown), and stops the run as a local abort would: it ends
  ``cancelled`` and is announced once, by the replica that executed it.
- **A replica that dies** stops heartbeating; every replica checks for the jobs of workers
  silent for ``stalled_seconds`` and puts them back (``retry_job``); the run resumes from its
  transcript on whichever replica takes the job (:class:`QueueTiming`).
- **A clean stop** stops taking jobs; runs that do not finish within the drain are cut off
  (they stay ``running``) and their jobs handed back at once (a :class:`HandBackError` retry),
  so another replica resumes them. Heartbeats go on until the worker is gone, or the
  others would take runs still draining here. The stop never rests on one cancellation:
  on Python 3.11 psycopg_pool's wait for a connection (``asyncio.wait_for``) loses a
  cancellation that lands as a connection is handed over, and a task that lost it would
  run on. So the worker is also told to stop (procrastinate's ``stop``, an event), and the
  checks are cancelled again until they end.
- **A run with no job** (a crash between recording a run and deferring its job, a retry
  whose replica died before it came): a sweep at start and every ``sweep_seconds`` defers
  one for each unfinished run without a waiting or running job (a run yielded to a waiting
  batch needs none). Only a run found jobless by two sweeps in a row is deferred, so a
  defer or an abort in flight is never raced; a double defer would be harmless anyway. A
  sweep rather than one transaction for the run and its job: the run is written by the
  state layer's own connection and retried whole on conflicts, the job by procrastinate's
  pool, and the sweep also covers every other way a run can lose its job.

The worker's width is fixed while it runs (procrastinate sizes its semaphore at start): a
reloaded ``maxConcurrent`` applies to the lane at once (at most that many runs execute
here) and to how many jobs this replica takes at the next start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from typing import Any, Final, LiteralString, Protocol

from procrastinate import App, PsycopgConnector, RetryDecision
from procrastinate import exceptions as pq_errors
from procrastinate.job_context import AbortReason, JobContext
from procrastinate.jobs import Job, Status
from procrastinate.retry import BaseRetryStrategy
from procrastinate.utils import utcnow
from procrastinate.worker import Worker
from psycopg_pool import AsyncConnectionPool

from gateway.cluster.connection import check_idle
from gateway.cluster.defers import Defers
from gateway.cluster.jobends import DurableJobManager
from gateway.cluster.timing import QueueTiming
from gateway.constants import SUBAGENT_LANE
from gateway.state import RunRecord
from lanes import JobCancelled, JobHandle, LaneClosed

logger = logging.getLogger(__name__)

QUEUE: Final = SUBAGENT_LANE
#: The announces of stopped runs: a queue of their own with a worker of its own, so a stop
#: never waits for a slot of the runs' worker (the runs below a timed-out orchestrator may
#: hold every one of them, and they end only once that announce stops them).
URGENT_QUEUE: Final = f"{SUBAGENT_LANE}-urgent"
#: How many such announces a replica makes at once.
URGENT_WIDTH: Final = 4
TASK_NAME: Final = "herald.subagent_run"
#: The announce of a stopped run goes ahead of every queued run.
URGENT_PRIORITY: Final = 10
#: A check or heartbeat task still running this long after its cancellation lost it: it is
#: cancelled again.
RECANCEL_SECONDS: Final = 0.5
#: Connections of the queue's pool: defers, fetches, finishes, heartbeats (LISTEN has its own).
POOL_MAX: Final = 4
#: PostgreSQL truncates application_name to 63 bytes.
APPLICATION_NAME_MAX: Final = 63

#: Unfinished runs with neither a waiting nor a running job, and not yielded to a waiting
#: batch (such a run is queued again when its batch ends).
_JOBLESS_RUNS: Final[LiteralString] = """
SELECT r.run_id
  FROM runs r
 WHERE r.status IN ('queued', 'running', 'announcing')
   AND NOT EXISTS (SELECT 1 FROM procrastinate_jobs j
                    WHERE j.lock = r.run_id AND j.status IN ('todo', 'doing'))
   AND NOT EXISTS (SELECT 1 FROM batches b WHERE b.run_id = r.run_id AND b.state = 'waiting')
"""

_LIVE_JOBS: Final[LiteralString] = """
SELECT id FROM procrastinate_jobs
 WHERE lock = %(run_id)s AND queue_name IN (%(queue)s, %(urgent)s)
   AND status IN ('todo', 'doing')
"""


def _pool(**options: Any) -> AsyncConnectionPool:
    """Procrastinate's pool, checking a connection on its way out by its socket rather than
    by a round trip (:func:`gateway.cluster.connection.check_idle`): procrastinate asks for
    psycopg_pool's own check, which costs a round trip per query, four or so per run."""
    return AsyncConnectionPool(**{**options, "check": check_idle})


class RunHost(Protocol):
    """The run manager, as this queue calls it (structurally
    :class:`gateway.subagents.queueing.RunHost`)."""

    def run_here(self, run_id: str, attempt: int) -> JobHandle[None]: ...

    def announce_here(self, run_id: str) -> None: ...

    async def announce_now(self, run_id: str) -> None: ...

    async def stop_requested(self, run_id: str) -> None: ...

    async def taken_over(self, run_id: str) -> None: ...


class HandBackError(Exception):
    """This replica stops: the run's job goes back to the queue for another to take."""


class _HandBackOnly(BaseRetryStrategy):
    """Retry a job only when it is handed back; a run's own failures are the run
    manager's to retry, and a job that failed otherwise leaves its run to the sweep."""

    def get_retry_decision(self, *, exception: BaseException, job: Job) -> RetryDecision | None:
        if isinstance(exception, HandBackError | asyncio.CancelledError):
            return RetryDecision(retry_in={"seconds": 0})
        return None


class ProcrastinateQueue:
    """The :class:`gateway.subagents.queueing.RunQueue` of a cluster; see the module
    docstring. :meth:`open` it, :meth:`start` it once the channels are up, :meth:`close`
    it to stop taking runs, :meth:`aclose` it to release its connections."""

    shared = True

    def __init__(
        self, url: str, *, width: int, replica_id: str, timing: QueueTiming | None = None
    ) -> None:
        self._width = width
        self._replica_id = replica_id
        self._timing = timing or QueueTiming()
        name = f"herald:{replica_id}"[:APPLICATION_NAME_MAX]
        self._connector = PsycopgConnector(
            conninfo=url,
            min_size=1,
            max_size=POOL_MAX,
            kwargs={"application_name": name},
            pool_factory=_pool,
        )
        self._app = App(connector=self._connector)
        #: Set as the queue closes: a job's end lost with its connection is no longer
        #: written again (:mod:`gateway.cluster.jobends`).
        self._stopping = asyncio.Event()
        # Before any task is made: each task keeps the job manager it was made with.
        self._app.job_manager = DurableJobManager(self._connector, self._stopping)
        self._task = self._app.task(
            name=TASK_NAME, queue=QUEUE, pass_context=True, retry=_HandBackOnly()
        )(self._job)
        self._host: RunHost | None = None
        #: The worker of each queue (while it runs).
        self._workers: dict[str, Worker] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._defers: set[asyncio.Task[bool]] = set()
        #: The defer in flight of each run, which an abort waits for before it looks.
        self._deferring: dict[str, asyncio.Task[bool]] = {}
        #: One defer at a time per queue, in the order submitted (job ids, and so the order
        #: runs start in, follow the spawns); those submitted meanwhile go in one statement.
        self._defers_in_order = Defers(self._app.job_manager)
        #: Runs found without a job by the last sweep (deferred if the next finds them too).
        self._suspects: set[str] = set()
        self._executing: dict[str, int] = {}
        self._opened = self._started = self._closing = False

    def __repr__(self) -> str:
        return (
            f"<ProcrastinateQueue {QUEUE} replica={self._replica_id} width={self._width} "
            f"executing={len(self._executing)} closing={self._closing}>"
        )

    @property
    def executing(self) -> int:
        """Jobs this replica's worker holds now."""
        return len(self._executing)

    async def open(self) -> None:
        """Open the pool (defers work from here on; jobs are taken after :meth:`start`)."""
        if not self._opened:
            await self._app.open_async()
            self._opened = True

    def bind(self, host: RunHost) -> None:
        self._host = host

    async def start(self) -> None:
        """Start the worker, the stalled-job check, the sweep and the heartbeat keeper."""
        if self._started or self._closing:
            return
        self._started = True
        for coro, name in (
            (self._work(QUEUE, self._width), "worker"),
            (self._work(URGENT_QUEUE, URGENT_WIDTH), "urgent worker"),
            (self._every(self._timing.stalled_check_seconds, self.retry_stalled), "stalled"),
            (self._every(self._timing.sweep_seconds, self.sweep), "sweep"),
            (self._keep_heartbeat(), "heartbeat"),
        ):
            self._tasks.add(asyncio.create_task(coro, name=f"subagent queue {name}"))
        logger.info(
            "sub-agent queue started",
            extra={"queue": QUEUE, "width": self._width, "replica": self._replica_id},
        )

    # -- queueing ---------------------------------------------------------------------------

    def submit(self, run_id: str, *, attempt: int = 1, urgent: bool = False) -> None:
        """Defer a job for ``run_id`` (in the background; the sweep catches a lost one)."""
        task = asyncio.ensure_future(self.defer(run_id, attempt=attempt, urgent=urgent))
        self._defers.add(task)
        self._deferring[run_id] = task
        task.add_done_callback(self._defers.discard)
        task.add_done_callback(lambda done: self._forget_defer(run_id, done))

    def _forget_defer(self, run_id: str, task: asyncio.Task[bool]) -> None:
        if self._deferring.get(run_id) is task:
            del self._deferring[run_id]

    async def defer(self, run_id: str, *, attempt: int = 1, urgent: bool = False) -> bool:
        """Defer a job for ``run_id`` now; False when one waits already or the database
        refused (logged; the sweep defers it later)."""
        job = self._task.configure(
            queue=URGENT_QUEUE if urgent else QUEUE,
            lock=run_id,
            queueing_lock=run_id,
            priority=URGENT_PRIORITY if urgent else 0,
        ).make_new_job(run_id=run_id, attempt=attempt, urgent=urgent)
        try:
            if not await self._defers_in_order.defer(job):
                return False  # a job of this run waits already: it does the work
        except Exception as exc:
            logger.warning(
                "sub-agent run not queued yet; the sweep queues it",
                extra={"run_id": run_id, "error": type(exc).__name__},
            )
            return False
        return True

    async def withdraw(self, run_id: str) -> bool:
        """Cancel the run's waiting job, or ask the replica running it to abort it; True
        when a replica runs it (it ends ``cancelled`` there)."""
        deferring = self._deferring.get(run_id)
        if deferring is not None:
            # A run spawned a moment ago: its job must exist before it can be found (else
            # the job would run later, and keep the stop's announce waiting behind it).
            with contextlib.suppress(Exception):
                await asyncio.shield(deferring)
        manager = self._app.job_manager
        rows = await self._connector.execute_query_all_async(
            query=_LIVE_JOBS, run_id=run_id, queue=QUEUE, urgent=URGENT_QUEUE
        )
        running_elsewhere = False
        for row in rows:
            job_id = int(row["id"])
            if not await manager.cancel_job_by_id_async(job_id, abort=True):
                continue  # it ended meanwhile
            try:
                status = await manager.get_job_status_async(job_id)
            except pq_errors.NoResult:
                # Gone: a running job stopped by the abort and ended (a waiting one that is
                # cancelled keeps its row), so it was running, and ended cancelled there.
                status = Status.DOING
            if status is Status.DOING:
                running_elsewhere = True  # a waiting job is cancelled; a running one aborted
        return running_elsewhere

    async def recover(self, runs: list[RunRecord]) -> None:
        """Start-up: every unfinished run belongs to its job — running on a live replica,
        waiting, or taken over by the stalled-job check when its replica died; the sweep
        gives one to those that have none (its first pass runs as :meth:`start` begins)."""
        logger.info("unfinished sub-agent runs left to their jobs", extra={"runs": len(runs)})

    # -- the periodic checks ----------------------------------------------------------------

    async def retry_stalled(self) -> int:
        """Put back the jobs of workers silent for ``stalled_seconds`` (dead replicas);
        returns how many this replica put back (another may have been first)."""
        manager = self._app.job_manager
        own = {worker.worker_id for worker in self._workers.values()}
        stalled = [
            job
            for queue in (QUEUE, URGENT_QUEUE)
            for job in await manager.get_stalled_jobs(
                queue=queue, seconds_since_heartbeat=self._timing.stalled_seconds
            )
        ]
        retried = 0
        for job in stalled:
            if job.worker_id is not None and job.worker_id in own:
                continue  # this replica lives: its heartbeat only lagged
            try:  # written once (not the worker's durable retry_job): a check runs again
                await manager.retry_job_by_id_async(job.id or 0, retry_at=utcnow())
            except pq_errors.ConnectorException:
                continue  # another replica put it back first
            retried += 1
            logger.info(
                "sub-agent run taken over from a silent replica",
                extra={"run_id": job.task_kwargs.get("run_id"), "job": job.id},
            )
        return retried

    async def sweep(self) -> int:
        """Defer a job for each unfinished run found without one by this sweep and the
        last; returns how many were deferred."""
        rows = await self._connector.execute_query_all_async(query=_JOBLESS_RUNS)
        jobless = {str(row["run_id"]) for row in rows}
        confirmed, self._suspects = jobless & self._suspects, jobless - self._suspects
        deferred = 0
        for run_id in sorted(confirmed):
            if await self.defer(run_id):
                deferred += 1
        if deferred:
            logger.info("sub-agent runs without a job queued", extra={"count": deferred})
        return deferred

    async def _every(self, seconds: float, check: Any) -> None:
        while not self._closing:  # a cancellation the check lost ends the loop here
            try:
                await check()
            except Exception:
                logger.warning("sub-agent queue check failed", exc_info=True)
            if not self._closing:
                await asyncio.sleep(seconds)

    async def _keep_heartbeat(self) -> None:
        """Procrastinate stops a worker's heartbeat before it waits for its jobs at a stop;
        this keeps it going until the worker is gone, so draining runs stay this replica's."""
        while True:
            await asyncio.sleep(self._timing.heartbeat_seconds)
            for worker in list(self._workers.values()):
                if worker.worker_id is not None:
                    with contextlib.suppress(Exception):
                        await self._app.job_manager.update_heartbeat(worker.worker_id)

    # -- the worker -------------------------------------------------------------------------

    async def _work(self, queue: str, width: int) -> None:
        """Run the worker of ``queue``; start a new one if it stops on its own (a lost
        connection)."""
        delay = self._timing.poll_seconds
        while not self._closing:
            worker = self._workers[queue] = Worker(
                app=self._app,
                queues=[queue],
                name=f"herald-{self._replica_id}" + ("" if queue == QUEUE else "-urgent"),
                concurrency=width,
                fetch_job_polling_interval=self._timing.poll_seconds,
                abort_job_polling_interval=self._timing.poll_seconds,
                shutdown_graceful_timeout=None,  # the lane's drain decides, then hands back
                listen_notify=True,
                delete_jobs="successful",
                install_signal_handlers=False,
                update_heartbeat_interval=self._timing.heartbeat_seconds,
                stalled_worker_timeout=self._timing.stalled_seconds,
            )
            try:
                await worker.run()  # type: ignore[no-untyped-call]
            except Exception:
                logger.warning("sub-agent queue worker stopped; starting again", exc_info=True)
            if not self._closing:
                await asyncio.sleep(delay)

    async def _job(
        self, context: JobContext, run_id: str, attempt: int = 1, urgent: bool = False
    ) -> None:
        """One job: execute the run on this replica's lane and wait for it (see the module
        docstring for an abort and a stop); ``urgent``: a stopped run's announce, made at
        once outside the lane (it never waits behind the runs the lane holds)."""
        if self._host is None or self._closing:
            raise HandBackError(run_id)
        if urgent:
            await self._host.announce_now(run_id)
            return
        if context.job.attempts > 0:  # handed back, or taken from a dead replica
            await self._host.taken_over(run_id)
        try:
            handle = self._host.run_here(run_id, attempt)
        except LaneClosed:
            raise HandBackError(run_id) from None
        self._executing[run_id] = context.job.id or 0
        try:
            await self._await_run(context, run_id, handle)
        finally:
            self._executing.pop(run_id, None)

    async def _await_run(self, context: JobContext, run_id: str, handle: JobHandle[None]) -> None:
        while True:
            try:
                await handle
                return
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if context.abort_reason() is not AbortReason.USER_REQUEST or task is None:
                    # Never hand a job back while its run still executes here.
                    handle.cancel()
                    with contextlib.suppress(BaseException):
                        await handle
                    raise
                task.uncancel()  # an abort asked from some replica: stop the run, then wait
                if self._host is not None:
                    await self._host.stop_requested(run_id)
            except (JobCancelled, LaneClosed):
                if self._closing:
                    raise HandBackError(run_id) from None  # cut off by the drain: resumed elsewhere
                return  # withdrawn here while it waited for a slot: the abort announces it

    # -- stopping ---------------------------------------------------------------------------

    async def close(self, drain_seconds: float) -> None:
        """Stop taking jobs and the checks; wait for the worker, whose running jobs end
        with the lane's drain (handed back when cut off). Idempotent."""
        if self._closing:
            return
        self._closing = True
        self._stopping.set()
        # A stopped (or cancelled) worker stops gracefully: it takes no more jobs and waits
        # for its own. Told to stop as well as cancelled: the cancellation may be lost.
        for each in list(self._workers.values()):
            each.stop()  # type: ignore[no-untyped-call]
        worker = [t for t in self._tasks if t.get_name() in _WORKER_TASKS]
        for task in worker:
            task.cancel()
        checks = [t for t in self._tasks if t.get_name() in _CHECK_TASKS]
        await asyncio.gather(*worker, _end(checks), return_exceptions=True)
        await asyncio.gather(*self._defers, return_exceptions=True)
        await _end(self._tasks)
        self._tasks.clear()

    async def aclose(self) -> None:
        """Release the pool (after :meth:`close`)."""
        await self.close(0)
        if self._opened:
            self._opened = False
            await self._app.close_async()


_CHECK_TASKS: Final = frozenset({"subagent queue stalled", "subagent queue sweep"})
_WORKER_TASKS: Final = frozenset({"subagent queue worker", "subagent queue urgent worker"})


async def _end(tasks: Iterable[asyncio.Task[Any]]) -> None:
    """Cancel ``tasks`` and wait for them, cancelling again those that lost the
    cancellation (module docstring)."""
    pending = {t for t in tasks if not t.done()}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=RECANCEL_SECONDS)
