"""The announce step of a finished run, and the announce message it posts.

When a run stops, :class:`Announcer` runs one more model turn in the child session asking
for the reply to post (``ANNOUNCE_SKIP`` posts nothing), composes the message — a status
line when the run did not end ``done``, the reply, a blank line, the stats line — and queues
it in the outbox in the same transaction that applies the run's final status. When the model
cannot give an announce (provider down, timeout), the system announce (status line and stats
line) is posted instead: a finished run is never silently dropped. Afterwards the child
session is archived (``cleanup: "delete"``) or scheduled for it (``archiveAfterMinutes``).

What else must hear of a run's end exactly once — a scheduled job counting its runs — is a
:data:`FinalWrite`, written in that same transaction: on whichever replica the run ends, and
never lost to a crash between the run's end and its count.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Sequence
from importlib import resources
from typing import Any, Protocol

from gateway.agent import bound_tool_results
from gateway.archive import ArchiveScheduler
from gateway.constants import ANNOUNCE_SKIP
from gateway.delivery import Outbox
from gateway.llm import ChatMessage, ModelRequest, Usage
from gateway.metrics import Metrics
from gateway.reload import SettingsHolder
from gateway.sessions import SessionStore
from gateway.state import (
    WITHDRAWN,
    Connection,
    Delivery,
    Destination,
    RunRecord,
    RunStatus,
    SessionRecord,
    Spent,
    StateDB,
    destination,
)
from gateway.subagents.child import ChildSessions
from gateway.subagents.feed import RunFeed
from gateway.subagents.owner import ALONE, Owner
from gateway.subagents.presenter import run_name
from gateway.usage import format_runtime, format_stats_line

logger = logging.getLogger(__name__)

#: Bound of the announce turn: one model call, so it needs far less than a whole run.
ANNOUNCE_TIMEOUT_SECONDS = 120.0
#: Statuses whose announce goes through a model turn; cancelled and interrupted runs get
#: the system announce at once (a person asked them to stop, or the gateway did).
MODEL_ANNOUNCED: frozenset[str] = frozenset({"done", "error", "timeout"})

#: Written in the transaction that makes a run final, given the run as that write left it;
#: True when it queued an outbox item (the outbox is woken after the commit).
FinalWrite = Callable[[Connection, RunRecord], bool]


class ResultHandOn(Protocol):
    """What takes a final run's result on from its announce step (its batch, its waiter or
    its requester): :class:`gateway.subagents.ends.RunEnds`."""

    async def hand_on(self, run: RunRecord) -> None: ...


class TurnsInProgress(Protocol):
    """Waiting for a session's running turn to end: :class:`gateway.agent.TurnGate`."""

    async def settled(self, session_key: str, run_id: str) -> bool: ...


def waits_for_requester_turn(run: RunRecord) -> bool:
    """Whether ``run``, just ended, decides where its result goes only once the turn of the
    person's session that spawned it has ended: that turn may still yield and take it into
    its batch (then no announce turn is spent on it). Not a nested run (its orchestrator's
    running turn takes its completion), not one a wait holds (the waiting turn takes it),
    not one announced without a model turn (stopped or interrupted)."""
    return (
        run.request.parent_session_key is not None
        and run.request.parent_run_id is None
        and (run.progress.outcome or "error") in MODEL_ANNOUNCED
        and run.delivery.state != Delivery.HELD
    )


def status_line(run: RunRecord, status: str, runtime_seconds: float | None) -> str | None:
    """The first line of a run that did not end ``done``; None for ``done``."""
    name = f'Sub-agent "{run_name(run)}"'
    after = f" after {format_runtime(runtime_seconds)}" if runtime_seconds is not None else ""
    if status == "done":
        return None
    if status == "timeout":
        return f"{name} timed out{after}."
    if status == "cancelled":
        return f"{name} was cancelled{after}."
    if status == "interrupted":
        return f"{name} was interrupted by a gateway restart{after}."
    detail = f": {run.progress.error}" if run.progress.error else "."
    return f"{name} failed{after}{detail}"


@functools.cache
def _announce_template() -> str:
    return resources.files("gateway.templates").joinpath("announce.md").read_text("utf-8")


def announce_prompt(status: str, result: str | None, error: str | None) -> str:
    """The user message of the announce turn, from ``templates/announce.md``."""
    template = _announce_template()
    if error:
        detail = f"The run's error: {error}"
    elif result:
        detail = f"The run's result:\n{result}"
    else:
        detail = "The run gave no result text."
    return template.format(status=status, detail=detail).strip()


def is_skip(reply: str) -> bool:
    """Exactly ``ANNOUNCE_SKIP`` (surrounding whitespace aside) posts nothing."""
    return reply.strip() == ANNOUNCE_SKIP


