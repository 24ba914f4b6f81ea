"""The scheduler: starts each due occurrence once, as a sub-agent run aimed at the job's chat.

A pass (at start, then whenever the soonest job is due, at least every
:data:`POLL_SECONDS`) does two things:

1. **Counts ended runs.** A job whose last run is final gets its status counted once; after
   :data:`PAUSE_AFTER_FAILURES` consecutive ``error``/``timeout`` runs the job is paused and
   its chat told once (the count and the pause are one conditional write; the notice is
   queued only by the writer that paused it). An ``at`` job is deleted once its one
   occurrence is settled.
2. **Fires due jobs.** For each job whose ``next_run_at`` has come, the due times up to now
   are worked out from its trigger: every one but the latest is ``missed``; the latest is
   ``missed`` too when older than ``misfireGraceSeconds``, ``skipped`` when the job's
   previous run is not final, and otherwise runs. A run is recorded through the spawner with
   the occurrences and the job's next fire time in the run's own transaction
   (:func:`gateway.schedules.store.advance`), which moves on only from the ``next_run_at``
   this pass read: a crash keeps all of it or none, and of several replicas one wins.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, Protocol

from gateway.schedules.store import (
    JobRecord,
    JobsTable,
    OccurrenceTakenError,
    Outcome,
    advance,
    record_run_now,
)
from gateway.schema.targets import ChatTargetError
from gateway.schema.triggers import TriggerError
from gateway.sessions import SessionError
from gateway.state import RunStatus, StateError
from gateway.state.connection import Connection
from gateway.subagents.spawn import SpawnAccepted, SpawnRequest, SpawnResult
from gateway.tools import ToolContext

logger = logging.getLogger(__name__)

#: The longest sleep between passes: ended runs are counted at least this often.
POLL_SECONDS: Final = 5.0
#: Consecutive failed runs after which a job is paused.
PAUSE_AFTER_FAILURES: Final = 5
#: Due times recorded in one pass for one job (a job far behind catches up pass by pass).
MAX_DUE_PER_PASS: Final = 500
#: Lateness never counted as a misfire: a loaded loop wakes a little after the due time.
LATE_TOLERANCE_SECONDS: Final = 5.0


class Spawns(Protocol):
    """What the scheduler needs of :class:`gateway.subagents.Spawner`."""

    async def spawn(self, requester: ToolContext, request: SpawnRequest) -> SpawnResult: ...


#: The chat session that asks for a job's runs: its context for the spawner.
Requester = Callable[[JobRecord], Awaitable[ToolContext]]
#: Tells a job's chat something (its pause), through the outbox.
Notify = Callable[[JobRecord, str], Awaitable[None]]
#: Counts an occurrence: (job id, outcome).
Count = Callable[[str, str], None]


@dataclass(frozen=True, slots=True)
class Due:
    """What a pass decided for one job: its occurrences and its next fire time."""

    occurrences: list[tuple[float, Outcome]]
    next_run_at: float | None

    @property
    def runs(self) -> bool:
        return bool(self.occurrences) and self.occurrences[-1][1] == "ran"


def plan(job: JobRecord, now: float, grace: float) -> Due:
    """The due occurrences of ``job`` at ``now`` (its previous run assumed final)."""
    assert job.next_run_at is not None  # only due jobs are planned
    trigger = job.trigger
    times = [job.next_run_at]
    following = trigger.after(job.next_run_at)
    while following is not None and following <= now and len(times) < MAX_DUE_PER_PASS:
        times.append(following)
        following = trigger.after(following)
    outcomes: list[tuple[float, Outcome]] = [(at, "missed") for at in times]
    caught_up = following is None or following > now
    if caught_up and now - times[-1] <= max(grace, LATE_TOLERANCE_SECONDS):
        outcomes[-1] = (times[-1], "ran")
    return Due(outcomes, following)


def pause_notice(job: JobRecord) -> str:
    return (
        f"Scheduled job {job.job_id} is paused: its last {PAUSE_AFTER_FAILURES} runs failed "
        f"(the last one: {job.last_status}). Resume it with `herald schedules resume "
        f"{job.job_id}` once fixed."
    )


class Scheduler:
    """Starts due occurrences (see the module docstring). ``start`` once; ``close`` is
    idempotent."""

    def __init__(
        self,
        *,
        jobs: JobsTable,
        spawner: Spawns,
        requester: Requester,
        notify: Notify,
        count: Count,
        grace: Callable[[], float],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._jobs = jobs
        self._spawner = spawner
        self._requester = requester
        self._notify = notify
        self._count = count
        self._grace = grace
        self._clock = clock
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    def __repr__(self) -> str:
        state = "closed" if self._closing else "running" if self._task else "idle"
        return f"<Scheduler {state}>"

    def start(self) -> None:
        if self._task is None and not self._closing:
            self._task = asyncio.create_task(self._loop(), name="schedules")

    def wake(self) -> None:
        """Run a pass now (a job was created, resumed or run by hand)."""
        self._wake.set()

    async def close(self) -> None:
        self._closing = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _loop(self) -> None:
        while not self._closing:
            # Cleared before the pass reads, never after: a job created while the pass
            # runs must wake the next wait at once.
            self._wake.clear()
            try:
                await self.run_pass()
            except StateError as exc:  # the database is away: try again next pass
                logger.warning("scheduler pass failed", extra={"error": str(exc)})
            except Exception:  # a bug must not end the loop: every other job still fires
                logger.exception("scheduler pass crashed")
            soonest = await self._soonest()
            delay = POLL_SECONDS if soonest is None else soonest - self._clock()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), max(0.0, min(delay, POLL_SECONDS)))

    async def _soonest(self) -> float | None:
        try:
            return await self._jobs.next_due_at()
        except StateError:
            return None

    async def run_pass(self) -> None:
        """Count ended runs, then start what is due."""
        await self.settle()
        now = self._clock()
        for job in await self._jobs.due(now):
            if self._closing:
                return
            try:
                await self.fire(job, now)
            except (TriggerError, ChatTargetError, SessionError) as exc:  # this job's, not others'
                logger.error(
                    "scheduled job cannot fire", extra={"job": job.job_id, "error": str(exc)}
                )

    async def settle(self) -> None:
        for job, status in await self._jobs.unsettled():
            if status is None or status in ("queued", "running", "announcing"):
                continue
            counted = await self._jobs.count_run(job, status, pause_after=PAUSE_AFTER_FAILURES)
            if counted is None:
                continue
            if counted.paused and not job.paused:
                logger.warning("scheduled job paused after failures", extra={"job": job.job_id})
                try:
                    await self._notify(counted, pause_notice(counted))
                except (ChatTargetError, SessionError, StateError) as exc:
                    logger.warning(
                        "pause notice not queued", extra={"job": job.job_id, "error": str(exc)}
                    )
            if counted.next_run_at is None and counted.trigger_kind == "at":
                await self._jobs.delete(counted.job_id)

    async def fire(self, job: JobRecord, now: float) -> None:
        """Record ``job``'s due occurrences, starting a run for the latest when it may."""
        due = plan(job, now, self._grace())
        occurrences = due.occurrences
        if due.runs and await self._previous_live(job):
            occurrences = [*occurrences[:-1], (occurrences[-1][0], "skipped")]
        try:
            if due.runs and occurrences[-1][1] == "ran":
                if not await self._start(job, occurrences, due.next_run_at, now):
                    skipped = [*occurrences[:-1], (occurrences[-1][0], "skipped")]
                    await self._jobs.record(job, skipped, due.next_run_at, now)
                    occurrences = skipped
            else:
                await self._jobs.record(job, occurrences, due.next_run_at, now)
        except OccurrenceTakenError:
            return  # another replica (or pass) recorded these due times
        for _, outcome in occurrences:
            self._count(job.job_id, outcome)
        if job.trigger_kind == "at" and not due.runs:
            await self._jobs.delete(job.job_id)

    async def _previous_live(self, job: JobRecord) -> bool:
        if job.last_run_id is None or job.last_status is not None:
            return False
        status: RunStatus | str | None = await self._jobs.run_status(job.last_run_id)
        return status in ("queued", "running", "announcing")

    async def run_now(self, job: JobRecord, now: float) -> str | None:
        """Start an occurrence of ``job`` at ``now`` besides its schedule; its run id, or
        None while the previous run is live. A refused spawn raises :class:`StateError`."""
        if await self._previous_live(job):
            return None

        def write(conn: Connection) -> None:
            record_run_now(conn, job.job_id, now, _inserted_run_id(conn, job.job_id, now))

        run_id = await self._spawn(job, now, write)
        if run_id is None:
            raise StateError(f"job {job.job_id!r}: the run was refused (see the log)")
        self._count(job.job_id, "ran")
        return run_id

    async def _start(
        self,
        job: JobRecord,
        occurrences: list[tuple[float, Outcome]],
        next_run_at: float | None,
        now: float,
    ) -> bool:
        """Spawn the latest occurrence's run with its records; False when the spawner
        refused it (recorded ``skipped`` by the caller)."""
        at = occurrences[-1][0]

        def write(conn: Connection) -> None:
            run_id = _inserted_run_id(conn, job.job_id, at)
            advance(conn, job, occurrences, next_run_at, now, run_id=run_id)

        return await self._spawn(job, at, write) is not None

    async def _spawn(
        self, job: JobRecord, at: float, write: Callable[[Connection], None]
    ) -> str | None:
        """The occurrence's run, recorded with ``write`` in its transaction; None when the
        spawner refused it. What ``write`` raises for a taken due time is raised here."""
        taken: list[OccurrenceTakenError] = []

        def record_with(conn: Connection) -> None:
            try:
                write(conn)
            except OccurrenceTakenError as exc:
                taken.append(exc)
                raise

        try:
            requester = await self._requester(job)
        except (ChatTargetError, SessionError) as exc:  # its channel is not running or enabled
            logger.warning(
                "scheduled occurrence has no chat", extra={"job": job.job_id, "error": str(exc)}
            )
            return None
        request = SpawnRequest(
            task=job.task,
            label=job.label or job.job_id,
            agent_id=job.agent_id,
            model=job.model,
            run_timeout_seconds=job.run_timeout_seconds or None,
            job_id=job.job_id,
            occurrence_at=at,
            record_with=record_with,
        )
        result = await self._spawner.spawn(requester, request)
        if taken:
            raise taken[0]
        if isinstance(result, SpawnAccepted):
            logger.info(
                "scheduled occurrence started",
                extra={"job": job.job_id, "run_id": result.run_id, "at": at},
            )
            return result.run_id
        logger.warning(
            "scheduled occurrence refused",
            extra={"job": job.job_id, "at": at, "error": result.error},
        )
        return None


def _inserted_run_id(conn: Connection, job_id: str, at: float) -> str:
    """The run the spawn just inserted for this occurrence (in its own transaction)."""
    row = conn.execute(
        "SELECT run_id FROM runs WHERE job_id = ? AND occurrence_at = ?", (job_id, at)
    ).fetchone()
    return str(row[0])
