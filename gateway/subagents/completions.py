"""Completions: a finished run's result, written into the requester's conversation once.

When a run is final its completion is ``pending`` (set in the same write as its final
status). Exactly one of three ways then takes it: a ``sessions_yield`` batch's follow-up
turn (the run is in the batch), a ``subagents wait`` (the waiter consumed it), or — for every
other run — a user-role message in the conversation of its nearest requester still live:

- the requester is a person's session: the message is written in between its turns, on
  that session's lane, so it never lands between a tool call and its result;
- the requester is a sub-agent run still live (an orchestrator): its running turn takes the
  message before its next model call (:class:`RunCompletions`, the turn's inbox);
- the requester run is final: the completion goes on up the chain, to the requester's own
  requester, and so on (a result is never dropped because its requester ended). A run that
  becomes final hands on the completions waiting for it the same way (:meth:`forward`).

The message begins :data:`COMPLETION_PREFIX` and its transcript line carries
``"meta": {"kind": "subagent_completion", "runId": …}``; the write is then recorded as
``delivered``. A stop between the two is healed at start-up (or when a run resumes): the
transcript is searched for the run's line before anything is written again, on the
session's lane (which holds the session's lock in a cluster, so no other replica writes it
meanwhile).

A pending completion records the replica handing it on (the one that ended the run, or
that forwards or releases it later): a replica starting takes up only its own
(:meth:`Completions.recover`) and leaves those live replicas are handing on, and those of a
replica that died are taken over after a heartbeat (:meth:`Completions.take_over`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Final

from gateway.agent import Conversations, Inbox, Injected
from gateway.llm import ChatMessage
from gateway.sessions import SessionStore
from gateway.state import BatchRecord, Delivery, RunRecord, SessionRecord, StateDB
from gateway.subagents.owner import ALONE, Owner
from gateway.subagents.presenter import run_name
from lanes import Lane, LaneClosed, LaneFullError

logger = logging.getLogger(__name__)

COMPLETION_PREFIX: Final = "[sub-agent completion]"
COMPLETION_KIND: Final = "subagent_completion"
FOLLOWUP_KIND: Final = "subagent_followup"
#: Delay before trying again to queue a completion on a full session lane.
LANE_FULL_RETRY_SECONDS: Final = 1.0
#: Childless runs remembered at most (past it the set starts again: a run forgotten is only
#: looked for, as any other).
CHILDLESS_MAX: Final = 10_000


def completion_text(run: RunRecord) -> str:
    """The completion of a final run as the requester's model reads it."""
    lines = [
        COMPLETION_PREFIX,
        f"label: {run_name(run)}",
        f"runId: {run.run_id}",
        f"childSessionKey: {run.child_session_key}",
        f"status: {run.progress.status}",
    ]
    if run.progress.error:
        lines.append(f"error: {run.progress.error}")
    if run.progress.result_text and run.progress.result_text.strip():
        lines += ["result:", run.progress.result_text.strip()]
    elif not run.progress.error:
        lines.append("result: (no result text)")
    if run.delivery.announce_text:
        lines += ["announce:", run.delivery.announce_text]
    return "\n".join(lines)


def followup_text(batch: BatchRecord, runs: Sequence[RunRecord]) -> str:
    """The user message of a batch's follow-up turn: every completion in spawn order."""
    final = [run for run in runs if run.progress.finished]
    live = [run for run in runs if not run.progress.finished]
    # A sub-agent that yielded answers with its result; a person's session, the person.
    answer = (
        "Finish your task now: give your result, combining them"
        if batch.run_id is not None
        else "Answer the person now in one reply, combining them"
    )
    head = (
        f"{COMPLETION_PREFIX} The sub-agents you waited for (sessions_yield, batch "
        f"{batch.batch_id}) have ended: {len(final)} result(s) follow in spawn order. "
        f"{answer}; do not repeat the stats."
    )
    parts = [head]
    if batch.message:
        parts.append(f'You told the person: "{batch.message}"')
    if live:
        names = ", ".join(f"{run_name(run)} ({run.run_id})" for run in live)
        parts.append(f"Still running when the wait timed out (their results come later): {names}")
    parts.extend(completion_text(run) for run in final)
    return "\n\n".join(parts)


def completion_message(run: RunRecord) -> Injected:
    """``run``'s completion as a message given to a running turn, with its line's meta."""
    message = ChatMessage(role="user", content=completion_text(run))
    return Injected(message, {"kind": COMPLETION_KIND, "runId": run.run_id})


def has_meta_line(records: Iterable[dict[str, object]], kind: str, key: str, value: str) -> bool:
    """Whether a transcript holds a written-in message of ``kind`` whose meta ``key`` is
    ``value`` (a completion's run, a follow-up's batch): the check before writing it again."""
    for record in records:
        meta = record.get("meta")
        if isinstance(meta, dict) and meta.get("kind") == kind and meta.get(key) == value:
            return True
    return False


