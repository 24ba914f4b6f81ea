"""Completions: a finished run's result, written into the requester's conversation once.

When a run is final its completion is ``pending`` (set in the same write as its final
status). Exactly one of three ways then takes it: a ``sessions_yield`` batch's follow-up
turn (the run is in the batch), a ``subagents wait`` (the waiter consumed it), or — for every
other run — a user-role message written into the requester session between its turns, on
that session's lane, so it never lands between a tool call and its result. The message
begins :data:`COMPLETION_PREFIX` and its transcript line carries
``"meta": {"kind": "subagent_completion", "runId": …}``; the write is then recorded as
``delivered``. A stop between the two is healed at start-up: the transcript is searched for
the run's line before anything is written again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from typing import Final

from gateway.agent import Conversations
from gateway.sessions import SessionStore
from gateway.state import BatchRecord, RunRecord, StateDB
from gateway.subagents.presenter import run_name
from lanes import Lane, LaneClosed, LaneFullError

logger = logging.getLogger(__name__)

COMPLETION_PREFIX: Final = "[sub-agent completion]"
COMPLETION_KIND: Final = "subagent_completion"
FOLLOWUP_KIND: Final = "subagent_followup"
#: Delay before trying again to queue a completion on a full session lane.
LANE_FULL_RETRY_SECONDS: Final = 1.0


def completion_text(run: RunRecord) -> str:
    """The completion of a final run as the requester's model reads it."""
    lines = [
        COMPLETION_PREFIX,
        f"label: {run_name(run)}",
        f"runId: {run.run_id}",
        f"childSessionKey: {run.child_session_key}",
        f"status: {run.status}",
    ]
    if run.error:
        lines.append(f"error: {run.error}")
    if run.result_text and run.result_text.strip():
        lines += ["result:", run.result_text.strip()]
    elif not run.error:
        lines.append("result: (no result text)")
    if run.announce_text:
        lines += ["announce:", run.announce_text]
    return "\n".join(lines)


def followup_text(batch: BatchRecord, runs: Sequence[RunRecord]) -> str:
    """The user message of a batch's follow-up turn: every completion in spawn order."""
    final = [run for run in runs if run.finished]
    live = [run for run in runs if not run.finished]
    head = (
        f"{COMPLETION_PREFIX} The sub-agents you waited for (sessions_yield, batch "
        f"{batch.batch_id}) have ended: {len(final)} result(s) follow in spawn order. "
        "Answer the person now in one reply, combining them; do not repeat the stats."
    )
    parts = [head]
    if batch.message:
        parts.append(f'You told the person: "{batch.message}"')
    if live:
        names = ", ".join(f"{run_name(run)} ({run.run_id})" for run in live)
        parts.append(f"Still running when the wait timed out (their results come later): {names}")
    parts.extend(completion_text(run) for run in final)
    return "\n\n".join(parts)


def has_completion_line(records: Iterable[dict[str, object]], run_id: str) -> bool:
    """Whether a transcript already holds ``run_id``'s completion."""
    for record in records:
        meta = record.get("meta")
        if (
            isinstance(meta, dict)
            and meta.get("runId") == run_id
            and meta.get("kind") == COMPLETION_KIND
        ):
            return True
    return False


class Completions:
    """Writes pending completions into requesters' conversations (module docstring)."""

    def __init__(
        self,
        *,
        db: StateDB,
        store: SessionStore,
        conversations: Conversations,
        session_lane: Lane,
    ) -> None:
        self._db = db
        self._store = store
        self._conversations = conversations
        self._lane = session_lane
        self._retries: dict[str, asyncio.TimerHandle] = {}

    def __repr__(self) -> str:
        return f"<Completions retrying={len(self._retries)}>"

    def deliver(self, run: RunRecord) -> None:
        """Queue ``run``'s completion on its requester's lane (a final run outside any
        batch and not held by a wait). A stopping gateway leaves it pending for the next
        start; a full lane is tried again shortly."""
        key = run.parent_session_key
        if key is None:
            return
        try:
            self._lane.submit(lambda: self._write(key, run.run_id), key=key)
        except LaneFullError:
            self._retries[run.run_id] = asyncio.get_running_loop().call_later(
                LANE_FULL_RETRY_SECONDS, self._retry, run
            )
        except LaneClosed:
            logger.info("completion left for the next start", extra={"run_id": run.run_id})

    def _retry(self, run: RunRecord) -> None:
        self._retries.pop(run.run_id, None)
        self.deliver(run)

    async def _write(self, key: str, run_id: str) -> None:
        run = await self._db.runs.get(run_id)
        if run is None or run.completion != "pending" or run.batch_id or run.held:
            return  # taken by a batch or a wait meanwhile
        meta = {"kind": COMPLETION_KIND, "runId": run_id}
        if await self._conversations.write_in(key, completion_text(run), meta):
            await self._db.batches.mark_delivered(run_id)
        else:
            logger.info("requester session gone; completion not written", extra={"run_id": run_id})

    async def recover(self) -> int:
        """Start-up: write the completions a stop left pending, unless the transcript shows
        one was written just before the stop; returns how many were queued."""
        queued = 0
        for run in await self._db.batches.pending_completions():
            key = run.parent_session_key
            session = await self._store.get(key) if key else None
            if session is None or session.archived or session.is_subagent:
                continue
            records = (await self._store.read(session.key)).records
            if has_completion_line(records, run.run_id):
                await self._db.batches.mark_delivered(run.run_id)
                continue
            self.deliver(run)
            queued += 1
        return queued

    def close(self) -> None:
        for handle in self._retries.values():
            handle.cancel()
        self._retries.clear()
