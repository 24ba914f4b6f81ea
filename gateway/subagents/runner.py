"""Running one sub-agent run on the ``subagent`` lane, from start or resumed, to its announce.

A run's life, recorded in the ``runs`` table (the source of truth after a restart)::

    queued → running → announcing → done | error | timeout | cancelled | interrupted

The final status is decided here, by the runtime, never by the model's text: it is kept in
``outcome`` while the announce turn runs, and applied by the announce step in the same
transaction that queues the announce. A run found ``running`` resumes from its transcript;
one found ``announcing`` goes straight to its announce. While a run is in its child phase
its box in the :class:`RunInbox` is open: a steer kept for it joins its conversation before
its next model call; one it never read is dropped when it ends (a run that stops or yields
keeps its steers for when it goes on).

Nesting: a run's turn takes the completions of its own sub-agents before each model call
(its inbox, :meth:`gateway.subagents.Completions.inbox`). A run that yields
(``sessions_yield``) ends its lane job but stays ``running``; queued again when its batch
ends, it goes on with the follow-up message. A run that ends ``timeout`` or ``cancelled``
stops its live descendants (:class:`DescendantStopper`: the run manager, which builds its
runner); one that ends otherwise leaves them.

A run a person's session spawned that ends while that session's turn runs (the
:class:`~gateway.agent.TurnGate` knows) leaves its lane slot and announces once the turn has
ended: the turn may yield and take it into its batch. A nested run never waits: its running
orchestrator takes its completion before its next model call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from gateway.agent import StoreSink, TurnGate, TurnOutcome, run_turn
from gateway.providers import ProviderError
from gateway.sessions import SessionError, SessionStore
from gateway.state import (
    BatchRecord,
    DiskFullError,
    RunRecord,
    RunStatus,
    Spent,
    StateDB,
    StateUnavailableError,
)
from gateway.subagents.announce import Announcer, waits_for_requester_turn
from gateway.subagents.batches import BatchCoordinator
from gateway.subagents.child import ChildSessions, spawned_event
from gateway.subagents.completions import Completions
from gateway.subagents.feed import RunFeed
from gateway.subagents.inbox import RunBox, RunInbox

logger = logging.getLogger(__name__)


class _WithdrawnError(Exception):
    """The run was withdrawn before it started (a deleted or paused job's occurrence)."""


#: Final statuses that stop a run's live descendants with it.
CASCADING: frozenset[RunStatus] = frozenset({"timeout", "cancelled"})


class RunControl(Protocol):
    """What a runner asks of the run manager that makes it."""

    async def abort_descendants(self, run_id: str) -> int:
        """Stop the live runs below ``run_id``."""
        ...

    def announce_here(self, run_id: str) -> None:
        """Run ``run_id``'s announce step now, outside the lane."""
        ...


@dataclass(slots=True)
class TurnUsage:
    """The usage of a run's own turn not yet saved: saved by the write that records the
    run's end (``announcing``, one write for both), else by a write of its own where the
    run does not end here (a yield, a shutdown) or that write failed."""

    sink: StoreSink | None = None

    def pending(self) -> Spent | None:
        return self.sink.unsaved_usage() if self.sink is not None else None

    def saved(self) -> None:
        """The write that recorded the run's end saved it."""
        if self.sink is not None:
            self.sink.take_usage()

    async def save(self) -> None:
        """Save what is still unsaved (nothing, usually); never raises."""
        if self.sink is not None:
            await asyncio.shield(self.sink.save_usage())


@dataclass(frozen=True, slots=True)
class RunnerParts:
    """What a :class:`RunRunner` works with, besides the manager that makes it."""

    db: StateDB
    store: SessionStore
    children: ChildSessions
    announcer: Announcer
    feed: RunFeed
    inbox: RunInbox
    completions: Completions
    batches: BatchCoordinator
    turns: TurnGate


class RunRunner:
    """Executes runs. :meth:`cancel` aborts a run in its child phase (it ends ``cancelled``);
    any other cancellation is a shutdown (the run stays ``running`` and resumes later). Once
    a run has left its child phase it can no longer be cancelled by an abort, so nothing
    cancels its status update or its announce."""

    def __init__(
        self,
        parts: RunnerParts,
        *,
        control: RunControl,
        defer_announces: bool = True,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._db = parts.db
        self._store = parts.store
        self._children = parts.children
        self._announcer = parts.announcer
        self._feed = parts.feed
        self._inbox = parts.inbox
        self._completions = parts.completions
        self._batches = parts.batches
        self._turns = parts.turns
        self._control = control
        #: A run that ends while the turn that spawned it runs leaves its lane slot to wait
        #: for that turn (one process; in a cluster the queue's job must end with the run).
        self._defer_announces = defer_announces
        self._clock = clock
        self._aborting: set[str] = set()
        #: Runs this runner is executing: the task, and whether it is in its child phase.
        self._tasks: dict[str, asyncio.Task[object] | None] = {}
        self._in_child: set[str] = set()
        #: Runs queued again while still executing (a batch ended as its run yielded).
        self._again: set[str] = set()

    def __repr__(self) -> str:
        return f"<RunRunner executing={len(self._tasks)} in_child={len(self._in_child)}>"

    def executing(self, run_id: str) -> bool:
        """Whether this runner is executing ``run_id`` now (its job's body has begun)."""
        return run_id in self._tasks

    def cancel(self, run_id: str) -> bool:
        """Abort ``run_id`` if it has not left its child phase; False when this runner is not
        executing it or it is already recording its own end."""
        if run_id not in self._tasks or run_id in self._aborting:
            return False
        if run_id in self._in_child:
            task = self._tasks[run_id]
            if task is not None:
                task.cancel()
        elif self._tasks[run_id] is None:
            return False  # past its child phase
        self._aborting.add(run_id)  # starting: it ends cancelled before its child runs
        return True

    async def execute(self, run_id: str) -> None:
        """Run ``run_id`` from wherever its record says it is, through its announce."""
        if run_id in self._tasks:
            # Never two executions of one run: this one goes on when the other ends.
            self._again.add(run_id)
            return
        self._tasks[run_id] = asyncio.current_task()
        try:
            await self._execute(run_id)
            while run_id in self._again:
                self._again.discard(run_id)
                self._tasks[run_id] = asyncio.current_task()
                await self._execute(run_id)
        finally:
            self._tasks.pop(run_id, None)
            self._in_child.discard(run_id)
            self._aborting.discard(run_id)
            self._again.discard(run_id)

    async def _execute(self, run_id: str) -> None:
        run = await self._db.runs.get(run_id)
        if run is None or run.progress.finished:
            return
        if run.progress.status == "announcing":
            self._tasks[run_id] = None
            await self._stop_below(run_id, run.progress.outcome)
            await self._announcer.announce(run_id)
            return
        resume = run.progress.status == "running"
        batch = await self._waited_batch(run_id) if resume else None
        if batch is not None and batch.state == "waiting":
            return  # yielded: the batch's end queues it again
        started = run.progress.started_at if resume and run.progress.started_at else self._clock()
        status: RunStatus = "done"
        result: str | None = None
        error: str | None = None
        yielded = False
        self._in_child.add(run_id)
        box = self._inbox.open(run_id, resume=resume)
        spent = TurnUsage()
        try:
            if run_id in self._aborting:
                raise asyncio.CancelledError  # aborted while starting
            begun = await self._db.runs.begin(run_id, started)
            if begun is None:
                raise _WithdrawnError  # before it started: it never runs, and posts nothing
            run = begun
            self._feed.publish(run)
            outcome = await self._run_child(run, resume=resume, batch=batch, box=box, spent=spent)
            result = outcome.text
            yielded = outcome.ended_by == "yield"
            if outcome.ended_by == "submit_error":
                status, error = "error", outcome.text
            elif outcome.ended_by == "max_iterations":
                status = "error"
                error = f"stopped after {outcome.iterations} model calls (maxIterations)"
        except _WithdrawnError:
            withdrawn = await self._db.runs.get(run_id)
            status, error = "cancelled", withdrawn.progress.error if withdrawn is not None else None
        except TimeoutError:
            status = "timeout"
        except asyncio.CancelledError:
            if run_id not in self._aborting:
                # Gateway shutdown: the run stays `running` and resumes on restart.
                await spent.save()
                raise
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                task.uncancel()
            status = "cancelled"
        except ProviderError as exc:
            status, error = "error", str(exc)
        except (StateUnavailableError, DiskFullError):
            # The database, not the run, failed (away for a moment, or its disk full): the
            # run keeps the status it has on record, and the manager executes it again.
            await spent.save()
            raise
        except (SessionError, OSError) as exc:  # the transcript could not be written
            status, error = "error", f"transcript: {exc}"
        except Exception as exc:
            logger.exception("sub-agent run crashed", extra={"run_id": run_id})
            status, error = "error", f"internal error: {type(exc).__name__}: {exc}"
        finally:
            # From here on no abort can cancel this run: its end is being recorded.
            self._in_child.discard(run_id)
            self._tasks[run_id] = None
            self._inbox.close(run_id)
        try:
            if batch is not None:
                await self._batches.run_answered(batch, result or "")
        except BaseException:
            await spent.save()
            raise
        if yielded and status == "done":
            await spent.save()
            return  # stays `running`; the batch's end queues it again
        run = await self._record_end(
            run_id, spent, outcome=status, ended_at=self._clock(), result_text=result, error=error
        )
        self._feed.publish(run)
        await self._inbox.drop(run_id, box)
        await self._stop_below(run_id, status)
        if self._defer(run):
            return
        await self._announcer.announce(run_id, ended=run)

    async def _record_end(self, run_id: str, spent: TurnUsage, **changes: object) -> RunRecord:
        """The run's ``announcing`` write, its turn's usage saved with it. When that write
        fails the usage is saved on its own; not when a shutdown cancels it (the usage went
        with the write or is lost with it: the transcript keeps every call's usage)."""
        try:
            run = await self._db.runs.update(
                run_id, spent=spent.pending(), status="announcing", **changes
            )
        except asyncio.CancelledError:
            raise
        except Exception:
            await spent.save()
            raise
        spent.saved()
        return run

    def _defer(self, run: RunRecord) -> bool:
        """Whether ``run``'s announce waits, outside the lane, for the turn that spawned it
        (:func:`~gateway.subagents.announce.waits_for_requester_turn`)."""
        key = run.request.parent_session_key
        if (
            not self._defer_announces
            or key is None
            or not waits_for_requester_turn(run)
            or not self._turns.busy(key)
        ):
            return False
        self._feed.spawn(self._announce_after_turn(key, run.run_id))
        return True

    async def _announce_after_turn(self, session_key: str, run_id: str) -> None:
        await self._turns.settled(session_key, run_id)
        self._control.announce_here(run_id)

    async def _waited_batch(self, run_id: str) -> BatchRecord | None:
        """The batch a resumed run yielded to (None: it yielded to none)."""
        return await self._batches.waiting_for(run_id)

    async def _stop_below(self, run_id: str, status: RunStatus | None) -> None:
        """A run ending ``timeout`` or ``cancelled`` stops its live descendants with it."""
        if status not in CASCADING:
            return
        try:
            await self._control.abort_descendants(run_id)
        except Exception:
            logger.exception("descendants not stopped", extra={"run_id": run_id})

    async def _run_child(
        self,
        run: RunRecord,
        *,
        resume: bool,
        batch: BatchRecord | None,
        box: RunBox,
        spent: TurnUsage,
    ) -> TurnOutcome:
        child = await self._store.require(run.child_session_key)
        box.attach(child)
        # The spawn answered before its transcript was begun.
        await self._store.ensure_transcript(child, spawned_event(run, task=True))
        setup, sink = self._children.setup(run, child, lineage=await self._children.lineage(run))
        spent.sink = sink  # its usage is saved with the run's end
        history = await self._children.history(child, run, resume=resume)
        if batch is not None:
            await self._batches.continue_run(batch, child, history)
        if resume and history and history[-1].role == "assistant" and not history[-1].tool_calls:
            return TurnOutcome(text=history[-1].content, ended_by="reply")
        timeout = run.request.run_timeout_seconds or None
        if resume and timeout and run.progress.started_at:
            timeout = max(0.0, run.progress.started_at + timeout - self._clock())
        inbox = self._completions.inbox(run, child, resume=resume, steers=box)
        try:
            async with asyncio.timeout(timeout):
                outcome = await run_turn(setup, self._children.tools, history, sink, inbox)
            await sink.sync()  # a line the disk refused ends the run as an error
            return outcome
        finally:
            with contextlib.suppress(Exception):  # unsettled ones stay pending
                await asyncio.shield(inbox.settle())
            with contextlib.suppress(Exception):  # unsettled steers stay kept
                await asyncio.shield(box.settle())
