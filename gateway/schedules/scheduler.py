"""The scheduler: starts each due occurrence once, as a sub-agent run aimed at the job's chat.

A pass (at start, then whenever the soonest job is due or something woke it) fires due
jobs. For each job whose ``next_run_at`` has come, the due times up to now are worked out
from its trigger: every one but the latest is ``missed``; the latest is ``missed`` too when
older than ``misfireGraceSeconds``, ``skipped`` when the job's previous run is not final,
and otherwise runs. A run goes through the spawn door
(:class:`gateway.subagents.door.SpawnDoor`) with its occurrence: the occurrences and the
job's next fire time are written in the run's own transaction
(:func:`gateway.schedules.store.advance`), which moves on only from the ``next_run_at`` this
pass read: a crash keeps all of it or none, and of several replicas one wins.

How the runs end is not the scheduler's business: the job hears each end from the run
lifecycle, in the write that makes the run final (:mod:`gateway.schedules.bookkeeping`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
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
from gateway.schema.targets import ChatTarget, ChatTargetError
from gateway.schema.triggers import TriggerError
from gateway.sessions import SessionError
from gateway.state import Connection, RunRecord, StateError
from gateway.subagents.spawn import Occurrence, SpawnAccepted, SpawnRequest, SpawnResult

logger = logging.getLogger(__name__)

#: The wait before a pass the database failed is tried again.
RETRY_SECONDS: Final = 5.0
#: Due times recorded in one pass for one job (a job far behind catches up pass by pass).
MAX_DUE_PER_PASS: Final = 500
#: Lateness never counted as a misfire: a loaded loop wakes a little after the due time.
LATE_TOLERANCE_SECONDS: Final = 5.0


class Door(Protocol):
    """What the scheduler needs of :class:`gateway.subagents.door.SpawnDoor`."""

    def target(self, text: str) -> ChatTarget: ...

    async def spawn(
        self,
        target: ChatTarget | None,
        request: SpawnRequest,
        *,
        agent_id: str | None = None,
        occurrence: Occurrence | None = None,
    ) -> SpawnResult: ...


class Runs(Protocol):
    """Reading a run (:class:`gateway.state.RunsTable`): is a job's previous run final?"""

    async def get(self, run_id: str) -> RunRecord | None: ...


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


class Scheduler:
    """Starts due occurrences (see the module docstring). ``start`` once; ``close`` is
    idempotent."""

    def __init__(
        self,
        *,
        jobs: JobsTable,
        door: Door,
        runs: Runs,
        count: Count,
        grace: Callable[[], float],
        recheck: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._jobs = jobs
        self._door = door
        self._runs = runs
        self._count = count
        #: In a cluster, the longest sleep: jobs other replicas created or changed (and
        #: would fire themselves, unless they die) are seen at least this often.
        self._recheck = recheck
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
            delay = self._recheck
            try:
                await self.run_pass()
                soonest = await self._jobs.next_due_at()
                if soonest is not None:
                    until = max(0.0, soonest - self._clock())
                    delay = until if delay is None else min(delay, until)
            except StateError as exc:  # the database is away: try again soon
                logger.warning("scheduler pass failed", extra={"error": str(exc)})
                delay = RETRY_SECONDS
            except Exception:  # a bug must not end the loop: every other job still fires
                logger.exception("scheduler pass crashed")
                delay = RETRY_SECONDS
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)

    async def run_pass(self) -> None:
        """Start what is due."""
        now = self._clock()
        for job in await self._jobs.due(now):
            if self._closing:
                return
            try:
                await self.fire(job, now)
            except (TriggerError, ChatTargetError, SessionError) as exc:
                # This job's own problem, not the others'.
                logger.error(
                    "scheduled job cannot fire", extra={"job": job.job_id, "error": str(exc)}
                )

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
        if job.last_run_id is None:
            return False
        run = await self._runs.get(job.last_run_id)
        return run is not None and not run.progress.finished

    async def run_now(self, job: JobRecord, now: float) -> str | None:
        """Start an occurrence of ``job`` at ``now`` besides its schedule; its run id, or
        None while the previous run is live. A refused spawn raises :class:`StateError`."""
        if await self._previous_live(job):
            return None

        def write(conn: Connection, run_id: str) -> None:
            record_run_now(conn, job.job_id, now, run_id)

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

        def write(conn: Connection, run_id: str) -> None:
            advance(conn, job, occurrences, next_run_at, now, run_id=run_id)

        return await self._spawn(job, at, write) is not None

    async def _spawn(
        self, job: JobRecord, at: float, write: Callable[[Connection, str], None]
    ) -> str | None:
        """The occurrence's run, recorded with ``write`` in its transaction; None when the
        door refused it. What ``write`` raises for a taken due time is raised here."""
        request = SpawnRequest(
            task=job.task,
            label=job.label or job.job_id,
            agent_id=job.agent_id,
            model=job.model,
            run_timeout_seconds=job.run_timeout_seconds or None,
        )
        try:
            result = await self._door.spawn(
                self._door.target(job.to_target),
                request,
                agent_id=job.agent_id,
                occurrence=Occurrence(job.job_id, at, write),
            )
        except (ChatTargetError, SessionError) as exc:
            # Its channel is not running, or no longer enabled.
            logger.warning(
                "scheduled occurrence has no chat", extra={"job": job.job_id, "error": str(exc)}
            )
            return None
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
