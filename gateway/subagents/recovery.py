"""Picking up what a previous process left: runs and archives a stop or a crash cut off.

At start, once the channels are up: queued runs are queued again; running runs resume from
their transcript (or, with ``agent.subagents.onRestart: "fail"``, are announced as
``interrupted``); runs that were announcing finish their announce. Finished runs whose child
session was neither archived nor scheduled get their archive step.

In a cluster (a queue shared by replicas) an unfinished run belongs to its job, not to the
replica that starts: it may be running on a live replica right now. Recovery then leaves
runs to the queue (:meth:`gateway.subagents.queueing.RunQueue.recover`): a dead replica's
jobs are taken over by the stalled-job check, and runs with no job get one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from gateway.reload import SettingsHolder
from gateway.state import RunStatus, StateDB
from gateway.subagents.announce import Announcer
from gateway.subagents.manager import RunManager

logger = logging.getLogger(__name__)

UNFINISHED: tuple[RunStatus, ...] = ("queued", "running", "announcing")


async def recover(
    *,
    holder: SettingsHolder,
    db: StateDB,
    manager: RunManager,
    announcer: Announcer,
    clock: Callable[[], float] = time.time,
) -> dict[str, int]:
    """Queue again every unfinished run and settle unarchived finished ones; the counts."""
    counts = {"queued": 0, "resumed": 0, "interrupted": 0, "announcing": 0}
    on_restart = holder.current.agent.subagents.on_restart
    runs = await db.runs.list(statuses=UNFINISHED, oldest_first=True)
    if manager.queue.shared:
        await manager.recover(runs)
        counts = {"left_to_their_jobs": len(runs)}
        runs = []
    for run in runs:
        if run.progress.status == "running" and on_restart == "fail":
            await db.runs.update(
                run.run_id, status="announcing", outcome="interrupted", ended_at=clock()
            )
            counts["interrupted"] += 1
        elif run.progress.status == "running":
            counts["resumed"] += 1
        else:
            counts[run.progress.status] += 1
        manager.submit(run.run_id)
    counts["archive_settled"] = await settle_archives(holder, db, announcer)
    if any(counts.values()):
        logger.info("sub-agent runs recovered", extra=counts)
    return counts


async def settle_archives(holder: SettingsHolder, db: StateDB, announcer: Announcer) -> int:
    """Give finished runs whose child was never archived or scheduled their archive step
    (also after a reload turns auto-archive on); returns how many."""
    keeps_forever = holder.current.agent.subagents.archive_after_minutes == 0
    settled = 0
    for run in await db.runs.unarchived_finished():
        if run.request.cleanup == "keep" and keeps_forever:
            continue
        await announcer.settle_archive(run)
        settled += 1
    return settled
