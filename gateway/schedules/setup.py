"""The scheduler's life in the gateway: declared jobs synced at start (and again when a
reload changes them), the loop started once the channels are up (an occurrence's chat must
be reachable), closed before they stop.

A job's chat target resolves at each occurrence through the spawn door, against the channels
that run, to the chat's own session for the job's agent (created when nobody has talked
there yet), so the agent of that chat sees the run's completion on its next turn.

At start, targets stored before they were normalised are rewritten in their one written form
(a fix in place, on every start, rather than a schema migration: the rule is this version's
code, not SQL both databases could run), and the runs not started of jobs that are gone are
withdrawn (as again after a reload removes declared jobs).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator

from aiohttp import web

from gateway.metrics import METRICS
from gateway.parts.agent import TOOL_SERVICES
from gateway.parts.channels import channels_of
from gateway.parts.cluster import CLUSTER
from gateway.parts.state import STATE
from gateway.parts.timing import TIMING
from gateway.reload import SETTINGS, settings_of
from gateway.schedules.bookkeeping import run_ended
from gateway.schedules.scheduler import Scheduler
from gateway.schedules.service import Schedules
from gateway.schedules.store import JobRecord, JobsTable
from gateway.schedules.tool import SCHEDULE_JOBS
from gateway.sessions import accounts_of
from gateway.settings import HeraldSettings
from gateway.subagents.announce import FinalWrite
from gateway.subagents.setup import FINAL_WRITES, SUBAGENTS

logger = logging.getLogger(__name__)

SCHEDULER = web.AppKey("scheduler", Scheduler)
#: Scheduled jobs (set once the scheduler runs): the API, the chat commands, the agent's
#: tool and the web chat's page answer through it.
SCHEDULES = web.AppKey("schedules", Schedules)


def declared_jobs(settings: HeraldSettings, now: float) -> list[JobRecord]:
    """The file's jobs as rows (a new one's first fire time from ``now``)."""
    section = settings.schedules
    out = []
    for job in section.jobs:
        trigger = job.trigger(section.timezone)
        out.append(
            JobRecord(
                job_id=job.id,
                trigger_kind=trigger.kind,
                trigger_value=trigger.value,
                timezone=trigger.timezone,
                anchor=trigger.anchor,
                agent_id=job.agent_id or settings.routing.default_agent,
                task=job.task,
                to_target=job.to,
                created_at=now,
                declared=True,
                label=job.label,
                model=job.model,
                run_timeout_seconds=job.run_timeout_seconds,
                enabled=job.enabled,
                next_run_at=trigger.first(now),
            )
        )
    return out


async def bookkeeping_setup(app: web.Application) -> AsyncIterator[None]:
    """A job's bookkeeping of its runs' ends (:func:`run_ended`), handed to the sub-agents'
    setup, which comes next: it is in the final write of every run that ends from then on,
    those resumed at start included."""
    registered: tuple[FinalWrite, ...] = app.get(FINAL_WRITES, ())
    app[FINAL_WRITES] = (*registered, run_ended)
    yield


async def schedules_setup(app: web.Application) -> AsyncIterator[None]:
    """The scheduler, from after the channels start until before they stop."""
    db = app[STATE]
    jobs = JobsTable(db)
    await jobs.normalize_targets()  # each one rewritten is logged
    await jobs.sync_declared(declared_jobs(settings_of(app), time.time()))

    scheduler = Scheduler(
        jobs=jobs,
        door=app[SUBAGENTS].door,
        runs=db.runs,
        count=app[METRICS].schedule_occurrence,
        grace=lambda: settings_of(app).schedules.misfire_grace_seconds,
        recheck=app[TIMING].cluster_poll if app.get(CLUSTER) is not None else None,
    )
    app[SCHEDULER] = scheduler
    app[SCHEDULES] = service = Schedules(
        jobs=jobs,
        scheduler=scheduler,
        section=lambda: settings_of(app).schedules,
        agents=lambda: settings_of(app).routing.agents,
        default_agent=lambda: settings_of(app).routing.default_agent,
        enabled_channels=lambda: accounts_of(channels_of(app)),
        runs=app[SUBAGENTS].manager,
    )
    app[TOOL_SERVICES][SCHEDULE_JOBS] = service
    await service.withdraw_orphans()
    pending: set[asyncio.Task[None]] = set()

    async def resync() -> None:
        try:
            await jobs.sync_declared(declared_jobs(settings_of(app), time.time()))
            await service.withdraw_orphans()  # a removed job's runs not started: none runs
            scheduler.wake()
            logger.info("declared jobs reloaded")
        except Exception:
            logger.exception("reloading declared jobs failed")

    def reloaded(old: HeraldSettings, new: HeraldSettings) -> None:
        # The file's jobs take effect at once; their history and pause are kept.
        if old.schedules != new.schedules:
            task = asyncio.ensure_future(resync())
            pending.add(task)
            task.add_done_callback(pending.discard)

    holder = app[SETTINGS]
    holder.subscribe(reloaded)
    scheduler.start()
    try:
        yield
    finally:
        holder.unsubscribe(reloaded)
        await scheduler.close()
        await asyncio.gather(*pending, return_exceptions=True)
