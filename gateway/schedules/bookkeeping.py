"""A job's bookkeeping of its runs' ends, heard from the run lifecycle.

:func:`run_ended` is a :data:`gateway.subagents.announce.FinalWrite`: it runs inside the
transaction that makes a run final, on whichever replica the run ends. So each run of a job
is counted exactly once — a crash before the commit loses the run's end and its count
together, one after it keeps both — and nothing polls for ends:

- the run's final status becomes the job's ``last_status`` (the last *finished* run's: the
  job's ``last_run_id`` may be a later run still going);
- ``error`` and ``timeout`` count toward the job's consecutive failures, any other end
  starts the count again; at :data:`PAUSE_AFTER_FAILURES` the job is paused and its chat
  told, the notice queued in the outbox by the write that paused it (so once);
- an ``at`` job is deleted once its one occurrence's run is final.
"""

from __future__ import annotations

import logging
import time
from typing import Final

from gateway.schedules.store import JobRecord, count_end, delete_job
from gateway.state import Connection, OutboxRecord, RunRecord, insert_item

logger = logging.getLogger(__name__)

#: Consecutive failed runs after which a job is paused.
PAUSE_AFTER_FAILURES: Final = 5


def pause_notice(job: JobRecord) -> str:
    return (
        f"Scheduled job {job.job_id} is paused: its last {PAUSE_AFTER_FAILURES} runs failed "
        f"(the last one: {job.last_status}). Resume it with `herald schedules resume "
        f"{job.job_id}` once fixed."
    )


def run_ended(conn: Connection, run: RunRecord) -> bool:
    """Count ``run``'s end for its job (see the module docstring), in the transaction that
    made it final; True when a pause notice was queued in the outbox."""
    if run.request.job_id is None:
        return False
    counted = count_end(
        conn, run.request.job_id, run.progress.status, pause_after=PAUSE_AFTER_FAILURES
    )
    if counted is None:  # the job was deleted meanwhile
        return False
    job, paused = counted
    told = False
    # The notice goes where the job's runs announce: the chat its target named at the spawn.
    if paused and run.request.origin is not None:
        notice = OutboxRecord.to_origin(
            run.request.origin, pause_notice(job), time.time(), kind="notice"
        )
        insert_item(conn, notice)
        told = True
    if paused:
        logger.warning("scheduled job paused after failures", extra={"job": job.job_id})
    if job.trigger_kind == "at" and job.next_run_at is None:
        delete_job(conn, job.job_id)  # its one occurrence is settled
    return told
