"""``sessions_yield`` batches: wait for every run of a batch, then one follow-up turn.

A yield forms a batch of the requester's runs that are not final (in one transaction, see
:meth:`gateway.state.BatchesTable.form`). When the last of them is final, or the batch's
timeout passes (the runs still live leave the batch and complete on their own later), the
requester goes on with one user message holding every completion in spawn order:

- a person's session runs one follow-up turn on its lane. Its reply, ending with the
  batch's stats line, is queued in the outbox for the chat and thread of the turn that
  yielded, in the same transaction that closes the batch and consumes its completions;
- a sub-agent run (an orchestrator below the depth cap) ended its lane job when it yielded,
  so it never holds a slot its children need; it stays ``running`` and is queued again
  (``resume_run``), and its runner continues the same run with the follow-up message
  (:meth:`BatchCoordinator.continue_run`); the run's result is the follow-up's answer. If
  the run ends before its batch does, the batch dissolves and its results go on up the chain.

A stop at any point is resumed at the next start: a ``waiting`` batch is re-armed, a
``following`` one finishes the follow-up the transcript began (its user message is never
written twice), and a person's follow-up reply is posted exactly once.

A ``following`` batch records the replica running its follow-up: a replica starting
resumes only its own (another replica's may be running right now), and a dead replica's is
taken over after a heartbeat (:meth:`BatchCoordinator.take_over`). In a cluster a yielded
run's follow-up belongs to the run's job (the queue resumes it wherever it runs), and every
replica arms the timeout of every waiting batch it sees (the claim lets one act).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from typing import Protocol

from gateway.agent import Conversations, TurnResult
from gateway.delivery import Outbox
from gateway.llm import ChatMessage
from gateway.sessions import SessionStore
from gateway.state import BatchRecord, Origin, OutboxRecord, RunRecord, SessionRecord, StateDB
from gateway.subagents.completions import FOLLOWUP_KIND, followup_text, has_meta_line
from gateway.subagents.owner import ALONE, Owner
from gateway.usage import format_batch_stats_line, sum_usage
from lanes import Lane, LaneClosed

logger = logging.getLogger(__name__)

#: The order statuses are counted in on the stats line (``running``: left at a timeout).
STATS_ORDER = ("done", "error", "timeout", "cancelled", "interrupted", "running")


def batch_stats_line(
    runs: list[RunRecord], followup: TurnResult, runtime_seconds: float | None
) -> str:
    """The follow-up's stats line: the children's and the follow-up turn's tokens and cost."""
    counts = {status: 0 for status in STATS_ORDER}
    for run in runs:
        counts["running" if not run.progress.finished else run.progress.status] += 1
    usage = sum_usage([*(run.progress.usage for run in runs), followup.usage])
    costs = [run.progress.cost_usd for run in runs if run.progress.cost_usd is not None]
    if followup.cost_usd is not None:
        costs.append(followup.cost_usd)
    cost = sum(costs) if costs else None
    return format_batch_stats_line(
        counts.items(), runtime_seconds, usage, cost, [run.run_id for run in runs]
    )


class YieldedRuns(Protocol):
    """How a batch's end sends its yielded run on
    (:class:`gateway.subagents.queueing.YieldedRunQueue`)."""

    def submit(self, run_id: str) -> None:
        """Queue the run again: it goes on with the follow-up message."""
        ...

    async def expire(self, run_id: str) -> None:
        """The run's own timeout passed while it waited: it ends ``timeout`` now."""
        ...


