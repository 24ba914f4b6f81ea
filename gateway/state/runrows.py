"""A run's record: what was asked, how it went, and where its result went.

The ``runs`` table is flat (one column per value); a :class:`RunRecord` reads in three parts.
:data:`RUN_COLUMNS`, :func:`run_from_columns` and :func:`run_columns` are the one mapping
between the two. Writes name columns (``runs.update(run_id, status="done")``): they are
columns, so the generic update helpers and the SQL stay as they are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

from gateway.llm import Usage
from gateway.state.connection import Row
from gateway.state.rows import (
    FINISHED_STATUSES,
    ORIGIN_COLUMNS,
    USAGE_COLUMNS,
    Cleanup,
    Delivery,
    Origin,
    RunContext,
    RunStatus,
    origin_columns,
    origin_from_columns,
    usage_from_columns,
)


@dataclass(frozen=True, slots=True)
class RunRequest:
    """What was asked of a run: fixed when it is spawned, never written again."""

    requester_agent_id: str
    agent_id: str
    task: str
    parent_session_key: str | None = None
    label: str | None = None
    model: str | None = None
    model_applied: bool = True
    cleanup: Cleanup = "keep"
    run_timeout_seconds: float = 0
    #: The chat the run was spawned from: its announce goes there.
    origin: Origin | None = None
    #: ``fork``: the child's transcript starts with a copy of the requester's conversation.
    context: RunContext = "isolated"
    #: The run whose session spawned this one (None for a run a person's session spawned).
    parent_run_id: str | None = None
    #: 1 for a run spawned from a person's session, d + 1 for one spawned by a depth-d run.
    depth: int = 1
    #: The scheduled job whose occurrence this run is (``gateway.schedules``).
    job_id: str | None = None
    #: The due time (epoch seconds) of that occurrence.
    occurrence_at: float | None = None


@dataclass(frozen=True, slots=True)
class RunProgress:
    """How a run went: its status, times, spending and result."""

    created_at: float
    status: RunStatus = "queued"
    #: The final status, decided when the run ends and applied once its announce is queued.
    outcome: RunStatus | None = None
    started_at: float | None = None
    ended_at: float | None = None
    usage: Usage = field(default_factory=Usage)
    #: None until some usage had a known price.
    cost_usd: float | None = None
    result_text: str | None = None
    error: str | None = None
    transcript_path: str | None = None

    @property
    def finished(self) -> bool:
        return self.status in FINISHED_STATUSES


@dataclass(frozen=True, slots=True)
class RunDelivery:
    """Where a run's result went: who has it, and its announce in the requester's chat."""

    #: Who has the run's result (``gateway.state.lifecycle``).
    state: Delivery = Delivery.LIVE
    #: The replica whose wait holds (or held) the run.
    held_by: str | None = None
    #: The replica handing the run's pending completion on.
    completion_by: str | None = None
    #: The ``sessions_yield`` batch this run belongs to, if any.
    batch_id: str | None = None
    announce_state: str | None = None
    announce_error: str | None = None
    #: The announce message as composed (reply + stats line), whether or not it was posted.
    announce_text: str | None = None


@dataclass(frozen=True, slots=True)
class RunRecord:
    """A sub-agent run: what was asked, how it went, and where its result went.

    The ``runs`` table stays flat; :data:`RUN_COLUMNS`, :func:`run_from_columns` and
    :func:`run_columns` are the one mapping between the two, and writes
    (``update(run_id, status=...)``) name columns.
    """

    run_id: str
    child_session_key: str
    child_session_id: str
    request: RunRequest
    progress: RunProgress
    delivery: RunDelivery = field(default_factory=RunDelivery)

    def with_columns(self, **columns: Any) -> RunRecord:
        """This run as a write of ``columns`` (named as in ``runs``) leaves it."""
        return run_from_columns({**run_columns(self), **columns})


#: The ``runs`` columns, in the table's order.
RUN_COLUMNS: Final = (
    "run_id",
    "child_session_key",
    "child_session_id",
    "requester_agent_id",
    "agent_id",
    "task",
    "created_at",
    "status",
    "parent_session_key",
    "label",
    "model",
    "model_applied",
    "cleanup",
    "run_timeout_seconds",
    *ORIGIN_COLUMNS,
    "started_at",
    "ended_at",
    *USAGE_COLUMNS,
    "cost_usd",
    "result_text",
    "error",
    "announce_state",
    "announce_error",
    "transcript_path",
    "outcome",
    "announce_text",
    "parent_run_id",
    "depth",
    "batch_id",
    "delivery",
    "context",
    "held_by",
    "completion_by",
    "job_id",
    "occurrence_at",
)


def run_from_columns(values: Row | Mapping[str, Any]) -> RunRecord:
    """The run stored in ``values`` (every column of ``runs``)."""
    return RunRecord(
        run_id=values["run_id"],
        child_session_key=values["child_session_key"],
        child_session_id=values["child_session_id"],
        request=RunRequest(
            requester_agent_id=values["requester_agent_id"],
            agent_id=values["agent_id"],
            task=values["task"],
            parent_session_key=values["parent_session_key"],
            label=values["label"],
            model=values["model"],
            model_applied=bool(values["model_applied"]),
            cleanup=values["cleanup"],
            run_timeout_seconds=values["run_timeout_seconds"],
            origin=origin_from_columns(values),
            context=values["context"],
            parent_run_id=values["parent_run_id"],
            depth=values["depth"],
            job_id=values["job_id"],
            occurrence_at=values["occurrence_at"],
        ),
        progress=RunProgress(
            created_at=values["created_at"],
            status=values["status"],
            outcome=values["outcome"],
            started_at=values["started_at"],
            ended_at=values["ended_at"],
            usage=usage_from_columns(values),
            cost_usd=values["cost_usd"],
            result_text=values["result_text"],
            error=values["error"],
            transcript_path=values["transcript_path"],
        ),
        delivery=RunDelivery(
            state=Delivery(values["delivery"]),
            held_by=values["held_by"],
            completion_by=values["completion_by"],
            batch_id=values["batch_id"],
            announce_state=values["announce_state"],
            announce_error=values["announce_error"],
            announce_text=values["announce_text"],
        ),
    )


def run_columns(run: RunRecord) -> dict[str, Any]:
    """``run``'s values by ``runs`` column (Python values; see :func:`to_column_value`)."""
    request, progress, delivery = run.request, run.progress, run.delivery
    return {
        "run_id": run.run_id,
        "child_session_key": run.child_session_key,
        "child_session_id": run.child_session_id,
        "requester_agent_id": request.requester_agent_id,
        "agent_id": request.agent_id,
        "task": request.task,
        "created_at": progress.created_at,
        "status": progress.status,
        "parent_session_key": request.parent_session_key,
        "label": request.label,
        "model": request.model,
        "model_applied": request.model_applied,
        "cleanup": request.cleanup,
        "run_timeout_seconds": request.run_timeout_seconds,
        **origin_columns(request.origin),
        "started_at": progress.started_at,
        "ended_at": progress.ended_at,
        "usage_input": progress.usage.input,
        "usage_output": progress.usage.output,
        "usage_cache_read": progress.usage.cache_read,
        "usage_cache_write": progress.usage.cache_write,
        "cost_usd": progress.cost_usd,
        "result_text": progress.result_text,
        "error": progress.error,
        "announce_state": delivery.announce_state,
        "announce_error": delivery.announce_error,
        "transcript_path": progress.transcript_path,
        "outcome": progress.outcome,
        "announce_text": delivery.announce_text,
        "parent_run_id": request.parent_run_id,
        "depth": request.depth,
        "batch_id": delivery.batch_id,
        "delivery": delivery.state,
        "context": request.context,
        "held_by": delivery.held_by,
        "completion_by": delivery.completion_by,
        "job_id": request.job_id,
        "occurrence_at": request.occurrence_at,
    }


class Spent(NamedTuple):
    """What a turn spent: its usage, and its cost when the model is priced (None when not).
    A write adds it to a run's totals and its child session's."""

    usage: Usage
    cost_usd: float | None = None

    @property
    def empty(self) -> bool:
        return self.usage == Usage() and self.cost_usd is None

    def added_to(self, run: RunRecord) -> RunRecord:
        """``run`` with this added to its totals, as the write that adds it leaves them."""
        if self.empty:
            return run
        spent = run.progress.cost_usd
        cost = spent if self.cost_usd is None else (spent or 0.0) + self.cost_usd
        progress = run.progress
        return dataclasses.replace(
            run,
            progress=dataclasses.replace(
                progress, usage=progress.usage + self.usage, cost_usd=cost
            ),
        )


def run_from_row(row: Row) -> RunRecord:
    return run_from_columns(row)
