"""Replica liveness: this replica's heartbeat, and taking over what dead replicas claimed.

:class:`Heartbeat` registers the replica in the ``replicas`` table at start, moves its
``heartbeat_at`` every ``interval`` seconds, and marks it stopped at a clean stop. A
replica with no heartbeat for ``dead_after`` seconds is dead to the others: after each beat
the survivors run the takeovers they were given (``reapers``, each called with the cut-off:
reopen the outbox sends it left ``sending`` as in doubt, finish the archives it claimed,
archive what fell due), so work a ``kill -9`` stranded goes on without a restart. A beat
that fails (the database away) is logged and tried again at the next interval; the
replica's own work waits on the database meanwhile as it does anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Sequence

from gateway.state import StateDB

logger = logging.getLogger(__name__)

#: Seconds between heartbeats.
HEARTBEAT_SECONDS = 5.0
#: A replica silent this long is dead: four missed beats, so a slow database or a short
#: pause (a GC, a busy host) does not make a live replica's work change hands.
DEAD_AFTER_SECONDS = 20.0

#: A takeover: called with the cut-off (replicas without a heartbeat since are dead).
Reaper = Callable[[float], Awaitable[object]]


class Heartbeat:
    """This replica's row in ``replicas``, kept fresh; :meth:`start`, then :meth:`stop`."""

    def __init__(
        self,
        db: StateDB,
        replica_id: str,
        *,
        interval: float,
        dead_after: float,
        reapers: Sequence[Reaper] = (),
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not 0 < interval < dead_after:
            raise ValueError("the heartbeat interval must be positive and below dead_after")
        self._db = db
        self.replica_id = replica_id
        self.interval = interval
        self.dead_after = dead_after
        self._reapers = list(reapers)
        self._clock = clock
        self._task: asyncio.Task[None] | None = None
        self.beats = 0

    def __repr__(self) -> str:
        state = "running" if self._task is not None and not self._task.done() else "stopped"
        return f"<Heartbeat {self.replica_id} {state} beats={self.beats}>"

    def cutoff(self) -> float:
        """Replicas whose last heartbeat is older than this are dead."""
        return self._clock() - self.dead_after

    def add_reaper(self, reaper: Reaper) -> None:
        self._reapers.append(reaper)

    def remove_reaper(self, reaper: Reaper) -> None:
        """Stop running ``reaper`` (its part is shutting down); absent: nothing."""
        if reaper in self._reapers:
            self._reapers.remove(reaper)

    async def start(self) -> None:
        """Register (before this replica claims anything), then beat in the background."""
        await self._register()
        self._task = asyncio.create_task(self._loop(), name="replica heartbeat")

    async def reap(self) -> None:
        """Run every takeover once now (also after each beat)."""
        cutoff = self.cutoff()
        for reaper in self._reapers:
            try:
                await reaper(cutoff)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("taking over a dead replica's work failed")

    async def stop(self) -> None:
        """Stop beating and mark the replica stopped (peers take its claims at once).
        Idempotent."""
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        try:
            await self._db.replicas.stop(self.replica_id, self._clock())
        except Exception as exc:  # peers see it dead once its heartbeat is old enough
            logger.warning("replica not marked stopped", extra={"error": str(exc)})

    async def _register(self) -> None:
        await self._db.replicas.register(
            self.replica_id, host=socket.gethostname(), pid=os.getpid(), now=self._clock()
        )
        logger.info("replica registered", extra={"replica": self.replica_id})

    async def _loop(self) -> None:
        failing = False
        while True:
            await asyncio.sleep(self.interval)
            try:
                if not await self._db.replicas.beat(self.replica_id, self._clock()):
                    await self._register()  # marked stopped or removed: this replica runs
                self.beats += 1
                if failing:
                    logger.info("replica heartbeat restored", extra={"replica": self.replica_id})
                failing = False
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not failing:
                    logger.warning(
                        "replica heartbeat failed; trying again",
                        extra={"replica": self.replica_id, "error": str(exc)},
                    )
                failing = True
                continue
            await self.reap()