class BatchCoordinator:
    """Forms batches, watches them, and runs their follow-ups (module docstring)."""

    def __init__(
        self,
        *,
        db: StateDB,
        store: SessionStore,
        conversations: Conversations,
        session_lane: Lane,
        main_lane: Lane,
        outbox: Outbox,
        runs: YieldedRuns,
        owner: Owner = ALONE,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._db = db
        self._owner = owner
        self._runs = runs
        self._store = store
        self._conversations = conversations
        self._session_lane = session_lane
        self._main_lane = main_lane
        self._outbox = outbox
        self._clock = clock
        self._timers: dict[str, asyncio.TimerHandle] = {}
        #: Batches whose follow-up this process has queued (so it is queued once).
        self._started: set[str] = set()
        #: Batches found mid-follow-up at start: only their turn may have begun already.
        self._resumed: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    def __repr__(self) -> str:
        return f"<BatchCoordinator waiting={len(self._timers)} started={len(self._started)}>"

    async def form(
        self,
        session_key: str,
        *,
        message: str | None,
        timeout_seconds: float,
        origin: Origin | None,
        run_id: str | None = None,
    ) -> BatchRecord | None:
        """A batch of ``session_key``'s live runs outside any batch; None if there is none.
        Its follow-up goes to ``origin`` (the yielding turn's chat), else the session's."""
        if origin is None:
            session = await self._store.get(session_key)
            origin = session.origin if session is not None else None
        now = self._clock()
        deadline = now + timeout_seconds
        run = await self._db.runs.get(run_id) if run_id is not None else None
        ends = run_deadline(run) if run is not None else None
        if ends is not None:
            # A yielded run's own timeout cannot fire while it waits: the batch's does.
            deadline = min(deadline, ends)
        batch = BatchRecord(
            batch_id=str(uuid.uuid4()),
            session_key=session_key,
            run_ids=(),
            first_spawn_at=now,
            created_at=now,
            deadline_at=deadline,
            run_id=run_id,
            message=message,
            origin_channel=origin.channel if origin else None,
            origin_account=origin.account if origin else None,
            origin_chat_id=origin.chat_id if origin else None,
            origin_thread_id=origin.thread_id if origin else None,
            origin_chat_type=origin.chat_type if origin else None,
        )
        formed = await self._db.batches.form(batch)
        if formed is not None:
            self._arm(formed)
            logger.info(
                "batch formed", extra={"batch": formed.batch_id, "runs": len(formed.run_ids)}
            )
            await self.run_final(formed.batch_id)  # every run may have ended already
        return formed

    def _arm(self, batch: BatchRecord) -> None:
        loop = asyncio.get_running_loop()
        delay = max(0.0, batch.deadline_at - self._clock())
        self._timers[batch.batch_id] = loop.call_later(delay, self._due, batch.batch_id)

    def _due(self, batch_id: str) -> None:
        self._timers.pop(batch_id, None)
        task = asyncio.ensure_future(self._claim(batch_id, timed_out=True))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def dissolve_for(self, run: RunRecord) -> None:
        """``run`` is final: the batch it yielded to, if its follow-up has not run, is
        dissolved (its runs' results go up the chain as completions of their own)."""
        stranded = await self._db.batches.open_for_run(run.run_id)
        if stranded is None:
            return
        timer = self._timers.pop(stranded.batch_id, None)
        if timer is not None:
            timer.cancel()
        await self._db.batches.dissolve(stranded.batch_id, self._clock())
        logger.info("batch dissolved", extra={"batch": stranded.batch_id})

    async def run_final(self, batch_id: str) -> None:
        """A run of the batch is final: start the follow-up once all of them are."""
        if batch_id not in self._started:
            await self._claim(batch_id, timed_out=False)

    async def _claim(self, batch_id: str, *, timed_out: bool) -> None:
        try:
            claimed = await self._db.batches.claim(
                batch_id, self._clock(), timed_out=timed_out, by=self._owner.name
            )
        except Exception:
            logger.exception("batch follow-up could not be started", extra={"batch": batch_id})
            return
        if claimed is None:
            return
        batch, left = claimed
        if timed_out:
            logger.info("batch timed out", extra={"batch": batch_id, "live": len(left)})
        await self._dispatch(batch, timed_out=timed_out)

    async def _dispatch(self, batch: BatchRecord, *, timed_out: bool) -> None:
        """Queue the follow-up of a ``following`` batch (once in this process): a turn on the
        requester's session lane, or the yielded run resumed."""
        batch_id = batch.batch_id
        if batch_id in self._started:
            return
        self._started.add(batch_id)
        timer = self._timers.pop(batch_id, None)
        if timer is not None:
            timer.cancel()
        try:
            if batch.run_id is not None:
                await self._resume(batch, timed_out)
                return
            self._session_lane.submit(lambda: self._followup(batch_id), key=batch.session_key)
        except LaneClosed:
            self._started.discard(batch_id)  # the next start resumes it
        except Exception:
            self._started.discard(batch_id)
            logger.exception("batch follow-up could not be queued", extra={"batch": batch_id})

    async def _followup(self, batch_id: str) -> None:
        """The follow-up turn and its reply (on the session's lane, in a main-lane slot)."""
        batch = await self._db.batches.get(batch_id)
        if batch is None or batch.state == "done":
            return
        runs = await self._db.batches.runs_of(batch)
        if stopped(runs):
            await self._close_stopped(batch, runs)
            return
        key = batch.session_key
        logger.info("batch follow-up started", extra={"batch": batch_id})
        async with self._main_lane.slot():
            # Reading the whole transcript back is for a resumed batch only (it grows with
            # the session's age, and a follow-up begun in this process is never repeated).
            resumed = batch_id in self._resumed
            records = (await self._store.read(key)).records if resumed else []
            if followup_begun(records, batch_id):
                result = await self._conversations.resume(key, origin=batch.origin)
            else:
                meta = {"kind": FOLLOWUP_KIND, "batchId": batch_id}
                text = followup_text(batch, runs)
                result = await self._conversations.turn(key, text, origin=batch.origin, meta=meta)
        ended = self._clock()
        stats = batch_stats_line(runs, result, ended - batch.first_spawn_at)
        reply = f"{result.text.strip()}\n\n{stats}" if result.text else stats
        await self._close(batch, reply, ended, post=True)
        logger.info("batch follow-up queued", extra={"batch": batch_id, "runs": len(runs)})

    async def _close_stopped(self, batch: BatchRecord, runs: list[RunRecord]) -> None:
        """Every run of the batch was stopped: nobody wants a reply written about that, so no
        model turn runs. The completions go into the conversation (the agent knows what
        happened when the person speaks next) with one line from Herald — posted unless a
        ``/stop`` or ``subagents cancel all`` already said it (``stopped_at``)."""
        key = batch.session_key
        line = stopped_line(len(runs))
        records = (await self._store.read(key)).records
        if not followup_begun(records, batch.batch_id):
            meta = {"kind": FOLLOWUP_KIND, "batchId": batch.batch_id}
            await self._conversations.write_in(key, followup_text(batch, runs), meta)
        session = await self._store.get(key)
        if session is not None and not session.archived:
            await self._store.append_event(
                session, "batch_stopped", {"batchId": batch.batch_id, "text": line}
            )
        await self._close(batch, line, self._clock(), post=batch.stopped_at is None)
        logger.info("batch stopped", extra={"batch": batch.batch_id, "runs": len(runs)})

    async def _close(self, batch: BatchRecord, reply: str, ended: float, *, post: bool) -> None:
        """Close the batch with ``reply``, posted to its chat (``post``) in the same write."""
        origin = batch.origin
        item = (
            OutboxRecord.to_origin(origin, reply, ended, kind="followup", batch_id=batch.batch_id)
            if origin is not None and post
            else None
        )
        await self._db.batches.finish(batch.batch_id, reply, ended, item)
        self._started.discard(batch.batch_id)
        self._resumed.discard(batch.batch_id)
        if item is not None:
            self._outbox.kick()

    async def _resume(self, batch: BatchRecord, timed_out: bool) -> None:
        """The yielded run goes on with the follow-up (its runner, on the lane) — or, when
        the batch timed out at the run's own deadline, it ends ``timeout`` at once."""
        run = await self._db.runs.get(batch.run_id or "")
        if run is None or run.progress.status != "running":
            return  # stopped while waiting: its end dissolves the batch
        deadline = run_deadline(run)
        if timed_out and deadline is not None and deadline <= batch.deadline_at:
            await self._runs.expire(run.run_id)
        else:
            self._runs.submit(run.run_id)

    async def waiting_for(self, run_id: str) -> BatchRecord | None:
        """The batch sub-agent run ``run_id`` yielded to, until its follow-up is done."""
        return await self._db.batches.open_for_run(run_id)

    async def continue_run(
        self, batch: BatchRecord, child: SessionRecord, history: list[ChatMessage]
    ) -> None:
        """Give a yielded run resumed after its batch the follow-up message: appended to
        ``history`` and written to its transcript, unless the transcript has it already."""
        records = (await self._store.read(child.key)).records
        if followup_begun(records, batch.batch_id):
            return
        runs = await self._db.batches.runs_of(batch)
        message = ChatMessage(role="user", content=followup_text(batch, runs))
        meta = {"kind": FOLLOWUP_KIND, "batchId": batch.batch_id}
        await self._store.append_message(child, message, meta=meta)
        history.append(message)

    async def run_answered(self, batch: BatchRecord, text: str) -> None:
        """The resumed run's follow-up turn ended: close its batch (its completions are
        consumed: the run's model had them)."""
        await self._db.batches.finish(batch.batch_id, text, self._clock(), None)
        self._started.discard(batch.batch_id)
        logger.info("batch follow-up answered", extra={"batch": batch.batch_id})

    async def recover(self) -> int:
        """Start-up: re-arm waiting batches and resume this gateway's follow-ups; returns
        how many."""
        waiting = await self._arm_waiting()
        owner = self._owner
        following = await self._db.claims.take_followups(owner.name, alone=owner.alone)
        return waiting + await self._take_up(following)

    async def take_over(self, cutoff: float) -> int:
        """Resume the follow-ups of replicas dead at ``cutoff``, and arm the timeouts of
        waiting batches formed elsewhere (a heartbeat's takeover); returns how many
        follow-ups were taken over."""
        following = await self._db.claims.take_followups(self._owner.name, cutoff=cutoff)
        if following:
            logger.warning(
                "a dead replica's batch follow-ups taken over", extra={"batches": len(following)}
            )
        taken = await self._take_up(following)
        await self._arm_waiting()
        return taken

    async def _arm_waiting(self) -> int:
        """Arm every waiting batch not armed here yet and start those already due."""
        armed = 0
        for batch in await self._db.batches.open_batches():
            if batch.state != "waiting" or batch.batch_id in self._timers:
                continue
            self._arm(batch)
            await self.run_final(batch.batch_id)
            armed += 1
        return armed

    async def _take_up(self, batches: list[BatchRecord]) -> int:
        """Finish follow-ups a stop may have cut off (their transcripts say how far they
        got). In a cluster a yielded run's is left to its run's job."""
        taken = 0
        for batch in batches:
            if batch.run_id is not None and not self._owner.alone:
                continue
            self._resumed.add(batch.batch_id)
            await self._dispatch(batch, timed_out=False)
            taken += 1
        return taken

    def close(self) -> None:
        """Stop the timers (a waiting batch is re-armed at the next start)."""
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()


def run_deadline(run: RunRecord) -> float | None:
    """When ``run``'s ``runTimeoutSeconds`` ends it (None: no timeout, or not started)."""
    if not run.request.run_timeout_seconds or run.progress.started_at is None:
        return None
    return run.progress.started_at + run.request.run_timeout_seconds


def stopped(runs: list[RunRecord]) -> bool:
    """Whether every run of a batch was stopped (``cancelled``): it gets no follow-up turn."""
    return bool(runs) and all(run.progress.status == "cancelled" for run in runs)


def stopped_line(count: int) -> str:
    """Herald's one line for a batch whose runs were all stopped."""
    return f"Stopped {count} sub-agent{'s' if count != 1 else ''}."


def followup_begun(records: list[dict[str, object]], batch_id: str) -> bool:
    """Whether a transcript holds ``batch_id``'s follow-up message already."""
    return has_meta_line(records, FOLLOWUP_KIND, "batchId", batch_id)
