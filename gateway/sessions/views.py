"""How a session is shown: its JSON shape and where its transcript is now.

One shape for the HTTP API, the CLI and the session tools.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gateway.sessions.paths import transcript_path
from gateway.sessions.transcript import iso_timestamp
from gateway.state import SessionRecord


def describe_session(record: SessionRecord, path: Path | None) -> dict[str, Any]:
    """A session as JSON: camelCase keys, ISO-8601 times, ``transcriptPath`` where it is now."""
    return {
        "key": record.key,
        "sessionId": record.session_id,
        "agentId": record.agent_id,
        "kind": record.kind,
        "parentKey": record.parent_key,
        "label": record.label,
        "model": record.model,
        "origin": record.origin.to_json() if record.origin else None,
        "createdAt": iso_timestamp(record.created_at),
        "updatedAt": iso_timestamp(record.updated_at),
        "usage": record.usage.to_json(),
        "costUsd": record.cost_usd,
        "archiveDueAt": _iso(record.archive_due_at),
        "archived": record.archived,
        "archivedAt": _iso(record.archived_at),
        "transcriptPath": os.fspath(path) if path else None,
    }


def current_transcript_path(state_dir: Path, record: SessionRecord) -> Path | None:
    """Where ``record``'s transcript is now: archived file, live file, or None if gone."""
    if record.archived:
        return Path(record.archived_path) if record.archived_path else None
    return transcript_path(state_dir, record.agent_id, record.session_id)


def _iso(at: float | None) -> str | None:
    return iso_timestamp(at) if at is not None else None
