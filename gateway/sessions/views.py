"""How a session is shown: its JSON shape and where its transcript is now.

One shape for the HTTP API, the CLI and the session tools.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gateway.sessions.errors import InvalidIdError, UnsafePathError
from gateway.sessions.paths import ARCHIVED_NAME_RE, sessions_dir, transcript_path
from gateway.sessions.titles import read_head, session_title
from gateway.sessions.transcript import iso_timestamp, optional_iso
from gateway.shapes import Origin, Session, Usage
from gateway.state import SessionRecord


def session_view(record: SessionRecord, path: Path | None) -> Session:
    """A session as the API shows it: ISO-8601 times, ``transcriptPath`` where it is now,
    a ``title`` for people, and the model (for a chat session, whose row names none, the
    model of its first reply)."""
    head = read_head(path)
    return Session(
        key=record.key,
        title=session_title(record, head),
        session_id=record.session_id,
        agent_id=record.agent_id,
        kind=record.kind,
        parent_key=record.parent_key,
        label=record.label,
        model=record.model or head.model,
        origin=Origin.of(record.origin),
        created_at=iso_timestamp(record.created_at),
        updated_at=iso_timestamp(record.updated_at),
        usage=Usage.of(record.usage),
        cost_usd=record.cost_usd,
        archive_due_at=optional_iso(record.archive_due_at),
        archived=record.archived,
        archived_at=optional_iso(record.archived_at),
        transcript_path=os.fspath(path) if path else None,
    )


def describe_session(record: SessionRecord, path: Path | None) -> dict[str, Any]:
    """:func:`session_view` as JSON data (camelCase keys), for the CLI and the session tools."""
    return session_view(record, path).wire()


def current_transcript_path(state_dir: Path, record: SessionRecord) -> Path | None:
    """Where ``record``'s transcript is now: archived file, live file, or None if gone.

    Always a path in ``state_dir``: an archived file is found by the file name recorded
    for it (which must be this session's), so a state directory moved or mounted
    elsewhere still finds its archive. A row whose ids cannot form a path (edited by
    hand) has no transcript to find.
    """
    try:
        if not record.archived:
            return transcript_path(state_dir, record.agent_id, record.session_id)
        if not record.archived_path:
            return None
        name = os.path.basename(record.archived_path)
        match = ARCHIVED_NAME_RE.match(name)
        if match is None or match["session_id"] != record.session_id:
            return None
        return sessions_dir(state_dir, record.agent_id) / name
    except (InvalidIdError, UnsafePathError):
        return None
