"""Steers for running sub-agents, kept in the state database until their run wrote them.

:meth:`RunInbox.put` records a steer (``steers`` table) if its run is running, so it
reaches the run wherever and whenever the run's turn goes on: after a stop, or on another
replica of a cluster. The runner opens a run's :class:`RunBox` when its child phase begins
and closes it when it ends; the run's turn takes its steers before each model call (the
turn loop's :class:`gateway.agent.Inbox`), so a message never lands between a tool call and
its result. A steer's row is deleted once its line is in the run's transcript; a resumed
run skips the steers its transcript holds already, so each is given exactly once.

A box looks in the database only when it may find something: a steer put on this process,
a notice from another replica (:data:`~gateway.subagents.notices.STEERS`, or None after a
gap in the notices), a resumed run's first look, and in a cluster every ``poll`` seconds in
case a notice was lost. One process refuses a steer for a run whose box is not open (it is
queued, starting or ending), as it always did; a replica cannot know where a run executes,
so in a cluster a running run takes it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

from gateway.agent import Injected
from gateway.llm import ChatMessage
from gateway.sessions import SessionStore
from gateway.state import SessionRecord, StateDB, SteerRecord
from gateway.subagents.errors import InboxClosedError, InboxFullError
from gateway.subagents.notices import STEERS, Notices

logger = logging.getLogger(__name__)

#: Messages that may wait for one run's next model call (a steer is one a turn, usually).
MAX_WAITING = 16
#: The transcript meta of a steer's line (with its ``steerId``).
STEER_KIND = "steer"


class RunInbox:
    """The boxes of the runs in their child phase on this process, by run id."""

    def __init__(self, db: StateDB, store: SessionStore, *, max_waiting: int = MAX_WAITING) -> None:
        self.db = db
        self.store = store
        self._boxes: dict[str, RunBox] = {}
        self._max_waiting = max_waiting
        self._notices: Notices | None = None
        #: In a cluster: a box looks in the database at least this often.
        self.poll: float | None = None

    def __repr__(self) -> str:
        return f"<RunInbox runs={len(self._boxes)} cluster={self._notices is not None}>"

    async def link(self, notices: Notices, *, poll: float) -> None:
        """In a cluster: hear the steers put on other replicas, and tell them ours."""
        self._notices, self.poll = notices, poll
        await notices.subscribe(STEERS, self.heard)

    def unlink(self) -> None:
        if self._notices is not None:
            self._notices.unsubscribe(STEERS)
            self._notices = None

    def open(self, run_id: str, *, resume: bool) -> RunBox:
        """Start taking steers for ``run_id``; a resumed run looks for kept ones at once."""
        box = self._boxes[run_id] = RunBox(self, run_id, due=resume)
        return box

    def close(self, run_id: str) -> RunBox | None:
        """Stop taking steers for ``run_id`` here; its box (None if it had none open)."""
        return self._boxes.pop(run_id, None)

    def accepts(self, run_id: str) -> bool:
        """Whether ``run_id`` is in its child phase on this process."""
        return run_id in self._boxes

    def looks_next(self, run_id: str) -> bool:
        """Whether ``run_id``'s turn looks for steers before its next model call (it was
        told one may wait; the cluster's slow look aside)."""
        box = self._boxes.get(run_id)
        return box is not None and box.due

    async def put(self, run_id: str, message: str, *, now: float) -> SteerRecord:
        """Keep ``message`` for ``run_id``'s next model call. Raises
        :class:`InboxClosedError` when the run takes no messages now, and
        :class:`InboxFullError` when too many already wait."""
        box = self._boxes.get(run_id)
        if box is None and self._notices is None:
            raise InboxClosedError(run_id)
        if box is not None:
            # Before the insert: a run that ends meanwhile drops what it never read.
            box.due = True
        added = await self.db.steers.add(run_id, message, now=now, limit=self._max_waiting)
        if added == "not_running":
            raise InboxClosedError(run_id)
        if added == "full":
            raise InboxFullError(run_id, self._max_waiting)
        if box is None and self._notices is not None:  # it executes elsewhere
            await self._notices.tell(STEERS, run_id)
        return added

    async def heard(self, run_id: str | None) -> None:
        """Another replica put a steer for ``run_id`` (None: maybe for any run)."""
        boxes = self._boxes.values() if run_id is None else [self._boxes.get(run_id)]
        for box in boxes:
            if box is not None:
                box.due = True

    async def drop(self, run_id: str, box: RunBox | None) -> None:
        """``run_id`` ended: forget the steers it never read (logged)."""
        if self._notices is None and (box is None or not box.due):
            return  # one process: nothing was put since its last look
        try:
            unread = await self.db.steers.drop(run_id)
        except Exception:
            logger.warning("unread steers not dropped", extra={"run_id": run_id}, exc_info=True)
            return
        if unread:
            logger.info(
                "run ended before reading messages", extra={"run_id": run_id, "unread": unread}
            )


class RunBox:
    """One run's steers: the :class:`gateway.agent.Inbox` its turn drains."""

    __slots__ = ("_child", "_dedupe", "_given", "_inbox", "_looked", "due", "run_id")

    def __init__(self, inbox: RunInbox, run_id: str, *, due: bool) -> None:
        self._inbox = inbox
        self.run_id = run_id
        #: Whether a look in the database may find something.
        self.due = due
        #: A resumed run may have written some before it stopped: it skips those.
        self._dedupe = due
        self._looked = asyncio.get_running_loop().time()
        self._child: SessionRecord | None = None
        self._given: list[int] = []

    def __repr__(self) -> str:
        return f"<RunBox {self.run_id} due={self.due} given={len(self._given)}>"

    def attach(self, child: SessionRecord) -> None:
        """The run's session, where its steers are written."""
        self._child = child

    async def take(self) -> list[Injected]:
        await self.settle()
        now = asyncio.get_running_loop().time()
        poll = self._inbox.poll
        if self._child is None or not (
            self.due or (poll is not None and now - self._looked >= poll)
        ):
            return []
        self.due, self._looked = False, now
        inbox = self._inbox
        waiting = await inbox.db.steers.waiting(self.run_id)
        if waiting and self._dedupe:
            records = (await inbox.store.read(self._child.key)).records
            written = _written_steers(records)
            await inbox.db.steers.delete([s.steer_id for s in waiting if s.steer_id in written])
            waiting = [s for s in waiting if s.steer_id not in written]
        self._dedupe = False
        self._given.extend(s.steer_id for s in waiting)
        return [
            Injected(
                ChatMessage(role="user", content=s.message),
                {"kind": STEER_KIND, "steerId": s.steer_id},
            )
            for s in waiting
        ]

    async def settle(self) -> None:
        """Forget the steers given so far, once their lines are on disk."""
        if not self._given or self._child is None:
            return
        await self._inbox.store.sync(self._child)
        given, self._given = self._given, []
        await self._inbox.db.steers.delete(given)


def _written_steers(records: Iterable[dict[str, Any]]) -> set[int]:
    """The ids of the steers a transcript holds."""
    found: set[int] = set()
    for record in records:
        meta = record.get("meta")
        if isinstance(meta, dict) and meta.get("kind") == STEER_KIND:
            steer_id = meta.get("steerId")
            if isinstance(steer_id, int):
                found.add(steer_id)
    return found
