"""Who hears about a run's progress: the origin chat's live status, waiters and metrics.

Every status change is published to the channel of the run's origin (surfaces such as the
web chat show runs live); when a run reaches its final status, waiters of :meth:`wait`
and of :meth:`wait_change` (``subagents wait``) wake and the metrics count it. Publishing
never blocks or breaks a run: status displays are sent from side tasks, and their failures
are logged.

In a cluster (:meth:`RunFeed.link`) a run may end on another replica: each final run is told
to the others (:data:`~gateway.subagents.notices.RUN_ENDED`), and what they tell wakes the
waiters here. A notice may be missed, so waiters also look again when the notices resume
(a handler call with None) and at least every ``poll`` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine, Mapping
from typing import Any

from channels import Channel, RunUpdate
from gateway.metrics import Metrics
from gateway.state import RunRecord, RunsTable
from gateway.subagents.errors import RunNotFoundError
from gateway.subagents.notices import RUN_ENDED, Notices
from gateway.subagents.presenter import run_name

logger = logging.getLogger(__name__)


class RunFeed:
    """Publishes run changes; :meth:`close` cancels status sends still in flight."""

    def __init__(self, runs: RunsTable, channels: Mapping[str, Channel], metrics: Metrics) -> None:
        self._runs = runs
        self._channels = channels
        self._metrics = metrics
        self._finished = asyncio.Condition()
        #: Counts :meth:`changed` calls, so a waiter cannot miss one between looks.
        self._generation = 0
        self._side_tasks: set[asyncio.Task[None]] = set()
        self._notices: Notices | None = None
        #: In a cluster: waiters look again at least this often (a notice may be lost).
        self._poll: float | None = None

    def __repr__(self) -> str:
        return f"<RunFeed sending={len(self._side_tasks)}>"

    def publish(self, run: RunRecord) -> None:
        """Tell the origin channel the run's status (for surfaces that show it live)."""
        origin = run.request.origin
        channel = self._channels.get(origin.channel) if origin else None
        if origin is None or channel is None:
            return
        update = RunUpdate(
            run_id=run.run_id,
            name=run_name(run),
            status=run.progress.status,
            chat_id=origin.chat_id,
            thread_id=origin.thread_id,
            parent_run_id=run.request.parent_run_id,
            depth=run.request.depth,
            batch_id=run.delivery.batch_id,
            session_key=run.child_session_key,
            created_at=run.progress.created_at,
            task=run.request.task,
            model=run.request.model,
            started_at=run.progress.started_at,
            ended_at=run.progress.ended_at,
        )

        async def send() -> None:
            try:
                await channel.run_update(update)
            except Exception:  # a status display must never break a run
                logger.warning("run update not shown", extra={"run_id": run.run_id}, exc_info=True)

        self.spawn(send())

    async def link(self, notices: Notices, *, poll: float) -> None:
        """In a cluster: tell the other replicas of the runs that end here, and hear theirs."""
        self._notices, self._poll = notices, poll
        await notices.subscribe(RUN_ENDED, self.heard)

    def unlink(self) -> None:
        if self._notices is not None:
            self._notices.unsubscribe(RUN_ENDED)
            self._notices = None

    async def changed(self, run_id: str, run: RunRecord | None = None) -> None:
        """Re-read ``run_id`` (unless the caller gives its ``run`` as just written), publish
        it, count it when final, and wake :meth:`wait`."""
        if run is None:
            run = await self._runs.get(run_id)
        if run is not None:
            self.publish(run)
            if run.progress.finished:
                self._metrics.finished_run(run)
                if self._notices is not None:
                    self.spawn(self._notices.tell(RUN_ENDED, run_id))
        await self.heard(run_id)

    async def heard(self, run_id: str | None) -> None:
        """A run changed (None: maybe any run, after a gap in the notices): wake waiters."""
        async with self._finished:
            self._generation += 1
            self._finished.notify_all()

    @property
    def generation(self) -> int:
        """How many changes were told so far: read it before a look at the runs, then
        :meth:`wait_change` from it."""
        return self._generation

    async def wait_change(self, since: int, within: float) -> bool:
        """Wait until a change after ``since`` (a :attr:`generation`), at most ``within``
        seconds (in a cluster at most ``poll``: look again then); False when none came."""
        if self._poll is not None:
            within = min(within, self._poll)
        async with self._finished:
            try:
                async with asyncio.timeout(max(0.0, within)):
                    await self._finished.wait_for(lambda: self._generation != since)
            except TimeoutError:
                return False
            return True

    async def wait(self, run_id: str) -> RunRecord:
        """Wait until ``run_id`` has its final status; :class:`RunNotFoundError` if unknown."""
        async with self._finished:
            while True:
                run = await self._runs.get(run_id)
                if run is None:
                    raise RunNotFoundError(run_id)
                if run.progress.finished:
                    return run
                # In a cluster, a slow look too: a notice may have been lost.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._poll):
                        await self._finished.wait()

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` as a side task this feed tracks (and cancels on :meth:`close`)."""
        task = asyncio.ensure_future(coro)
        self._side_tasks.add(task)
        task.add_done_callback(self._side_tasks.discard)

    async def side_tasks_done(self) -> None:
        """Return once no side task runs (those it starts meanwhile included): the announces
        of stopped runs, and those that waited for their requester's turn."""
        while self._side_tasks:
            await asyncio.gather(*self._side_tasks, return_exceptions=True)

    async def close(self) -> None:
        """Cancel side tasks still running. Idempotent."""
        for task in list(self._side_tasks):
            task.cancel()
        await asyncio.gather(*self._side_tasks, return_exceptions=True)
