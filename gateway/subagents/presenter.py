"""How a sub-agent run is shown: one presenter for the HTTP API, the CLI and chat commands."""

from __future__ import annotations

from typing import Any

from gateway.sessions import optional_iso
from gateway.shapes import Announce, Origin, Run, Usage
from gateway.state import RunRecord
from gateway.usage import format_cost, format_runtime, format_tokens

#: Longest task excerpt used as a run's name when it has no label.
NAME_CHARS = 40


def run_name(run: RunRecord) -> str:
    """How people see a run: its label, else the start of its task."""
    if run.label:
        return run.label
    task = " ".join(run.task.split())
    return task if len(task) <= NAME_CHARS else task[: NAME_CHARS - 1] + "…"


def runtime_seconds(run: RunRecord) -> float | None:
    """Seconds from start to end, once the run has both."""
    if run.ended_at is None or run.started_at is None:
        return None
    return run.ended_at - run.started_at


def run_view(run: RunRecord, *, transcript_path: str | None = None) -> Run:
    """A run as the API, the CLI and chat commands show it; ``transcript_path`` overrides
    the recorded live path (an archived run's transcript has moved)."""
    return Run(
        run_id=run.run_id,
        status=run.status,
        label=run.label,
        task=run.task,
        agent_id=run.agent_id,
        requester_agent_id=run.requester_agent_id,
        parent_session_key=run.parent_session_key,
        child_session_key=run.child_session_key,
        child_session_id=run.child_session_id,
        model=run.model,
        model_applied=run.model_applied,
        cleanup=run.cleanup,
        run_timeout_seconds=run.run_timeout_seconds,
        origin=Origin.of(run.origin),
        created_at=optional_iso(run.created_at),
        started_at=optional_iso(run.started_at),
        ended_at=optional_iso(run.ended_at),
        runtime_seconds=runtime_seconds(run),
        usage=Usage.of(run.usage),
        cost_usd=run.cost_usd,
        result=run.result_text,
        error=run.error,
        announce=Announce(
            state=run.announce_state, error=run.announce_error, text=run.announce_text
        ),
        transcript_path=transcript_path or run.transcript_path,
    )


def run_json(run: RunRecord, *, transcript_path: str | None = None) -> dict[str, Any]:
    """:func:`run_view` as JSON data (camelCase keys), for the CLI's ``--json``."""
    return run_view(run, transcript_path=transcript_path).wire()


def run_line(run: RunRecord, now: float) -> str:
    """One line of a chat's ``/subagents list``."""
    age = format_runtime(max(0.0, now - run.created_at))
    return f"{run.run_id[:8]} {run.status:<11} {age} ago  {run_name(run)}"


def usage_text(run: RunRecord) -> str:
    """``12.3k (in 10.0k / out 2.3k)``."""
    usage = run.usage
    return (
        f"{format_tokens(usage.total)} (in {format_tokens(usage.input)} / "
        f"out {format_tokens(usage.output)})"
    )


def run_info(run: RunRecord) -> str:
    """A chat's ``/subagents info``: status, agent, model, runtime, tokens, cost, announce."""
    cost = f" • est {format_cost(run.cost_usd)}" if run.cost_usd is not None else ""
    seconds = runtime_seconds(run)
    runtime = format_runtime(seconds) if seconds is not None else "n/a"
    return (
        f"Run {run.run_id} ({run_name(run)}): {run.status}\n"
        f"agent {run.agent_id} • model {run.model} • runtime {runtime} • tokens "
        f"{usage_text(run)}{cost}\n"
        f"announce: {run.announce_state or 'pending'}"
        + (f" ({run.announce_error})" if run.announce_error else "")
    )
