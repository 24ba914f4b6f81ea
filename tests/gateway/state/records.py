"""Session and run records as the tests build them: the fields a test does not care about
filled in once, the ones it does named at the call."""

from __future__ import annotations

import uuid
from typing import Any

from gateway.state import RunProgress, RunRecord, RunRequest, SessionKind, SessionRecord, StateDB

#: The chat session whose sub-agent runs the tests spawn.
REQUESTER = "agent:main:memory:channel:c1"


def session_record(
    key: str,
    kind: SessionKind = "chat",
    *,
    at: float = 1.0,
    session_id: str | None = None,
    parent_key: str | None = None,
    label: str | None = None,
) -> SessionRecord:
    """A session of agent ``main`` created (and last updated) at ``at``; a fresh session id
    unless ``session_id`` is given (a property test wants one it can replay)."""
    return SessionRecord(
        key=key,
        session_id=session_id or str(uuid.uuid4()),
        agent_id="main",
        kind=kind,
        created_at=at,
        updated_at=at,
        parent_key=parent_key,
        label=label,
    )


async def child_session(db: StateDB, parent: str | None) -> SessionRecord:
    """A new sub-agent session in ``db`` whose parent is the session ``parent``."""
    record = session_record(f"agent:main:subagent:{uuid.uuid4()}", "subagent", parent_key=parent)
    stored, _ = await db.sessions.create(record)
    return stored


def run_record(child: SessionRecord, **fields: Any) -> RunRecord:
    """A run of agent ``main`` in the session ``child``, task ``t``, created at 1.0 with a
    fresh id; ``fields`` (named as
    ``runs`` columns) set the rest (or override those)."""
    return RunRecord(
        run_id=str(uuid.uuid4()),
        child_session_key=child.key,
        child_session_id=child.session_id,
        request=RunRequest(requester_agent_id="main", agent_id="main", task="t"),
        progress=RunProgress(created_at=1.0),
    ).with_columns(**fields)


def requester_run(
    child: SessionRecord, run_id: str, *, at: float, origin: bool = True
) -> RunRecord:
    """A live run :data:`REQUESTER` spawned at ``at``; ``origin``: with the chat it was
    spawned from (``memory``, ``default``, ``c1``)."""
    return run_record(
        child,
        run_id=run_id,
        created_at=at,
        status="running",
        parent_session_key=REQUESTER,
        origin_channel="memory" if origin else None,
        origin_account="default" if origin else None,
        origin_chat_id="c1" if origin else None,
    )
