"""What the ``subagents`` tool does with a session's runs: list, wait, cancel, steer.

A session sees only the runs it spawned; any other id answers as an unknown one.

``wait`` holds the runs' announces first (:meth:`gateway.state.BatchesTable.hold`), so a run
that ends while it waits posts nothing to the chat: the waiter takes its completion
(``consume``), which is then never written into the conversation again. It wakes on the run
feed's changes. When it returns — done, timed out or cancelled — it releases its holds; a
run whose announce it held but did not take (it ended at the last moment) has that announce
queued now and its completion handed on as usual. A gateway that stopped mid-wait leaves
holds behind. Each hold records the replica whose wait took it: at the next start
:meth:`SubagentControl.recover` releases that replica's own (never a live wait of another
replica's), and :meth:`SubagentControl.take_over` those of a replica that died.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from gateway.delivery import Outbox
from gateway.state import (
    Delivery,
    RunRecord,
    StateDB,
    announce_item,
    announce_state_for,
    destination,
)
from gateway.subagents.announce import ResultHandOn
from gateway.subagents.errors import (
    InboxClosedError,
    InboxFullError,
    RunFinishedError,
    RunNotFoundError,
)
from gateway.subagents.feed import RunFeed
from gateway.subagents.inbox import RunInbox
from gateway.subagents.manager import RunManager
from gateway.subagents.owner import ALONE, Owner
from gateway.subagents.presenter import run_name
from gateway.tools import ToolError
from gateway.usage import format_runtime

logger = logging.getLogger(__name__)

#: ``subagents list`` shows at most this many runs, newest first.
LIST_LIMIT = 50


class WaitedRuns(Protocol):
    """Tells the announce steps of runs a wait holds to go on without waiting for the turn
    that waits (:meth:`gateway.agent.TurnGate.release`)."""

    def release(self, session_key: str, run_ids: Iterable[str]) -> None: ...


class SubagentControl:
    """The ``subagents`` tool's service (see the module docstring)."""

    def __init__(
        self,
        *,
        db: StateDB,
        manager: RunManager,
        inbox: RunInbox,
        feed: RunFeed,
        outbox: Outbox,
        results: ResultHandOn,
        turns: WaitedRuns,
        owner: Owner = ALONE,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._db = db
        self._owner = owner
        self._manager = manager
        self._inbox = inbox
        self._feed = feed
        self._outbox = outbox
        self._results = results
        self._turns = turns
        self._clock = clock
        self._waits = 0

    def __repr__(self) -> str:
        return f"<SubagentControl waiting={self._waits}>"

    async def listing(self, session_key: str) -> list[dict[str, Any]]:
        """The session's runs, newest first, at most :data:`LIST_LIMIT`."""
        now = self._clock()
        runs = await self._db.runs.list(parent_session_key=session_key, limit=LIST_LIMIT)
        return [
            {
                "runId": run.run_id,
                "label": run_name(run),
                "status": run.progress.status,
                "runtime": format_runtime(_runtime(run, now)),
                "childSessionKey": run.child_session_key,
                "depth": run.request.depth,
            }
            for run in runs
        ]

    async def wait(
        self, session_key: str, run_ids: Sequence[str], timeout_seconds: float
    ) -> dict[str, Any]:
        """Wait up to ``timeout_seconds`` for the runs to end; ``{"completed", "pending"}``.
        A completion in ``completed`` is consumed: it reaches the model here only."""
        ids = list(dict.fromkeys(run_ids))
        await self._own(session_key, ids)
        await self._db.ends.hold(ids, by=self._owner.name)
        self._turns.release(session_key, ids)  # their results come here, not after this turn
        self._waits += 1
        logger.info("waiting for sub-agent runs", extra={"runs": len(ids)})
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_seconds
        completed: dict[str, dict[str, Any]] = {}
        try:
            while True:
                seen = self._feed.generation  # before looking: no change can slip between
                left = [i for i in ids if i not in completed]
                for run in await self._db.ends.consume(left):
                    completed[run.run_id] = _completion(run)
                for run_id in [i for i in ids if i not in completed]:
                    found = await self._db.runs.get(run_id)
                    if found is not None and _given_elsewhere(found):
                        completed[run_id] = _given_note(found)
                remaining = deadline - loop.time()
                if len(completed) == len(ids) or remaining <= 0:
                    break
                await self._feed.wait_change(seen, remaining)
        finally:
            self._waits -= 1
            # Shielded: a wait cancelled with its turn still gives back what it held.
            await asyncio.shield(self._release(ids, hand_on=True))
        return {
            "completed": [completed[i] for i in ids if i in completed],
            "pending": [i for i in ids if i not in completed],
        }

    async def cancel(self, session_key: str, run_id: str) -> dict[str, Any]:
        """Stop a run of the session (``"all"``: every one) and every run under it."""
        if run_id == "all":
            stopped = await self._manager.stop_all(session_key)
            return {"status": "cancelled", "cancelled": stopped}
        await self._own(session_key, [run_id])
        try:
            tree = await self._manager.abort_tree(run_id)
        except (RunNotFoundError, RunFinishedError) as exc:
            raise ToolError(str(exc)) from exc
        return {"status": "cancelled", "runId": run_id, "cancelled": list(tree.run_ids)}

    async def steer(self, session_key: str, run_id: str, message: str) -> dict[str, Any]:
        """Give ``message`` to a running run of the session before its next model call."""
        (run,) = await self._own(session_key, [run_id])
        not_running = (
            f"run {run_id} is {run.progress.status}, not running: only a running run is steered"
        )
        if run.progress.status != "running":
            raise ToolError(not_running)
        try:
            await self._inbox.put(run_id, message, now=self._clock())
        except InboxClosedError as exc:
            raise ToolError(f"run {run_id} is not running (it is starting or ending)") from exc
        except InboxFullError as exc:
            raise ToolError(str(exc)) from exc
        return {"status": "steered", "runId": run_id}

    async def recover(self) -> int:
        """Start-up: release what this gateway's waits held before it stopped (none of
        them waits now), so their runs announce; their completions, now this gateway's,
        go the usual way (the completions' own recovery). Returns how many runs were
        released."""
        owner = self._owner
        held = await self._db.claims.take_holds(owner.name, alone=owner.alone)
        if held:
            await self._release(held, hand_on=False)
            logger.info("held announces released", extra={"runs": len(held)})
        return len(held)

    async def take_over(self, cutoff: float) -> int:
        """Release what waits of replicas dead at ``cutoff`` held, and hand their runs'
        completions on (a heartbeat's takeover); returns how many runs were released."""
        held = await self._db.claims.take_holds(self._owner.name, cutoff=cutoff)
        if held:
            await self._release(held, hand_on=True)
            logger.warning("a dead replica's held announces released", extra={"runs": len(held)})
        return len(held)

    async def _own(self, session_key: str, run_ids: Sequence[str]) -> list[RunRecord]:
        """The runs, if the session spawned every one; else a :class:`ToolError` naming the
        others, as unknown (whether they exist elsewhere is not told)."""
        runs: list[RunRecord] = []
        unknown: list[str] = []
        for run_id in run_ids:
            run = await self._db.runs.get(run_id)
            if run is None or run.request.parent_session_key != session_key:
                unknown.append(run_id)
            else:
                runs.append(run)
        if unknown:
            raise ToolError(
                f"unknown run id(s): {', '.join(unknown)} (not runs this session spawned; "
                "see subagents list)"
            )
        return runs

    async def _release(self, run_ids: Sequence[str], *, hand_on: bool) -> None:
        """Clear the holds; queue the announces held and not taken, then hand each run's
        completion on when ``hand_on``."""
        for run in await self._db.ends.release(run_ids, by=self._owner.name):
            try:
                await self._announce_held(run)
                if hand_on:
                    fresh = await self._db.runs.get(run.run_id)
                    await self._results.hand_on(fresh or run)
            except Exception:  # one run's trouble never keeps the others held
                logger.exception("held announce not released", extra={"run_id": run.run_id})

    async def _announce_held(self, run: RunRecord) -> None:
        """Let go of a final run the wait held and did not take: its result goes where it
        would have gone without the wait (its announce queued now, or why there is none
        recorded), in one write."""
        where = destination(run, waited=False)
        text = run.delivery.announce_text
        item = announce_item(run, text, self._clock()) if where.announces and text else None
        # No text: the announce turn answered ANNOUNCE_SKIP.
        state = announce_state_for(where, run) if text else "skipped"
        await self._db.ends.release_final(run.run_id, state or "no_origin", item)
        if item is not None:
            self._outbox.kick()


def _runtime(run: RunRecord, now: float) -> float | None:
    if run.progress.started_at is None:
        return None
    return (run.progress.ended_at or now) - run.progress.started_at


def _completion(run: RunRecord) -> dict[str, Any]:
    """A completion taken by a wait, as the model reads it."""
    out: dict[str, Any] = {
        "runId": run.run_id,
        "label": run_name(run),
        "status": run.progress.status,
        "childSessionKey": run.child_session_key,
    }
    if run.progress.error:
        out["error"] = run.progress.error
    out["result"] = run.progress.result_text.strip() if run.progress.result_text else None
    return out


def _given_elsewhere(run: RunRecord) -> bool:
    """A final run whose result this wait cannot take: a batch's follow-up has it, or it
    reached the conversation (or an earlier wait) already."""
    return run.progress.finished and run.delivery.state not in (Delivery.PENDING, Delivery.HELD)


def _given_note(run: RunRecord) -> dict[str, Any]:
    note = (
        "its result comes in the sessions_yield follow-up"
        if run.delivery.state == Delivery.BATCHED
        else "its result was given to you earlier"
    )
    return {
        "runId": run.run_id,
        "label": run_name(run),
        "status": run.progress.status,
        "childSessionKey": run.child_session_key,
        "note": note,
    }
