"""What the API, the CLI, the agent's tool and chat commands do with jobs: create (checked,
each mistake naming its field), list, show, delete, pause, resume, run now.

Declared jobs (the config file's) can be run now, paused and resumed, never changed or
deleted here; an id a declared job has cannot be taken. A job's first fire time is worked
out when it is created; an ``every`` job first runs one period after it was created.

A job's ``to`` is stored in the one written form of a chat target. A chat — one channel,
DM or web chat client, all its threads together — owns the jobs aimed at it and those its
sessions created: an agent creates jobs only for the chat it is asked in (and its threads),
at most ``maxPerChat`` of them for that chat. Deleting or pausing a job withdraws its runs
that have not started: they end ``cancelled`` and post nothing.
"""

from __future__ import annotations

import builtins
import logging
import re
import time
import uuid
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from typing import Final, Protocol

from gateway.constants import ID_PATTERN
from gateway.schedules.scheduler import Scheduler
from gateway.schedules.store import JobRecord, JobsTable, OccurrenceRecord
from gateway.schema.schedules import JobSpec, SchedulesConfig
from gateway.schema.targets import ChatTargetError, chat_of, parse_target
from gateway.schema.triggers import TriggerError, parse_every, trigger_of
from gateway.state import RecordConflictError

logger = logging.getLogger(__name__)

#: Characters of a made-up job id after its prefix.
_MADE_ID_HEX: Final = 8


class ScheduleError(Exception):
    """A request about jobs that cannot be done: ``code`` for the API, ``field`` to blame."""

    def __init__(self, code: str, message: str, *, field: str | None = None) -> None:
        self.code = code
        self.field = field
        super().__init__(message)


@dataclass(frozen=True, slots=True)
class JobDetail:
    job: JobRecord
    occurrences: list[OccurrenceRecord]


class QueuedRuns(Protocol):
    """What deleting or pausing a job needs of :class:`gateway.subagents.RunManager`."""

    async def drop_queued(self, run_id: str, why: str) -> bool: ...


@dataclass(frozen=True, slots=True)
class ChatScope:
    """One chat as a job's owner, as a session there sees it: the session, and the target
    it was asked from (its thread included; None: a session with no chat, such as an API
    session), in the one written form (:func:`gateway.sessions.target_of_origin`)."""

    session_key: str
    target: str | None

    @property
    def chat(self) -> str | None:
        """The chat, all its threads together."""
        return chat_of(self.target) if self.target is not None else None

    def owns(self, job: JobRecord) -> bool:
        return job.created_by == self.session_key or (
            self.chat is not None and chat_of(job.to_target) == self.chat
        )


def made_id(task: str) -> str:
    """A fresh job id: a slug of the task's first words, then random hex."""
    words = re.sub(r"[^a-z0-9]+", "-", task.lower()).strip("-")[:24].strip("-")
    return f"{words or 'job'}-{uuid.uuid4().hex[:_MADE_ID_HEX]}"