def compose_announce(
    run: RunRecord,
    *,
    status: str,
    reply: str | None,
    runtime_seconds: float | None,
    transcript_path: str | None,
) -> str:
    """The message posted to the origin chat: status line, reply, blank line, stats line."""
    parts: list[str] = []
    line = status_line(run, status, runtime_seconds)
    if line:
        parts.append(line)
    if reply and reply.strip():
        parts.append(reply.strip())
    body = "\n".join(parts) if parts else f'Sub-agent "{run_name(run)}" finished.'
    stats = format_stats_line(
        runtime_seconds,
        run.progress.usage,
        run.progress.cost_usd,
        run.child_session_key,
        run.child_session_id,
        transcript_path,
    )
    if run.request.job_id is not None:  # an occurrence says which job to pause or cancel
        stats += f" • job {run.request.job_id}"
    return f"{body}\n\n{stats}"


class Announcer:
    """Runs the announce step of finished runs (see the module docstring)."""

    def __init__(
        self,
        *,
        holder: SettingsHolder,
        db: StateDB,
        store: SessionStore,
        children: ChildSessions,
        outbox: Outbox,
        archive: ArchiveScheduler,
        feed: RunFeed,
        metrics: Metrics,
        results: ResultHandOn,
        turns: TurnsInProgress,
        owner: Owner = ALONE,
        clock: Callable[[], float] = time.time,
        final_writes: Sequence[FinalWrite] = (),
    ) -> None:
        #: Records this gateway as the one handing each run's completion on.
        self._by = owner.name
        self._results = results
        self._turns = turns
        self._holder = holder
        self._db = db
        self._store = store
        self._children = children
        self._outbox = outbox
        self._archive = archive
        self._feed = feed
        self._metrics = metrics
        self._clock = clock
        self._final_writes = tuple(final_writes)

    async def announce(self, run_id: str, *, ended: RunRecord | None = None) -> None:
        """Announce ``run_id``, which is ``announcing`` with its outcome recorded.

        ``ended`` is the run as its runner has just recorded it ``announcing``: then it is
        not read again, and no announce of it can have been queued yet (the announce is
        queued only with the final status, in one write)."""
        run = ended if ended is not None else await self._db.runs.get(run_id)
        if run is None or run.progress.finished:
            return
        if ended is None and await self._db.outbox.get_by_run(run_id) is not None:
            # Queued before a crash by an older version, which applied the final status in
            # a separate write; only the status update was lost.
            run, due = await self._make_final(run, {"status": run.progress.outcome or "error"})
            await self._settled(run, due)
            return
        status: RunStatus = run.progress.outcome or "error"
        if run.delivery.announce_state == WITHDRAWN:
            await self._withdrawn(run, status)
            return
        child = await self._store.require(run.child_session_key)
        reply: str | None = None
        key = run.request.parent_session_key
        waited = (
            key is not None
            and waits_for_requester_turn(run)
            and await self._turns.settled(key, run.run_id)
        )
        if waited:  # the turn may have taken it into its batch
            run = await self._db.runs.get(run_id) or run
        # A run of a batch posts nothing of its own: the follow-up speaks for it.
        turn = status in MODEL_ANNOUNCED and destination(run) is not Destination.BATCH
        spent = Spent(Usage())
        if turn:
            reply, spent = await self._announce_turn(run, child, status)
            if reply is not None and is_skip(reply):
                changes = {"status": status, "announce_state": "skipped"}
                run, due = await self._make_final(run, changes, spent)
                self._metrics.announce_delivery("skipped")
                await self._store.append_event(child, "announce", {"skipped": True})
                await self._settled(run, due)
                return
            # The announce shows the totals its final write will hold, the turn's included.
            run = spent.added_to(run)
        runtime = (run.progress.ended_at or self._clock()) - (
            run.progress.started_at or run.progress.created_at
        )
        text = compose_announce(
            run,
            status=status,
            reply=reply,
            runtime_seconds=runtime,
            transcript_path=run.progress.transcript_path,
        )
        run, due = await self._finish(run, status, text, spent)
        posted = run.delivery.announce_state == "queued"
        await self._store.append_event(
            child,
            "announce",
            {"status": status, "text": text, "state": run.delivery.announce_state},
        )
        parent = await self._store.get(run.request.parent_session_key or "")
        if posted and parent is not None and not parent.archived:
            await self._store.append_event(
                parent, "subagent_announce", {"runId": run_id, "status": status, "text": text}
            )
        logger.info("sub-agent finished", extra={"run_id": run_id, "status": status})
        await self._settled(run, due)

    async def _withdrawn(self, run: RunRecord, status: RunStatus) -> None:
        """A run withdrawn before it started (:meth:`RunManager.drop_queued`): final with
        no post, and its completion taken, so no conversation is told of it either."""
        run, due = await self._make_final(run, {"status": status, "announce_state": WITHDRAWN})
        await self._db.ends.consume([run.run_id])
        self._metrics.announce_delivery("skipped")
        logger.info("sub-agent run withdrawn", extra={"run_id": run.run_id, "status": status})
        await self._settled(run, due)

    async def _finish(
        self, run: RunRecord, status: RunStatus, text: str, spent: Spent
    ) -> tuple[RunRecord, float | None]:
        """Apply the final status and, where the result goes to the chat, queue the announce,
        in one write (the write decides, as it reads the run: a batch or a wait may take
        the result instead, and a nested run's announce reaches its requester inside its
        completion)."""
        run, due = await self._make_final(run, {"status": status, "announce_text": text}, spent)
        if run.delivery.announce_state == "queued":
            self._outbox.kick()
        elif run.delivery.announce_state == "no_origin":
            self._metrics.announce_delivery("no_origin")
        return run, due

    async def _make_final(
        self, run: RunRecord, changes: dict[str, Any], spent: Spent | None = None
    ) -> tuple[RunRecord, float | None]:
        """``finish_run``, with the time its child is due for archiving (when it is
        archived later, not now) and the announce turn's usage (``spent``) written in the
        same transaction; the final run and that time. A stop right after it leaves nothing
        for the start-up's archive check."""
        due = self._archive_due(run)
        queued: list[bool] = []

        def also(conn: Connection, final: RunRecord) -> None:
            queued.clear()  # a write may run again (a group's retry): its last run counts
            queued.extend(write(conn, final) for write in self._final_writes)

        final = await self._db.ends.finish_run(
            run.run_id,
            changes,
            now=self._clock(),
            by=self._by,
            archive_due_at=due,
            spent=spent,
            also=also if self._final_writes else None,
        )
        if any(queued):
            self._outbox.kick()
        return final, due

    def _archive_due(self, run: RunRecord) -> float | None:
        """When ``run``'s child is to be archived: spawn + archiveAfterMinutes (now at the
        earliest); None when it is archived at once (``cleanup: "delete"``) or never."""
        minutes = self._holder.current.agent.subagents.archive_after_minutes
        if run.request.cleanup == "delete" or minutes <= 0 or not self._archive.enabled:
            return None
        return max(run.progress.created_at + minutes * 60, self._clock())

    async def _settled(self, run: RunRecord, archive_due_at: float | None) -> None:
        """The run is final: hand its result on (a batch's follow-up waits on it, nothing
        waits on the archive), then archive its child (``archive_due_at``: the time
        already written with the final status)."""
        await self._completed(run)
        await self.settle_archive(run, recorded_due=archive_due_at)

    async def _completed(self, run: RunRecord) -> None:
        try:
            await self._results.hand_on(run)
        except Exception:
            logger.exception("completion not handed on", extra={"run_id": run.run_id})

    async def _announce_turn(
        self, run: RunRecord, child: SessionRecord, status: RunStatus
    ) -> tuple[str | None, Spent]:
        """One model turn in the child session asking for the reply to post (None if the
        model could not give one: the system announce is posted instead), and what the
        turn spent, for the run's final write to save."""
        try:
            setup, sink = self._children.setup(run, child)
            history = await self._store.chat_messages(child.key)
            bound_tool_results(history, setup.context.max_result_chars)  # as the run sent them
            prompt = ChatMessage(
                role="user",
                content=announce_prompt(status, run.progress.result_text, run.progress.error),
            )
            history.append(prompt)
            await sink.message(prompt)
            request = ModelRequest(
                model=setup.model_id,
                system=setup.system,
                messages=tuple(history),
                max_tokens=setup.max_tokens,
            )
            async with asyncio.timeout(ANNOUNCE_TIMEOUT_SECONDS):
                reply = await setup.provider.complete(request)
            await sink.message(
                ChatMessage(role="assistant", content=reply.text),
                model=reply.model,
                usage=reply.usage,
            )
            spent = sink.take_usage()
            return (reply.text if reply.text.strip() else None), spent
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.warning(
                "announce turn failed; posting the system announce",
                extra={"run_id": run.run_id, "error": str(exc)},
            )
            with contextlib.suppress(Exception):
                await self._store.append_event(child, "announce_failed", {"error": str(exc)})
            return None, Spent(Usage())

    async def settle_archive(self, run: RunRecord, *, recorded_due: float | None = None) -> None:
        """Archive the child (``cleanup: "delete"`` now, else at spawn + archiveAfterMinutes;
        ``recorded_due``: that time, already in the child's row), then tell the feed the
        run is final."""
        try:
            if run.request.cleanup == "delete":
                await self._archive.archive_now(run.child_session_key)
            elif recorded_due is not None:
                await self._archive.schedule(run.child_session_key, recorded_due, recorded=True)
            else:
                minutes = self._holder.current.agent.subagents.archive_after_minutes
                if minutes > 0:
                    due = max(run.progress.created_at + minutes * 60, self._clock())
                    await self._archive.schedule(run.child_session_key, due)
        except Exception:
            logger.exception("archiving a sub-agent session failed", extra={"run_id": run.run_id})
        await self._feed.changed(run.run_id, run)
