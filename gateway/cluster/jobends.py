"""A job's end, written again until the database takes it.

Procrastinate's worker writes how a job ended (finished, or put back to be retried) once.
When that write fails — the database restarting, the network cut for a moment — the job
stays ``doing`` under a worker that goes on beating, so no replica's stalled-job check ever
takes it, and the next job of its run, which shares its lock, never starts: the run is
stranded although every replica is up. Procrastinate 3 does not write it again.

:class:`DurableJobManager` is the app's job manager with those two writes made durable: a
write the connection lost is made again, with backoff, until the database takes it or the
queue stops. A stop does not wait for the database: the job is then left ``doing`` under a
worker that stops beating, and the stalled-job check of another replica (or of this one's
next start) puts it back; its run resumes from its record.

A write whose connection broke at its end may have been made. Made again, the database
refuses it (procrastinate's functions raise when the job is no longer ``doing``): that
refusal, after a lost connection, means the first write went through.

Only the worker calls :meth:`finish_job` and :meth:`retry_job`; Herald's own checks use the
``_by_id`` forms, which write once (another replica may have been first, and a check runs
again anyway).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Final

import psycopg
from procrastinate import exceptions as pq_errors
from procrastinate.connector import BaseConnector
from procrastinate.jobs import Job, Status
from procrastinate.manager import JobManager

from gateway.backoff import backoff

logger = logging.getLogger(__name__)

#: Backoff of a job's end written again: fast at first (a dropped connection is replaced at
#: once), then every few seconds while the database is away.
FIRST_SECONDS: Final = 0.2
MAX_SECONDS: Final = 5.0


def _connection_lost(exc: pq_errors.ConnectorException) -> bool:
    """The database could not be reached or dropped the connection (psycopg's
    ``OperationalError``, the pool's timeout included): the write may be made again."""
    return isinstance(exc.__cause__, psycopg.OperationalError)


def _refused_as_ended(exc: pq_errors.ConnectorException) -> bool:
    """Procrastinate's function refused the write because the job is no longer ``doing``."""
    return isinstance(exc.__cause__, psycopg.errors.RaiseException)


class DurableJobManager(JobManager):
    """See the module docstring. ``stopping`` says when to stop writing again."""

    def __init__(self, connector: BaseConnector, stopping: asyncio.Event) -> None:
        super().__init__(connector)
        self._stopping = stopping

    async def finish_job(self, job: Job, status: Status, delete_job: bool) -> None:
        finish = partial(JobManager.finish_job, self, job, status, delete_job)
        await self._until_written(job, finish)

    async def retry_job(
        self,
        job: Job,
        retry_at: datetime.datetime | None = None,
        priority: int | None = None,
        queue: str | None = None,
        lock: str | None = None,
    ) -> None:
        retry = partial(
            JobManager.retry_job, self, job, retry_at=retry_at, priority=priority, queue=queue,
            lock=lock,
        )  # fmt: skip
        await self._until_written(job, retry)

    async def _until_written(self, job: Job, write: Callable[[], Awaitable[None]]) -> None:
        lost = 0  # writes the connection lost so far
        while True:
            try:
                await write()
            except pq_errors.ConnectorException as exc:
                if lost and _refused_as_ended(exc):
                    logger.info("sub-agent job's end was recorded before", extra={"job": job.id})
                    return
                if not _connection_lost(exc):
                    raise
                lost += 1
                if self._stopping.is_set():
                    logger.warning(
                        "sub-agent job's end not recorded; left to the stalled-job check",
                        extra={"job": job.id, "error": type(exc.__cause__).__name__},
                    )
                    raise
                if lost == 1:
                    logger.warning(
                        "sub-agent job's end not recorded; writing it again",
                        extra={"job": job.id, "error": type(exc.__cause__).__name__},
                    )
                with contextlib.suppress(TimeoutError):  # a stop cuts the wait short
                    delay = backoff(lost, base=FIRST_SECONDS, cap=MAX_SECONDS)
                    await asyncio.wait_for(self._stopping.wait(), delay)
                continue
            if lost:
                logger.info("sub-agent job's end recorded", extra={"job": job.id})
            return
