"""Trees of runs for the tests of the surfaces that show them.

Runs spawned by runs are recorded in the state database as a nested spawn records them. The
surfaces (API, CLI, chat commands) read the tree from the ``runs`` rows alone: a run's
``parent_run_id``, ``depth`` and ``batch_id``. These helpers write such rows, with the child
session row each run needs, into a real state database. Batches come from a real
``sessions_yield`` (:func:`pair_script`).
"""

from __future__ import annotations

import copy
import time
import uuid
from typing import Any

from gateway.sessions import SessionStore
from gateway.state import (
    Origin,
    RunProgress,
    RunRecord,
    RunRequest,
    RunStatus,
    SessionRecord,
    StateDB,
)
from tests.gateway.harness import TEST_SCRIPT


async def record_run(
    db: StateDB,
    requester_key: str,
    label: str,
    *,
    status: RunStatus = "done",
    created_at: float | None = None,
    parent: RunRecord | None = None,
    origin: Origin | None = None,
    task: str | None = None,
    store: SessionStore | None = None,
) -> RunRecord:
    """A run ``requester_key``'s session spawned (``parent``: the run that session belongs
    to, if any), with its child session row — and its transcript header too when ``store``
    is given, so that a gateway started later can run it."""
    at = time.time() if created_at is None else created_at
    where = origin if origin is not None or parent is None else parent.request.origin
    agent_id = requester_key.split(":")[1]
    session_id = str(uuid.uuid4())
    key = f"agent:{agent_id}:subagent:{uuid.uuid4()}"
    if store is not None:
        session = await store.ensure(
            key, kind="subagent", parent_key=requester_key, label=label, fresh=True
        )
        session_id = session.session_id
    else:
        await db.sessions.create(
            SessionRecord(
                key=key,
                session_id=session_id,
                agent_id=agent_id,
                kind="subagent",
                created_at=at,
                updated_at=at,
                parent_key=requester_key,
                label=label,
            )
        )
    return await db.runs.insert(
        RunRecord(
            run_id=str(uuid.uuid4()),
            child_session_key=key,
            child_session_id=session_id,
            request=RunRequest(
                requester_agent_id=agent_id,
                agent_id=agent_id,
                task=task if task is not None else f"task: {label}",
                parent_session_key=requester_key,
                label=label,
                origin=where,
                parent_run_id=parent.run_id if parent else None,
                depth=parent.request.depth + 1 if parent else 1,
            ),
            progress=RunProgress(created_at=at, status=status),
        )
    )


async def record_nested_run(
    db: StateDB,
    parent: RunRecord,
    label: str,
    *,
    status: RunStatus = "done",
    created_at: float | None = None,
    task: str | None = None,
    store: SessionStore | None = None,
) -> RunRecord:
    """A run spawned by ``parent``'s session, one level deeper."""
    return await record_run(
        db,
        parent.child_session_key,
        label,
        status=status,
        created_at=created_at,
        parent=parent,
        task=task,
        store=store,
    )


def pair_script() -> dict[str, Any]:
    """The test script plus ``pair``: spawn ``tea`` and ``coffee``, then ``sessions_yield``;
    the follow-up answers ``both``. The children take a moment (``brew``), so both are
    still live when the yield forms the batch."""
    data = copy.deepcopy(TEST_SCRIPT)
    spawns = [
        {"name": "sessions_spawn", "arguments": {"task": f"brew {name}", "label": name}}
        for name in ("tea", "coffee")
    ]
    data["rules"] = [
        {"match": r"^pair$", "reply": "", "toolCalls": [*spawns, {"name": "sessions_yield"}]},
        {"match": r"^\[sub-agent completion\] The sub-agents", "reply": "both"},
        {"match": r"^brew (.+)$", "reply": "brewed $1", "delaySeconds": 0.2},
        *data["rules"],
    ]
    return data