def has_completion_line(records: Iterable[dict[str, object]], run_id: str) -> bool:
    """Whether a transcript already holds ``run_id``'s completion."""
    return has_meta_line(records, COMPLETION_KIND, "runId", run_id)


class Completions:
    """Routes pending completions to their requesters (module docstring)."""

    def __init__(
        self,
        *,
        db: StateDB,
        store: SessionStore,
        conversations: Conversations,
        session_lane: Lane,
        owner: Owner = ALONE,
    ) -> None:
        self._db = db
        self._owner = owner
        self._store = store
        self._conversations = conversations
        self._lane = session_lane
        self._retries: dict[str, asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task[bool]] = set()
        #: Live runs that have completions waiting for them: their turn looks before its
        #: next model call (a run not in here has nothing new, so it skips the query).
        self._due: set[str] = set()
        #: Runs whose whole turn runs here (begun fresh, not resumed) and that have spawned
        #: nothing yet: no completion can be routed to them, so neither their turn (in a
        #: cluster too) nor their end looks for one. A run not in here is looked for.
        self._childless: set[str] = set()

    def __repr__(self) -> str:
        return f"<Completions retrying={len(self._retries)} due={len(self._due)}>"

    async def deliver(self, run: RunRecord, *, check: bool = False) -> bool:
        """Hand ``run``'s completion to its nearest live requester (a final run outside any
        batch and not held by a wait): a live requester run takes it before its next model
        call, a person's session gets it on its lane (``check``: unless its transcript
        holds it already). A stopping gateway leaves it pending for the next start; a full
        lane is tried again shortly. False when it has nowhere to go."""
        owner = self._owner
        # Forwarded or released here: this replica hands it on from now (if still pending).
        forwarded = not owner.alone and run.delivery.completion_by != owner.name
        if forwarded and not await self._db.claims.own_completion(run.run_id, owner.name):
            return False
        target = await self._target(run)
        if isinstance(target, RunRecord):
            self._due.add(target.run_id)  # a resumed run checks its transcript first
        elif target is not None:
            self._queue(target, run, check=check)
        return target is not None

    def began(self, run_id: str, *, resume: bool) -> None:
        """``run_id``'s turn begins here: fresh (it can have no children yet), or resumed."""
        if resume:
            self._childless.discard(run_id)
            return
        if len(self._childless) >= CHILDLESS_MAX:  # runs that ended unseen: look for all
            self._childless.clear()
        self._childless.add(run_id)

    def childless(self, run_id: str) -> bool:
        """Whether ``run_id``'s whole turn ran here and spawned nothing: no batch of its own,
        nothing routed to it."""
        return run_id in self._childless

    def spawned(self, requester_run_id: str) -> None:
        """``requester_run_id`` is spawning a child: completions may be routed to it."""
        self._childless.discard(requester_run_id)

    async def forward(self, run: RunRecord) -> None:
        """``run`` is final: the completions still waiting for it go on up the chain."""
        self._due.discard(run.run_id)
        if run.run_id in self._childless:
            self._childless.discard(run.run_id)
            return  # it spawned nothing: nothing waits for it
        for waiting in await self._db.ends.routed_completions(run.child_session_key):
            await self.deliver(waiting)

    async def _target(self, run: RunRecord) -> RunRecord | str | None:
        """The nearest requester of ``run`` still live: a sub-agent run, or the key of the
        person's session at the top of the chain (None when there is none)."""
        current = run
        while current.request.parent_run_id is not None:
            requester = await self._db.runs.get(current.request.parent_run_id)
            if requester is None:
                logger.warning("requester run missing", extra={"run_id": current.run_id})
                return None
            if not requester.progress.finished:  # ``Destination.REQUESTER``: the live run takes it
                return requester
            current = requester  # ``Destination.UP_CHAIN``: on to its own requester
        return current.request.parent_session_key

    def _queue(self, key: str, run: RunRecord, *, check: bool = False) -> None:
        """Write ``run``'s completion into ``key`` on its lane; ``check``: unless the
        transcript holds it already (a write a stop may have cut off)."""
        try:
            self._lane.submit(lambda: self._write(key, run.run_id, check=check), key=key)
        except LaneFullError:
            self._retries[run.run_id] = asyncio.get_running_loop().call_later(
                LANE_FULL_RETRY_SECONDS, self._retry, run, check
            )
        except LaneClosed:
            logger.info("completion left for the next start", extra={"run_id": run.run_id})

    def _retry(self, run: RunRecord, check: bool) -> None:
        self._retries.pop(run.run_id, None)
        task = asyncio.ensure_future(self.deliver(run, check=check))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _write(self, key: str, run_id: str, *, check: bool = False) -> None:
        run = await self._db.runs.get(run_id)
        if run is None or run.delivery.state != Delivery.PENDING:
            return  # taken by a batch or a wait meanwhile
        if check:
            session = await self._store.get(key)
            if session is None or session.archived:
                return
            if has_completion_line((await self._store.read(key)).records, run_id):
                await self._db.ends.mark_delivered(run_id)
                return
        meta = {"kind": COMPLETION_KIND, "runId": run_id}
        if await self._conversations.write_in(key, completion_text(run), meta):
            await self._db.ends.mark_delivered(run_id)
        else:
            logger.info("requester session gone; completion not written", extra={"run_id": run_id})

    def inbox(
        self, run: RunRecord, child: SessionRecord, *, resume: bool, steers: Inbox | None = None
    ) -> RunCompletions:
        """The inbox of ``run``'s turn: the completions routed to it (and ``steers``)."""
        self.began(run.run_id, resume=resume)
        return RunCompletions(
            self._db, self._store, self.take_due, run, child, resume=resume, steers=steers
        )

    def take_due(self, run_id: str) -> bool:
        """Whether completions arrived for ``run_id`` since it last looked (and clear it).
        In a cluster always, unless the run has spawned nothing: a child that ended on
        another replica was handed on there, where this replica's turn cannot hear of it,
        so the turn looks in the database."""
        if run_id in self._due:
            self._due.discard(run_id)
            return True
        return not self._owner.alone and run_id not in self._childless

    async def recover(self) -> int:
        """Start-up: hand on the completions this gateway left pending when it stopped,
        unless the transcript shows one was written just before the stop; returns how many
        were handed on."""
        owner = self._owner
        runs = await self._db.claims.take_completions(owner.name, alone=owner.alone)
        return await self._take_up(runs)

    async def take_over(self, cutoff: float) -> int:
        """Hand on the completions replicas dead at ``cutoff`` left pending (a heartbeat's
        takeover); returns how many."""
        runs = await self._db.claims.take_completions(self._owner.name, cutoff=cutoff)
        if runs:
            logger.warning("a dead replica's completions taken over", extra={"runs": len(runs)})
        return await self._take_up(runs)

    async def _take_up(self, runs: Sequence[RunRecord]) -> int:
        """Hand on completions a stop may have cut off: a live requester run looks at its
        transcript as it resumes, a session's write checks it first on its lane."""
        queued = 0
        for run in runs:
            queued += await self.deliver(run, check=True)
        return queued

    def close(self) -> None:
        for handle in self._retries.values():
            handle.cancel()
        self._retries.clear()
        for task in self._tasks:
            task.cancel()


