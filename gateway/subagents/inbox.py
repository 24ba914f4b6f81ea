"""Messages for running sub-agents: steers now, nested completions later.

:class:`RunInbox` keeps one bounded in-memory box per run in its child phase. The runner
opens a run's box when the child phase begins and closes it when it ends; the run's turn
takes what arrived before each model call (the turn loop's :class:`gateway.agent.Inbox`),
so a message never lands between a tool call and its result. Anyone may :meth:`~RunInbox.put`
into an open box; a closed one refuses, so a sender knows the run did not get it.
"""

from __future__ import annotations

import logging

from gateway.agent import Injected
from gateway.subagents.errors import InboxClosedError, InboxFullError

logger = logging.getLogger(__name__)

#: Messages that may wait for one run's next model call (a steer is one a turn, usually).
MAX_WAITING = 16


class RunInbox:
    """The boxes of the runs in their child phase, by run id."""

    def __init__(self, max_waiting: int = MAX_WAITING) -> None:
        self._boxes: dict[str, list[Injected]] = {}
        self._max_waiting = max_waiting

    def __repr__(self) -> str:
        waiting = sum(len(box) for box in self._boxes.values())
        return f"<RunInbox runs={len(self._boxes)} waiting={waiting}>"

    def open(self, run_id: str) -> RunBox:
        """Start taking messages for ``run_id``; the view its turn takes them from."""
        self._boxes.setdefault(run_id, [])
        return RunBox(self, run_id)

    def close(self, run_id: str) -> list[Injected]:
        """Stop taking messages for ``run_id``; returns those its turn never took."""
        return self._boxes.pop(run_id, [])

    def accepts(self, run_id: str) -> bool:
        """Whether ``run_id`` is in its child phase, taking messages."""
        return run_id in self._boxes

    def put(self, run_id: str, item: Injected) -> None:
        """Give ``item`` to ``run_id`` for its next model call. Raises
        :class:`InboxClosedError` when the run takes no messages now, and
        :class:`InboxFullError` when too many already wait."""
        box = self._boxes.get(run_id)
        if box is None:
            raise InboxClosedError(run_id)
        if len(box) >= self._max_waiting:
            raise InboxFullError(run_id, self._max_waiting)
        box.append(item)

    def take(self, run_id: str) -> list[Injected]:
        """What arrived for ``run_id`` since its last take."""
        box = self._boxes.get(run_id)
        if not box:
            return []
        taken = list(box)
        box.clear()
        return taken


class RunBox:
    """One run's view of the inbox: the :class:`gateway.agent.Inbox` its turn drains."""

    __slots__ = ("_inbox", "run_id")

    def __init__(self, inbox: RunInbox, run_id: str) -> None:
        self._inbox = inbox
        self.run_id = run_id

    def __repr__(self) -> str:
        return f"<RunBox {self.run_id}>"

    async def take(self) -> list[Injected]:
        return self._inbox.take(self.run_id)
