"""How a sub-agent run looks in the HTTP API and the CLI."""

from __future__ import annotations

import datetime as dt
from typing import Any

from gateway.state import RunRecord


def _iso(at: float | None) -> str | None:
    if at is None:
        return None
    stamp = dt.datetime.fromtimestamp(at, dt.UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


def run_json(run: RunRecord, *, transcript_path: str | None = None) -> dict[str, Any]:
    """A run as JSON (camelCase); ``transcript_path`` overrides the recorded live path
    (an archived run's transcript has moved)."""
    origin = run.origin
    runtime = (
        run.ended_at - run.started_at
        if run.ended_at is not None and run.started_at is not None
        else None
    )
    return {
        "runId": run.run_id,
        "status": run.status,
        "label": run.label,
        "task": run.task,
        "agentId": run.agent_id,
        "requesterAgentId": run.requester_agent_id,
        "parentSessionKey": run.parent_session_key,
        "childSessionKey": run.child_session_key,
        "childSessionId": run.child_session_id,
        "model": run.model,
        "modelApplied": run.model_applied,
        "cleanup": run.cleanup,
        "runTimeoutSeconds": run.run_timeout_seconds,
        "origin": origin.to_json() if origin else None,
        "createdAt": _iso(run.created_at),
        "startedAt": _iso(run.started_at),
        "endedAt": _iso(run.ended_at),
        "runtimeSeconds": runtime,
        "usage": run.usage.to_json(),
        "costUsd": run.cost_usd,
        "result": run.result_text,
        "error": run.error,
        "announce": {
            "state": run.announce_state,
            "error": run.announce_error,
            "text": run.announce_text,
        },
        "transcriptPath": transcript_path or run.transcript_path,
    }
