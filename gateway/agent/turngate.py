"""Which sessions have a turn running in this process, for the runs those turns spawned.

A sub-agent run that ends while the turn that spawned it is still running must not decide
where its result goes yet: that turn may still call ``sessions_yield`` and take the run into
its batch, and an announce model turn run meanwhile would be thrown away. So a run's announce
step waits here (:meth:`TurnGate.settled`) until its requester session has no turn running —
or until a ``subagents wait`` in that turn holds the run (:meth:`TurnGate.release`: the waiter
takes its result, and must not wait for its own turn to end). A person's session's turns
are counted (:meth:`TurnGate.turn`: chat turns and batch follow-ups). A nested run never
waits: its orchestrator's running turn takes its completion before its next model call.

This is one process's view: in a cluster a run executed on another replica than its
requester's turn decides at once (as it did before), which can still cost an unused
announce turn there; it never loses or doubles a result (the database's write decides that).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Iterator
from typing import Final

#: The longest a run's announce waits for its requester's turn (a turn stuck on a slow tool
#: must not keep a finished run's result from its chat for ever).
SETTLE_MAX_SECONDS: Final = 600.0


class TurnGate:
    """Counts the running turns of each session (see the module docstring)."""

    def __init__(self) -> None:
        self._running: dict[str, int] = {}
        #: Set when the session's last running turn ends (one event per busy spell).
        self._idle: dict[str, asyncio.Event] = {}
        #: Runs waiting in :meth:`settled`, each woken by :meth:`release`.
        self._released: dict[str, asyncio.Event] = {}
        #: Per busy session, the runs a wait in its turn holds: they never wait for it.
        self._let_go: dict[str, set[str]] = {}
        #: Told when a run begins to wait (:meth:`until_waiting`).
        self._began = asyncio.Condition()

    def __repr__(self) -> str:
        return f"<TurnGate running={len(self._running)} waiting={len(self._released)}>"

    def busy(self, session_key: str) -> bool:
        """Whether a turn of ``session_key`` is running in this process."""
        return session_key in self._running

    @contextlib.contextmanager
    def turn(self, session_key: str) -> Iterator[None]:
        """Count a turn of ``session_key`` as running while the block runs."""
        count = self._running.get(session_key, 0)
        if count == 0:
            self._idle[session_key] = asyncio.Event()
        self._running[session_key] = count + 1
        try:
            yield
        finally:
            left = self._running[session_key] - 1
            if left:
                self._running[session_key] = left
            else:
                del self._running[session_key]
                self._let_go.pop(session_key, None)
                self._idle.pop(session_key).set()

    async def settled(self, session_key: str, run_id: str) -> bool:
        """Return once ``session_key`` has no turn running (at once when it has none), or
        ``run_id`` is released, or :data:`SETTLE_MAX_SECONDS` passed; whether it waited."""
        idle = self._idle.get(session_key)
        if idle is None or run_id in self._let_go.get(session_key, ()):
            return False
        released = self._released.setdefault(run_id, asyncio.Event())
        async with self._began:
            self._began.notify_all()
        waits = [asyncio.ensure_future(idle.wait()), asyncio.ensure_future(released.wait())]
        try:
            await asyncio.wait(waits, timeout=SETTLE_MAX_SECONDS, return_when="FIRST_COMPLETED")
        finally:
            for waiting in waits:
                waiting.cancel()
            if self._released.get(run_id) is released:
                del self._released[run_id]
        return True

    def waiting(self, run_id: str) -> bool:
        """Whether ``run_id``'s announce step waits for its requester's turn now."""
        return run_id in self._released

    async def until_waiting(self, run_ids: Iterable[str]) -> None:
        """Return once every run of ``run_ids`` waits for its requester's turn."""
        wanted = list(run_ids)
        async with self._began:
            await self._began.wait_for(lambda: all(self.waiting(r) for r in wanted))

    def release(self, session_key: str, run_ids: Iterable[str]) -> None:
        """A wait in ``session_key``'s turn holds these runs: their announce steps go on
        without the turn's end (those waiting now, and those that come to wait later)."""
        run_ids = list(run_ids)
        if session_key in self._running:
            self._let_go.setdefault(session_key, set()).update(run_ids)
        for run_id in run_ids:
            released = self._released.get(run_id)
            if released is not None:
                released.set()