class RunCompletions:
    """The :class:`gateway.agent.Inbox` of a live run's turn: before each model call, the
    completions routed to the run (its children's, and those its final children handed
    on), after what ``steers`` gives. Each is marked delivered once its transcript line is
    written (at the next take, or :meth:`settle` when the turn ends); a resumed run first
    marks those its transcript already holds, so none is given twice."""

    def __init__(
        self,
        db: StateDB,
        store: SessionStore,
        due: Callable[[str], bool],
        run: RunRecord,
        child: SessionRecord,
        *,
        resume: bool,
        steers: Inbox | None,
    ) -> None:
        self._db = db
        self._store = store
        self._due = due
        self._run_id = run.run_id
        self._child = child
        self._steers = steers
        #: A resumed run may have completions from before the stop: look once at start.
        self._look = resume
        self._dedupe = resume
        self._given: list[str] = []

    def __repr__(self) -> str:
        return f"<RunCompletions {self._run_id} given={len(self._given)}>"

    async def take(self) -> list[Injected]:
        await self.settle()
        items = list(await self._steers.take()) if self._steers is not None else []
        if not (self._due(self._run_id) or self._look):
            return items
        self._look = False
        pending = await self._db.ends.routed_completions(self._child.key)
        if pending and self._dedupe:
            records = (await self._store.read(self._child.key)).records
            written = [run for run in pending if has_completion_line(records, run.run_id)]
            for run in written:
                await self._db.ends.mark_delivered(run.run_id)
            pending = [run for run in pending if run not in written]
        self._dedupe = False
        for run in pending:
            items.append(completion_message(run))
            self._given.append(run.run_id)
        return items

    async def settle(self) -> None:
        """Mark the completions given so far as delivered, once their lines are on disk."""
        if not self._given:
            return
        await self._store.sync(self._child)
        given, self._given = self._given, []
        for run_id in given:
            await self._db.ends.mark_delivered(run_id)
