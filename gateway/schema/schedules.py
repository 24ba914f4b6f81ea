"""The ``schedules`` section: declared jobs and the limits every job keeps.

A leaf of the configuration, free of :mod:`gateway.schedules` (and of the state), because
:mod:`gateway.settings` composes it. What one job can say about itself is checked here with
the key it came from (``schedules.jobs[2].cron``); what needs other sections — the agent, the
channel of ``to``, ``minEverySeconds`` — is :func:`job_problems`, which the settings' cross
checks call. The API, the CLI and the agent's tool take a job as :class:`JobSpec`, so the
same fields are checked the same way wherever a job comes from, and its ``to`` is in the
one written form of a chat target from here on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from typing import Annotated, Final

from pydantic import Field, field_validator, model_validator

from configbase import ConfigModel
from gateway.constants import ID_PATTERN, MAX_LABEL_CHARS, MAX_TASK_CHARS
from gateway.schema.targets import ChatTargetError, normalize_target
from gateway.schema.triggers import (
    MAX_AT_CHARS,
    MAX_CRON_CHARS,
    MAX_EVERY_CHARS,
    MAX_TIMEZONE_CHARS,
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
#: Longest chat target (a Slack thread's is under 40 characters, a web chat client id 64).
MAX_TARGET_CHARS: Final = 200
#: Longest agent id or ``<provider>/<model id>`` a job names (ids are at most 64 characters).
MAX_NAME_CHARS: Final = 200
#: The longest run timeout a job may set (a week): a run is not meant to outlive that.
MAX_RUN_TIMEOUT_SECONDS: Final = 7 * 86400


class _JobFields(ConfigModel):
    """What a job says, whether declared or created through the API."""

    timezone: Annotated[str | None, Field(max_length=MAX_TIMEZONE_CHARS)] = None
    """The time zone of `cron` (IANA name); null: `schedules.timezone`."""
    cron: Annotated[str | None, Field(max_length=MAX_CRON_CHARS)] = None
    """Five-field crontab (`"0 9 * * 1-5"`: 09:00 on weekdays) in the job's time zone."""
    every: Annotated[str | None, Field(max_length=MAX_EVERY_CHARS)] = None
    """A fixed period: `"90s"`, `"15m"`, `"2h"`, `"1d"`; at least `schedules.minEverySeconds`,
    at most 366 days."""
    at: Annotated[str | None, Field(max_length=MAX_AT_CHARS)] = None
    """One time, ISO-8601 with an offset (`"2026-12-01T09:00:00+01:00"`), at most ten years
    ahead; the job is gone once it ran. A time already past is an error: remove the job
    from the file after it ran."""
    agent_id: Annotated[str | None, Field(max_length=MAX_NAME_CHARS)] = None
    """The agent that runs each occurrence; null: `routing.defaultAgent`."""
    task: Annotated[str, Field(min_length=1, max_length=MAX_TASK_CHARS)]
    """What each occurrence's sub-agent is asked to do."""
    to: Annotated[str, Field(min_length=1, max_length=MAX_TARGET_CHARS)]
    """The chat target its results are announced in: `slack:C0123456789`,
    `slack:C0123456789/<thread ts>`, `discord:<channel id>`, `webchat:<clientId>`."""
    label: Annotated[str | None, Field(max_length=MAX_LABEL_CHARS)] = None
    """The runs' label (shown in the announce)."""
    model: Annotated[str | None, Field(max_length=MAX_NAME_CHARS)] = None
    """A `<provider>/<model id>` for the runs; null: the sub-agent default."""
    run_timeout_seconds: Annotated[
        float, Field(ge=0, le=MAX_RUN_TIMEOUT_SECONDS, allow_inf_nan=False)
    ] = 0
    """Each run's timeout, at most a week (604800); 0: none."""
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
        if text is not None:  # in UTC here: a date no calendar has never fires in any zone
            Trigger("cron", text).check(min_every_seconds=0, now=time.time())
        return text

    @field_validator("to")
    @classmethod
    def _target(cls, text: str) -> str:
        try:
            return normalize_target(text)
        except ChatTargetError as exc:
            raise ValueError(str(exc)) from None

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
    """How many jobs agents may create for one chat (a channel, DM or web chat client, its
    threads together); an agent creates jobs only for the chat it is asked in."""
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