class Schedules:
    """Jobs as people and agents change them (see the module docstring)."""

    def __init__(
        self,
        *,
        jobs: JobsTable,
        scheduler: Scheduler,
        section: Callable[[], SchedulesConfig],
        agents: Callable[[], Collection[str]],
        default_agent: Callable[[], str],
        enabled_channels: Callable[[], Mapping[str, str]],
        runs: QueuedRuns,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._jobs = jobs
        self._runs = runs
        self._scheduler = scheduler
        self._section = section
        self._agents = agents
        self._default_agent = default_agent
        self._enabled = enabled_channels
        self._clock = clock

    def __repr__(self) -> str:
        return f"<Schedules {self._scheduler!r}>"

    async def create(self, spec: JobSpec, *, created_by: str | None = None) -> JobRecord:
        """Check and store a new job; :class:`ScheduleError` naming the field otherwise."""
        record = self._checked(spec, created_by=created_by)
        try:
            await self._jobs.insert(record)
        except RecordConflictError:
            raise ScheduleError(
                "job_exists", f"a job {record.job_id!r} exists", field="id"
            ) from None
        self._scheduler.wake()
        return record

    def _checked(self, spec: JobSpec, *, created_by: str | None) -> JobRecord:
        """``spec`` as a job row, every field checked (the trigger by the one check of
        :meth:`~gateway.schema.triggers.Trigger.check`); its ``to`` in written form."""
        section = self._section()
        now = self._clock()
        try:
            trigger = trigger_of(
                cron=spec.cron,
                every=spec.every,
                at=spec.at,
                timezone=spec.timezone or section.timezone,
                anchor=now,
            )
            trigger.check(min_every_seconds=section.min_every_seconds, now=now)
            if trigger.kind == "every":  # the first run one period from now, not at once
                trigger = replace(trigger, anchor=now + parse_every(trigger.value))
        except TriggerError as exc:
            field = exc.field if exc.field != "trigger" else "cron"
            raise ScheduleError("invalid_field", str(exc), field=field) from None
        try:
            target = parse_target(spec.to, self._enabled())
        except ChatTargetError as exc:
            raise ScheduleError("invalid_field", str(exc), field="to") from None
        agent_id = spec.agent_id or self._default_agent()
        if agent_id not in self._agents():
            known = ", ".join(sorted(self._agents()))
            raise ScheduleError(
                "invalid_field", f"unknown agent {agent_id!r} (agents: {known})", field="agentId"
            )
        job_id = spec.id or made_id(spec.task)
        if not ID_PATTERN.fullmatch(job_id):
            raise ScheduleError(
                "invalid_field", f"job id {job_id!r} must match {ID_PATTERN.pattern}", field="id"
            )
        if any(job.id == job_id for job in section.jobs):
            raise ScheduleError(
                "job_exists", f"{job_id!r} is a job declared in the config file", field="id"
            )
        return JobRecord(
            job_id=job_id,
            trigger_kind=trigger.kind,
            trigger_value=trigger.value,
            timezone=trigger.timezone,
            anchor=trigger.anchor,
            agent_id=agent_id,
            task=spec.task,
            to_target=str(target),
            created_at=now,
            label=spec.label,
            model=spec.model,
            run_timeout_seconds=spec.run_timeout_seconds,
            enabled=spec.enabled,
            created_by=created_by,
            next_run_at=trigger.first(now),
        )

    async def list(self, *, created_by: str | None = None) -> builtins.list[JobRecord]:
        return await self._jobs.list(created_by=created_by)

    async def get(self, job_id: str) -> JobDetail:
        job = await self._require(job_id)
        return JobDetail(job, await self._jobs.occurrences(job_id))

    async def delete(self, job_id: str) -> JobRecord:
        job = await self._require(job_id)
        if job.declared:
            raise ScheduleError(
                "job_declared",
                f"{job_id!r} is declared in the config file: remove it there",
                field="jobId",
            )
        await self._jobs.delete(job_id)  # first: no run of it can be recorded from here on
        await self._withdraw(job_id, "its scheduled job was deleted")
        return job

    async def set_paused(self, job_id: str, paused: bool) -> JobRecord:
        """Pause or resume. A resumed job starts from its next fire time after now: the
        times it passed while paused were paused on purpose, not missed."""
        job = await self._require(job_id)
        now = self._clock()
        moved = None
        if (
            not paused
            and job.paused
            and job.trigger_kind != "at"
            and job.next_run_at is not None
            and job.next_run_at < now
        ):
            moved = job.trigger.first(now)
        changed = await self._jobs.set_paused(job_id, paused, next_run_at=moved)
        if changed is None:
            raise ScheduleError("job_not_found", f"no job {job_id!r}", field="jobId")
        if paused:  # after the pause is written: no scheduled run of it starts from here on
            await self._withdraw(job_id, "its scheduled job was paused")
        self._scheduler.wake()
        return changed

    async def withdraw_orphans(self) -> int:
        """Withdraw the runs not started of jobs that no longer exist (deleted by a reload
        of the file, or while a stop cut the withdrawal short); how many."""
        return await self._withdraw(None, "its scheduled job was deleted")

    async def _withdraw(self, job_id: str | None, why: str) -> int:
        """The runs of ``job_id`` (None: of jobs gone) that have not started end
        ``cancelled`` without a post (``why`` is their error); how many."""
        dropped = 0
        for run_id in await self._jobs.queued_runs(job_id):
            dropped += await self._runs.drop_queued(run_id, why)
        if dropped:
            logger.info("queued runs of a job withdrawn", extra={"job": job_id, "runs": dropped})
        return dropped

    async def run_now(self, job_id: str) -> str:
        """Start an occurrence now, besides the schedule; its run id."""
        job = await self._require(job_id)
        outcome = await self._scheduler.run_now(job, self._clock())
        if outcome is None:
            raise ScheduleError(
                "job_busy", f"{job_id!r}: its previous run has not finished", field="jobId"
            )
        return outcome

    # -- one chat's jobs (the agent's tool and chat commands) --------------------------------

    async def chat_jobs(self, chat: ChatScope) -> builtins.list[JobRecord]:
        """The jobs of one chat: created from it, or aimed at it."""
        jobs = await self._jobs.of_chat(chat.session_key, chat.chat)
        return [job for job in jobs if chat.owns(job)]  # the rule itself, decided here

    async def create_for_chat(self, spec: JobSpec, chat: ChatScope) -> JobRecord:
        """:meth:`create` by the agent of ``chat``: aimed at that chat or one of its threads
        only, and at most ``maxPerChat`` jobs agents created for it (its threads together)."""
        if chat.target is None or chat.chat is None:
            raise ScheduleError(
                "invalid_field",
                "this session has no chat: scheduled jobs are created from the chat they post "
                "to (or through the API)",
                field="to",
            )
        record = self._checked(spec, created_by=chat.session_key)
        if chat_of(record.to_target) != chat.chat:
            raise ScheduleError(
                "invalid_field",
                f"{spec.to!r:.80} is another chat: a job created here posts to this chat "
                f"({chat.chat}) or one of its threads",
                field="to",
            )
        limit = self._section().max_per_chat
        try:
            count = await self._jobs.insert_for_chat(record, chat.chat, limit)
        except RecordConflictError:
            raise ScheduleError(
                "job_exists", f"a job {record.job_id!r} exists", field="id"
            ) from None
        if count is not None:
            raise ScheduleError(
                "invalid_field",
                f"this chat already has {count} scheduled jobs (schedules.maxPerChat is "
                f"{limit}); cancel one first",
            )
        self._scheduler.wake()
        return record

    async def cancel_for_chat(self, job_id: str, chat: ChatScope) -> JobRecord:
        """Delete a job of ``chat``; another chat's job is as unknown as a missing one."""
        job = await self._jobs.get(job_id)
        if job is None or not chat.owns(job):
            raise ScheduleError("job_not_found", f"this chat has no job {job_id!r}", field="jobId")
        return await self.delete(job_id)

    async def _require(self, job_id: str) -> JobRecord:
        job = await self._jobs.get(job_id)
        if job is None:
            raise ScheduleError("job_not_found", f"no job {job_id!r}", field="jobId")
        return job
