"""Deferring the cluster's jobs: in the order submitted, those that wait together in one
statement.

A burst of spawns (a chat turn that spawns ten runs, sixty clients of the API at once) used
to defer one job per statement, each a pool checkout, a transaction and procrastinate's
defer function on the server: on one replica this was the largest single cost of a spawn
accepted on PostgreSQL. Now one defer per queue is in flight at a time (the order of job
ids follows the order of spawns, so runs start in spawn order); the jobs submitted
meanwhile wait, and the next statement defers all of them
(:meth:`procrastinate.manager.JobManager.batch_defer_jobs_async`, each job with its own
lock and queueing lock).

A statement with a job whose queueing lock is taken (a job of that run waits already)
inserts nothing; its jobs are then deferred one by one, so each learns its own outcome.
"""

from __future__ import annotations

import asyncio
from typing import Final

from procrastinate import exceptions as pq_errors
from procrastinate.jobs import Job
from procrastinate.manager import JobManager

#: Jobs per statement at most.
BATCH_MAX: Final = 100

_Waiting = list[tuple[Job, "asyncio.Future[bool]"]]


class Defers:
    """The defers of one replica's queues (see the module docstring)."""

    def __init__(self, manager: JobManager) -> None:
        self._manager = manager
        self._waiting: dict[str, _Waiting] = {}
        #: The drain of each queue with a defer in flight.
        self._drains: dict[str, asyncio.Task[None]] = {}

    def __repr__(self) -> str:
        waiting = sum(len(jobs) for jobs in self._waiting.values())
        return f"<Defers waiting={waiting} draining={sorted(self._drains)}>"

    async def defer(self, job: Job) -> bool:
        """Defer ``job``; False when a job with its queueing lock waits already. Raises the
        database's error (nothing of the job was kept)."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(job.queue, []).append((job, future))
        if job.queue not in self._drains:
            self._drains[job.queue] = asyncio.create_task(
                self._drain(job.queue), name=f"defer {job.queue}"
            )
        return await future

    async def _drain(self, queue: str) -> None:
        try:
            while True:
                waiting = [
                    (job, future)
                    for job, future in self._waiting.pop(queue, [])
                    if not future.cancelled()  # its caller gave up before it was sent
                ]
                if not waiting:
                    return  # no await since the pop: nothing can have joined meanwhile
                for start in range(0, len(waiting), BATCH_MAX):
                    await self._send(waiting[start : start + BATCH_MAX])
        finally:
            del self._drains[queue]

    async def _send(self, batch: _Waiting) -> None:
        try:
            await self._manager.batch_defer_jobs_async([job for job, _ in batch])
        except pq_errors.AlreadyEnqueued:
            if len(batch) > 1:  # which one: each on its own
                for one in batch:
                    await self._send([one])
                return
            _settle(batch, False)
        except Exception as exc:
            _settle(batch, exc)
        else:
            _settle(batch, True)


def _settle(batch: _Waiting, outcome: bool | BaseException) -> None:
    for _, future in batch:
        if future.done():
            continue
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)
