"""Auto-archive of sessions on a schedule (the announce flow's last step).

A session's archive due time lives in the state database, so it survives restarts (seed
004's timers were lost on restart). :class:`ArchiveScheduler` keeps one APScheduler 3
``AsyncIOScheduler`` date job per pending session (memory job store, job id = session key,
UTC). At :meth:`ArchiveScheduler.start` it rebuilds from the database: sessions already
due are archived at once in one batch (:meth:`SessionStore.archive_many` — no scheduler job
for each of them), the rest get a job each. Jobs never expire as missed
(``misfire_grace_time=None``): a job that fires late, say after the machine slept, still
archives. Each archive is claimed in the state database before its rename, so when several
replicas (each with its own schedule) archive one session, one renames it; a cluster also
sweeps what fell due after each heartbeat (:meth:`ArchiveScheduler.take_over`).
``archiveAfterMinutes: 0`` disables the scheduler: nothing is scheduled or
archived by it (explicit archives, e.g. ``cleanup: "delete"``, still work through
:meth:`ArchiveScheduler.archive_now` or the store). A reload changes the delay through
:meth:`ArchiveScheduler.reconfigure`; turning auto-archive on rebuilds the schedule then.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.date import DateTrigger

from gateway.sessions import SessionNotFoundError, SessionStore
from gateway.state import RecordNotFoundError

log = logging.getLogger(__name__)

ArchivedCallback = Callable[[str, Path | None], None]
#: APScheduler's default logger is chatty at INFO for every job; keep it at WARNING.
_APS_LOGGER: Final = "apscheduler"


class ArchiveScheduler:
    """Archives sessions at their due time; call :meth:`start` inside the running loop.

    ``on_archived(key, path)`` is called after each archive it performs (path None when the
    transcript was already gone). ``clock`` returns epoch seconds.
    """

    def __init__(
        self,
        store: SessionStore,
        *,
        archive_after_minutes: float,
        on_archived: ArchivedCallback | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if archive_after_minutes < 0:
            raise ValueError("archive_after_minutes must be 0 (disabled) or more")
        self._store = store
        self._after = archive_after_minutes * 60.0
        self._on_archived = on_archived
        self._clock = clock
        self._scheduler = AsyncIOScheduler(timezone=dt.UTC)
        self._started = False
        self._stopped = False
        self._inflight: set[asyncio.Task[None]] = set()
        aps_log = logging.getLogger(_APS_LOGGER)
        if aps_log.level == logging.NOTSET:  # unless the operator configured it
            aps_log.setLevel(logging.WARNING)

    def __repr__(self) -> str:
        state = "stopped" if self._stopped else ("running" if self._started else "new")
        enabled = f"after={self._after / 60:g}m" if self.enabled else "disabled"
        return f"<ArchiveScheduler {state} {enabled} jobs={self.scheduled_count}>"

    @property
    def enabled(self) -> bool:
        return self._after > 0

    @property
    def scheduled_count(self) -> int:
        """Sessions waiting for their archive job."""
        return len(self._scheduler.get_jobs())

    def is_scheduled(self, key: str) -> bool:
        return self._scheduler.get_job(key) is not None

    async def start(self) -> int:
        """Rebuild the schedule from the database and start; return how many overdue
        sessions were archived at once. Disabled: does nothing and returns 0."""
        if self._started or self._stopped:
            return 0
        self._started = True
        self._scheduler.start()
        # Before anything else claims: archives a crash cut off between claim and record.
        for key, path in (await self._store.heal_archive_claims()).items():
            self._notify(key, path)
        if not self.enabled:
            log.info("auto-archive disabled (archiveAfterMinutes is 0)")
            return 0
        return await self._rebuild()

    async def reconfigure(self, archive_after_minutes: float) -> int:
        """Take a reloaded ``archiveAfterMinutes``; when that turns auto-archive on, rebuild
        the schedule from the database now. Returns how many overdue sessions it archived."""
        if archive_after_minutes < 0:
            raise ValueError("archive_after_minutes must be 0 (disabled) or more")
        was_enabled = self.enabled
        self._after = archive_after_minutes * 60.0
        if self.enabled and not was_enabled and self._started and not self._stopped:
            return await self._rebuild()
        return 0

    async def _rebuild(self) -> int:
        now = self._clock()
        # Overdue sessions in one batch, without a scheduler job each (after a long
        # downtime there may be thousands); the rest get a job each.
        results = await self._store.archive_due(now)
        for key, path in results.items():
            self._notify(key, path)
        pending = await self._store.db.sessions.archive_schedule(after=now)
        for key, due in pending:
            self._add_job(key, due)
        log.info(
            "auto-archive started: %d overdue archived, %d scheduled", len(results), len(pending)
        )
        return len(results)

    async def take_over(self, cutoff: float) -> int:
        """In a cluster, after each heartbeat: finish the archives replicas dead at
        ``cutoff`` claimed and never recorded, and archive what is due (a session a dead
        replica scheduled has no job here). The claims keep each archive to one replica.
        Returns how many it archived."""
        if self._stopped or not self._started:
            return 0
        results = await self._store.heal_archive_claims(own=False, cutoff=cutoff)
        if self.enabled:
            results |= await self._store.archive_due(self._clock())
        for key, path in results.items():
            self._remove_job(key)
            self._notify(key, path)
        return len(results)

    async def schedule(
        self, key: str, due_at: float | None = None, *, recorded: bool = False
    ) -> float | None:
        """Archive ``key`` at ``due_at`` (default: now + archiveAfterMinutes); persisted,
        unless ``recorded`` says the caller already wrote ``due_at`` to the session's row
        (a run's end writes it with the run's final status).

        Returns the due time, or None when auto-archive is disabled. Scheduling again
        replaces the earlier time.
        """
        if not self.enabled or self._stopped:
            return None
        due = self._clock() + self._after if due_at is None else due_at
        if not recorded:
            await self._store.db.sessions.set_archive_due(key, due)
        self._add_job(key, due)
        return due

    async def cancel(self, key: str) -> None:
        """Forget ``key``'s archive time (job and database)."""
        self._remove_job(key)
        with contextlib.suppress(RecordNotFoundError):
            await self._store.db.sessions.set_archive_due(key, None)

    async def archive_now(self, key: str) -> Path | None:
        """Archive ``key`` immediately (``cleanup: "delete"``), dropping any scheduled job."""
        self._remove_job(key)
        path = await self._store.archive(key)
        self._notify(key, path)
        return path

    async def shutdown(self) -> None:
        """Stop the scheduler and wait for archives in progress. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        if self._scheduler.running:
            self._scheduler.shutdown(wait=False)
        # AsyncIOScheduler shuts down in a loop callback; let it run, then its cancelled
        # job wrappers settle.
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        if self._inflight:
            await asyncio.gather(*self._inflight, return_exceptions=True)

    # -- internals --------------------------------------------------------------------------

    def _add_job(self, key: str, due: float) -> None:
        self._scheduler.add_job(
            self._run_job,
            trigger=DateTrigger(run_date=dt.datetime.fromtimestamp(due, dt.UTC)),
            args=[key],
            id=key,
            name=f"archive {key}",
            replace_existing=True,
            misfire_grace_time=None,
            coalesce=True,
        )

    def _remove_job(self, key: str) -> None:
        with contextlib.suppress(JobLookupError):
            self._scheduler.remove_job(key)

    async def _run_job(self, key: str) -> None:
        # The archive runs in a task of its own so a scheduler shutdown, which cancels job
        # wrappers, cannot stop it halfway between the rename and the database update.
        task = asyncio.create_task(self._archive(key))
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            # The scheduler is shutting down; shutdown() waits for the archive itself, and a
            # job that raises here would be logged as an error with a traceback.
            return

    async def _archive(self, key: str) -> None:
        try:
            path = await self._store.archive(key)
        except SessionNotFoundError:
            log.warning("auto-archive: session %s no longer exists", key)
            return
        except Exception:
            log.exception("auto-archive of %s failed", key)
            return
        self._notify(key, path)

    def _notify(self, key: str, path: Path | None) -> None:
        if self._on_archived is None:
            return
        try:
            self._on_archived(key, path)
        except Exception:
            log.exception("on_archived callback failed for %s", key)
