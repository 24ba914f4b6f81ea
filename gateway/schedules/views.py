"""How a job is shown: one presenter for the HTTP API, the CLI, the agent's tool and chat."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gateway.schedules.store import JobRecord, OccurrenceRecord
from gateway.sessions import optional_iso
from gateway.shapes import Closed, Timestamp


class Occurrence(Closed):
    at: Timestamp = Field(description="the due time")
    outcome: Literal["ran", "missed", "skipped"]
    run_id: str | None = None


class Job(Closed):
    """A scheduled job: its trigger, its chat, its next and last runs."""

    id: str
    trigger: dict[str, str] = Field(description="{cron, timezone} | {every} | {at}")
    to: str = Field(description="the chat target its runs announce in")
    task: str
    agent_id: str
    label: str | None
    model: str | None
    run_timeout_seconds: float
    enabled: bool
    next_run_at: Timestamp | None
    last_run_at: Timestamp | None
    last_run_id: str | None
    last_status: str | None = Field(
        description="the final status of the job's last finished run (lastRunId may be a "
        "later run still going); null until one has finished"
    )
    consecutive_failures: int
    paused: bool
    declared: bool = Field(description="declared in the config file (changed only there)")
    occurrences: list[Occurrence] | None = Field(
        default=None, description="one job: its last 20 occurrences, newest first"
    )


class JobList(Closed):
    jobs: list[Job]


class RunStarted(Closed):
    job_id: str
    run_id: str


def job_view(job: JobRecord, occurrences: list[OccurrenceRecord] | None = None) -> Job:
    return Job(
        id=job.job_id,
        trigger=job.trigger.to_json(),
        to=job.to_target,
        task=job.task,
        agent_id=job.agent_id,
        label=job.label,
        model=job.model,
        run_timeout_seconds=job.run_timeout_seconds,
        enabled=job.enabled,
        next_run_at=optional_iso(job.next_run_at),
        last_run_at=optional_iso(job.last_run_at),
        last_run_id=job.last_run_id,
        last_status=job.last_status,
        consecutive_failures=job.consecutive_failures,
        paused=job.paused,
        declared=job.declared,
        occurrences=None
        if occurrences is None
        else [
            Occurrence(at=optional_iso(o.occurrence_at) or "", outcome=o.outcome, run_id=o.run_id)
            for o in occurrences
        ],
    )


def job_line(job: JobRecord) -> str:
    """One line for a chat or a terminal: id, trigger, next run, state."""
    state = "paused" if job.paused else "disabled" if not job.enabled else "active"
    following = optional_iso(job.next_run_at) or "never"
    return f"{job.job_id} — {job.trigger} → {job.to_target} — next {following} ({state})"
