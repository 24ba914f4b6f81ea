"""The ``schedules`` section: declared jobs and the limits every job keeps.

Kept free of the rest of :mod:`gateway.schedules` (and of the state), because
:mod:`gateway.settings` composes it. What one job can say about itself is checked here with
the key it came from (``schedules.jobs[2].cron``); what needs other sections — the agent, the
channel of ``to``, ``minEverySeconds`` — is :func:`job_problems`, which the settings' cross
checks call.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from typing import Annotated

from pydantic import Field, field_validator, model_validator

from configbase import ConfigModel
from gateway.constants import ID_PATTERN
from gateway.schedules.triggers import (
    TRIGGER_KINDS,
    Trigger,
    TriggerError,
    parse_at,
    parse_every,
    trigger_of,
    zone,
)

#: A key path as the config loader places it: (section, "jobs", index, key).
KeyPath = tuple[str | int, ...]


class _JobFields(ConfigModel):
    """What a job says, whether declared or created through the API."""

    timezone: str | None = None
    """The time zone of `cron` (IANA name); null: `schedules.timezone`."""
    cron: str | None = None
    """Five-field crontab (`"0 9 * * 1-5"`: 09:00 on weekdays) in the job's time zone."""
    every: str | None = None
    """A fixed period: `"90s"`, `"15m"`, `"2h"`, `"1d"`; at least `schedules.minEverySeconds`."""
    at: str | None = None
    """One time, ISO-8601 with an offset (`"2026-12-01T09:00:00+01:00"`); the job is gone
    once it ran. A time already past is an error: remove the job from the file after it ran."""
    agent_id: str | None = None
    """The agent that runs each occurrence; null: `routing.defaultAgent`."""
    task: Annotated[str, Field(min_length=1)]
    """What each occurrence's sub-agent is asked to do."""
    to: Annotated[str, Field(min_length=1)]
    """The chat target its results are announced in: `slack:C0123456789`,
    `slack:C0123456789/<thread ts>`, `discord:<channel id>`, `webchat:<clientId>`."""
    label: str | None = None
    """The runs' label (shown in the announce)."""
    model: str | None = None
    """A `<provider>/<model id>` for the runs; null: the sub-agent default."""
    run_timeout_seconds: Annotated[float, Field(ge=0)] = 0
    """Each run's timeout; 0: none."""
    enabled: bool = True
    """false: listed, never fires."""

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, name: str | None) -> str | None:
        if name is not None:
            zone(name)
        return name

    @field_validator("cron")
    @classmethod
    def _crontab(cls, text: str | None) -> str | None:
        if text is not None:
            Trigger("cron", text).first(time.time())
        return text

    @field_validator("every")
    @classmethod
    def _period(cls, text: str | None) -> str | None:
        if text is not None:
            parse_every(text)
        return text

    @field_validator("at")
    @classmethod
    def _time(cls, text: str | None) -> str | None:
        if text is not None:
            parse_at(text)
        return text


class JobSpec(_JobFields):
    """A job as the API and the CLI create it: as in the file, its id optional."""

    id: str | None = None
    """The job's id; null: one is made from the task."""


class JobConfig(_JobFields):
    """One declared job: exactly one of `cron`, `every` and `at`."""

    id: Annotated[str, Field(pattern=ID_PATTERN.pattern)]
    """The job's id (lowercase letters, digits, `_` and `-`); API-created jobs cannot take it."""

    @model_validator(mode="after")
    def _one_trigger(self) -> JobConfig:
        self.trigger("UTC")
        return self

    def trigger(self, default_timezone: str) -> Trigger:
        """The job's trigger (its `every` anchored at the epoch: declared jobs keep their
        fire times across restarts)."""
        return trigger_of(
            cron=self.cron,
            every=self.every,
            at=self.at,
            timezone=self.timezone or default_timezone,
            anchor=0.0,
        )


class SchedulesConfig(ConfigModel):
    timezone: str = "UTC"
    """The default time zone of `cron` expressions (IANA name)."""
    misfire_grace_seconds: Annotated[float, Field(ge=0)] = 3600
    """An occurrence missed while Herald was down by less than this runs once at start;
    older ones are recorded `missed`."""
    min_every_seconds: Annotated[float, Field(ge=1)] = 60
    """The shortest `every` a job may have."""
    max_per_chat: Annotated[int, Field(ge=0)] = 20
    """How many jobs the agent may create for one chat."""
    jobs: list[JobConfig] = []
    """Jobs declared in this file: listed everywhere; run now, paused and resumed through
    the API, changed or removed only here."""

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, name: str) -> str:
        zone(name)
        return name

    @field_validator("jobs")
    @classmethod
    def _unique_ids(cls, jobs: list[JobConfig]) -> list[JobConfig]:
        seen: set[str] = set()
        for job in jobs:
            if job.id in seen:
                raise ValueError(f"job id {job.id!r} is declared twice")
            seen.add(job.id)
        return jobs


def job_problems(
    section: SchedulesConfig,
    *,
    agents: Collection[str],
    check_target: Callable[[str], str | None],
    now: float | None = None,
) -> list[tuple[KeyPath, str]]:
    """What declared jobs get wrong against the rest of the config, as (key path, message):
    an unknown agent, an unusable `to` (``check_target`` says why, or None), an `every`
    below `minEverySeconds`, an `at` already past."""
    problems: list[tuple[KeyPath, str]] = []
    when = time.time() if now is None else now
    for index, job in enumerate(section.jobs):
        at: KeyPath = ("schedules", "jobs", index)
        if job.agent_id is not None and job.agent_id not in agents:
            known = ", ".join(sorted(agents))
            problems.append(((*at, "agentId"), f"{job.agent_id!r} is not one of ({known})"))
        if (why := check_target(job.to)) is not None:
            problems.append(((*at, "to"), why))
        try:
            job.trigger(section.timezone).check(
                min_every_seconds=section.min_every_seconds, now=when
            )
        except TriggerError as exc:
            problems.append(((*at, _key(exc.field)), str(exc)))
    return problems


def _key(field: str) -> str:
    return field if field in (*TRIGGER_KINDS, "timezone") else "cron"
