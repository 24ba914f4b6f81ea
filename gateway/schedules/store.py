"""Jobs and occurrences in the state database (``schedule_jobs``, ``schedule_occurrences``).

Rows are :class:`JobRecord` (fields = columns); a job's ``to_target`` is a chat target in
its one written form (:func:`gateway.sessions.normalize_target`), so a chat's jobs are found
by comparing text: those aimed at the chat ``slack:C1`` are ``slack:C1`` and
``slack:C1/<thread>``. The one write that matters is
:func:`advance`: it records a job's due occurrences and moves its ``next_run_at`` on, but
only from the ``next_run_at`` the caller read — in a cluster, or after a restart, exactly one
writer wins each due time; the others raise :class:`OccurrenceTakenError` and roll back.
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import Any, Final, Literal

from gateway.schema.targets import ChatTargetError, normalize_target
from gateway.schema.triggers import Trigger, TriggerKind
from gateway.state import RecordConflictError, StateDB, StateError
from gateway.state.connection import Connection

logger = logging.getLogger(__name__)

Outcome = Literal["ran", "missed", "skipped"]
#: What a job's runs ended as, for the failure count: these count as failures.
FAILED_STATUSES: Final = frozenset({"error", "timeout"})


class OccurrenceTakenError(StateError):
    """Another writer (a replica, an earlier pass) already recorded this due time."""


@dataclass(frozen=True, slots=True)
class JobRecord:
    """A scheduled job; fields are the ``schedule_jobs`` columns."""

    job_id: str
    trigger_kind: TriggerKind
    trigger_value: str
    timezone: str
    anchor: float
    agent_id: str
    task: str
    to_target: str
    created_at: float
    declared: bool = False
    label: str | None = None
    model: str | None = None
    run_timeout_seconds: float = 0
    enabled: bool = True
    #: The chat session whose agent created the job (its ``maxPerChat`` and its scope).
    created_by: str | None = None
    next_run_at: float | None = None
    paused: bool = False
    consecutive_failures: int = 0
    last_run_at: float | None = None
    last_run_id: str | None = None
    #: The final status of the job's last finished run (``last_run_id`` may still run);
    #: None until one finished.
    last_status: str | None = None

    @property
    def trigger(self) -> Trigger:
        return Trigger(self.trigger_kind, self.trigger_value, self.timezone, self.anchor)


@dataclass(frozen=True, slots=True)
class OccurrenceRecord:
    job_id: str
    occurrence_at: float
    outcome: Outcome
    recorded_at: float
    run_id: str | None = None


JOB_COLUMNS: Final = tuple(f.name for f in fields(JobRecord))
_SELECT: Final = f"SELECT {', '.join(JOB_COLUMNS)} FROM schedule_jobs"
#: What a declared job's definition is: a change to one of these updates the row.
DEFINITION: Final = (
    "trigger_kind",
    "trigger_value",
    "timezone",
    "agent_id",
    "task",
    "to_target",
    "label",
    "model",
    "run_timeout_seconds",
    "enabled",
)


def _job(row: Any) -> JobRecord:
    values = {name: row[name] for name in JOB_COLUMNS}
    for name in ("declared", "enabled", "paused"):
        values[name] = bool(values[name])
    return JobRecord(**values)


def _values(job: JobRecord) -> list[Any]:
    return [int(v) if isinstance(v, bool) else v for v in (getattr(job, n) for n in JOB_COLUMNS)]


class JobsTable:
    """Data access for scheduled jobs over a :class:`StateDB`."""

    def __init__(self, db: StateDB) -> None:
        self._db = db

    async def insert(self, job: JobRecord) -> JobRecord:
        """Insert a new job; an existing id raises :class:`RecordConflictError`."""
        marks = ", ".join("?" for _ in JOB_COLUMNS)
        sql = f"INSERT INTO schedule_jobs ({', '.join(JOB_COLUMNS)}) VALUES ({marks})"

        def write(conn: Connection) -> JobRecord:
            try:
                conn.execute(sql, _values(job))
            except RecordConflictError as exc:  # the driver's names the table, not the job
                raise RecordConflictError("schedule_jobs", job.job_id) from exc
            return job

        return await self._db.write(write)

    async def sync_declared(self, jobs: Iterable[JobRecord]) -> None:
        """Make the declared jobs those of the file: new ones inserted, changed definitions
        updated (a changed trigger starts from its next fire time), removed ones deleted.
        Pause, failures and history are kept."""
        wanted = {job.job_id: job for job in jobs}

        def write(conn: Connection) -> None:
            have = {row["job_id"]: _job(row) for row in conn.execute(_SELECT).fetchall()}
            for job_id, kept in have.items():
                if kept.declared and job_id not in wanted:
                    delete_job(conn, job_id)
            for job_id, job in wanted.items():
                old = have.get(job_id)
                if old is None:
                    marks = ", ".join("?" for _ in JOB_COLUMNS)
                    conn.execute(
                        f"INSERT INTO schedule_jobs ({', '.join(JOB_COLUMNS)}) VALUES ({marks})",
                        _values(job),
                    )
                    continue
                changed = {
                    n: getattr(job, n) for n in DEFINITION if getattr(old, n) != getattr(job, n)
                }
                if not changed and old.declared:
                    continue
                changed["declared"] = True
                if old.trigger != job.trigger or not old.declared:
                    changed["next_run_at"] = job.next_run_at
                names = list(changed)
                conn.execute(
                    f"UPDATE schedule_jobs SET {', '.join(f'{n} = ?' for n in names)}"
                    " WHERE job_id = ?",
                    [*(int(v) if isinstance(v, bool) else v for v in changed.values()), job_id],
                )

        await self._db.write(write)

    async def get(self, job_id: str) -> JobRecord | None:
        def read(conn: Connection) -> JobRecord | None:
            row = conn.execute(f"{_SELECT} WHERE job_id = ?", (job_id,)).fetchone()
            return _job(row) if row is not None else None

        return await self._db.read(read)

    async def list(self, *, created_by: str | None = None) -> builtins.list[JobRecord]:
        """Every job (or those ``created_by`` one chat session), by id."""
        where, params = ("WHERE created_by = ?", [created_by]) if created_by else ("", [])

        def read(conn: Connection) -> builtins.list[JobRecord]:
            rows = conn.execute(f"{_SELECT} {where} ORDER BY job_id", params).fetchall()
            return [_job(row) for row in rows]

        return await self._db.read(read)

    async def of_chat(self, session_key: str, chat: str | None) -> builtins.list[JobRecord]:
        """The jobs created by ``session_key`` or aimed at ``chat`` (or one of its threads),
        by id: a page or a command asks after each turn, so the database picks those rows,
        not this process from every job."""
        where, params = "created_by = ?", [session_key]
        if chat is not None:
            aimed, marks = _aimed_at(chat)
            where, params = f"created_by = ? OR {aimed}", [session_key, *marks]

        def read(conn: Connection) -> builtins.list[JobRecord]:
            rows = conn.execute(f"{_SELECT} WHERE {where} ORDER BY job_id", params).fetchall()
            return [_job(row) for row in rows]

        return await self._db.read(read)

    async def insert_for_chat(self, job: JobRecord, chat: str, limit: int) -> int | None:
        """Insert ``job``, an agent's job for ``chat``, unless agents created ``limit`` jobs
        for that chat (its threads included) already: then how many they did. None when
        inserted; an id that exists raises :class:`RecordConflictError`."""
        aimed, marks = _aimed_at(chat)
        count_sql = f"SELECT COUNT(*) FROM schedule_jobs WHERE created_by IS NOT NULL AND ({aimed})"
        columns = ", ".join(JOB_COLUMNS)
        insert = (
            f"INSERT INTO schedule_jobs ({columns}) VALUES ({', '.join('?' for _ in JOB_COLUMNS)})"
        )

        def write(conn: Connection) -> int | None:
            # Counted in the insert's transaction: on SQLite writes take turns, so two agents
            # creating at once cannot both take the last place.
            count = int(conn.execute(count_sql, marks).fetchone()[0])
            if count >= limit:
                return count
            try:
                conn.execute(insert, _values(job))
            except RecordConflictError as exc:
                raise RecordConflictError("schedule_jobs", job.job_id) from exc
            return None

        return await self._db.write(write)

    async def queued_runs(self, job_id: str | None = None) -> builtins.list[str]:
        """The runs of ``job_id`` that have not started; with None, those of every job that
        no longer exists (deleted while its run waited, then a stop came first)."""
        if job_id is not None:
            sql, params = "SELECT run_id FROM runs WHERE job_id = ? AND status = 'queued'", [job_id]
        else:
            sql, params = (
                "SELECT r.run_id FROM runs r WHERE r.status = 'queued' AND r.job_id IS NOT NULL"
                " AND NOT EXISTS (SELECT 1 FROM schedule_jobs j WHERE j.job_id = r.job_id)",
                [],
            )

        def read(conn: Connection) -> builtins.list[str]:
            return [str(row[0]) for row in conn.execute(f"{sql} ORDER BY run_id", params)]

        return await self._db.read(read)

    async def normalize_targets(self) -> int:
        """Rewrite each job's ``to_target`` in the one written form of a chat target (rows
        stored before targets were normalised, such as one padded with spaces, which its
        chat's ``/schedules`` did not find); returns how many changed. A target that does
        not parse is left for ``herald doctor`` to report."""

        def write(conn: Connection) -> int:
            changed = 0
            for row in conn.execute("SELECT job_id, to_target FROM schedule_jobs").fetchall():
                try:
                    written = normalize_target(row[1])
                except ChatTargetError:
                    continue
                if written != row[1]:
                    conn.execute(
                        "UPDATE schedule_jobs SET to_target = ? WHERE job_id = ?",
                        (written, row[0]),
                    )
                    logger.warning(
                        "scheduled job's target rewritten",
                        extra={"job": row[0], "target": written},
                    )
                    changed += 1
            return changed

        return await self._db.write(write)

    async def due(self, now: float) -> builtins.list[JobRecord]:
        """Jobs whose next fire time has come (not paused, enabled), soonest first."""

        def read(conn: Connection) -> builtins.list[JobRecord]:
            rows = conn.execute(
                f"{_SELECT} WHERE next_run_at IS NOT NULL AND next_run_at <= ?"
                " AND paused = 0 AND enabled = 1 ORDER BY next_run_at",
                (now,),
            ).fetchall()
            return [_job(row) for row in rows]

        return await self._db.read(read)

    async def next_due_at(self) -> float | None:
        def read(conn: Connection) -> float | None:
            row = conn.execute(
                "SELECT MIN(next_run_at) FROM schedule_jobs"
                " WHERE next_run_at IS NOT NULL AND paused = 0 AND enabled = 1"
            ).fetchone()
            return float(row[0]) if row is not None and row[0] is not None else None

        return await self._db.read(read)

    async def set_paused(
        self, job_id: str, paused: bool, *, next_run_at: float | None = None
    ) -> JobRecord | None:
        """Pause or resume (resuming clears the failure count, and moves the next fire time
        to ``next_run_at`` when given); None for no such job."""
        moved = ", next_run_at = ?" if next_run_at is not None else ""
        params: list[Any] = [int(paused), int(paused)]
        params += [next_run_at] if next_run_at is not None else []

        def write(conn: Connection) -> JobRecord | None:
            rows = conn.execute(
                "UPDATE schedule_jobs SET paused = ?, consecutive_failures ="
                f" CASE WHEN ? = 1 THEN consecutive_failures ELSE 0 END{moved} WHERE job_id = ?"
                f" RETURNING {', '.join(JOB_COLUMNS)}",
                [*params, job_id],
            ).fetchall()
            return _job(rows[0]) if rows else None

        return await self._db.write(write)

    async def delete(self, job_id: str) -> bool:
        def write(conn: Connection) -> bool:
            return delete_job(conn, job_id)

        return await self._db.write(write)

    async def record(
        self,
        job: JobRecord,
        occurrences: builtins.list[tuple[float, Outcome]],
        next_run_at: float | None,
        now: float,
    ) -> None:
        """Record occurrences that started no run and move the job on (see :func:`advance`)."""

        def write(conn: Connection) -> None:
            advance(conn, job, occurrences, next_run_at, now, run_id=None)

        await self._db.write(write)

    async def occurrences(self, job_id: str, *, limit: int = 20) -> builtins.list[OccurrenceRecord]:
        """The job's latest occurrences, newest first."""

        def read(conn: Connection) -> builtins.list[OccurrenceRecord]:
            rows = conn.execute(
                "SELECT job_id, occurrence_at, outcome, recorded_at, run_id"
                " FROM schedule_occurrences WHERE job_id = ?"
                " ORDER BY occurrence_at DESC LIMIT ?",
                (job_id, limit),
            ).fetchall()
            return [OccurrenceRecord(*tuple(row)) for row in rows]

        return await self._db.read(read)


def advance(
    conn: Connection,
    job: JobRecord,
    occurrences: list[tuple[float, Outcome]],
    next_run_at: float | None,
    now: float,
    *,
    run_id: str | None,
) -> None:
    """In the caller's transaction: record ``occurrences`` (the ``ran`` one with
    ``run_id``) and move the job's ``next_run_at`` on — only from the value ``job`` was read
    with, else :class:`OccurrenceTakenError` (the transaction rolls back)."""
    assignments = "next_run_at = ?"
    params: list[Any] = [next_run_at]
    if run_id is not None:
        ran = max(at for at, outcome in occurrences if outcome == "ran")
        assignments += ", last_run_at = ?, last_run_id = ?"
        params += [ran, run_id]
    cursor = conn.execute(
        f"UPDATE schedule_jobs SET {assignments}"
        " WHERE job_id = ? AND next_run_at = ? AND paused = 0",
        [*params, job.job_id, job.next_run_at],
    )
    if cursor.rowcount != 1:
        raise OccurrenceTakenError(f"job {job.job_id!r}: due time {job.next_run_at} was taken")
    for at, outcome in occurrences:
        conn.execute(
            "INSERT INTO schedule_occurrences (job_id, occurrence_at, outcome, run_id,"
            " recorded_at) VALUES (?, ?, ?, ?, ?)",
            (job.job_id, at, outcome, run_id if outcome == "ran" else None, now),
        )


def record_run_now(conn: Connection, job_id: str, at: float, run_id: str) -> None:
    """In the run's transaction: an occurrence started by hand at ``at`` (the schedule's
    next fire time stays as it was)."""
    cursor = conn.execute(
        "UPDATE schedule_jobs SET last_run_at = ?, last_run_id = ? WHERE job_id = ?",
        (at, run_id, job_id),
    )
    if cursor.rowcount != 1:  # deleted meanwhile: no run of it starts (the write rolls back)
        raise OccurrenceTakenError(f"job {job_id!r} was deleted")
    conn.execute(
        "INSERT INTO schedule_occurrences (job_id, occurrence_at, outcome, run_id, recorded_at)"
        " VALUES (?, ?, 'ran', ?, ?)",
        (job_id, at, run_id, at),
    )


def count_end(
    conn: Connection, job_id: str, status: str, *, pause_after: int
) -> tuple[JobRecord, bool] | None:
    """In the write that makes one of the job's runs final: ``status`` becomes the job's
    ``last_status`` and counts toward its consecutive failures (any other final status
    starts the count again), pausing it at ``pause_after``. The job as written and whether
    this write paused it; None when the job is gone."""
    failed = status in FAILED_STATUSES
    rows = conn.execute(
        "UPDATE schedule_jobs SET last_status = ?,"
        " consecutive_failures = CASE WHEN ? = 1 THEN consecutive_failures + 1 ELSE 0 END"
        f" WHERE job_id = ? RETURNING {', '.join(JOB_COLUMNS)}",
        (status, int(failed), job_id),
    ).fetchall()
    if not rows:
        return None
    counted = _job(rows[0])
    if failed and counted.consecutive_failures >= pause_after and not counted.paused:
        conn.execute("UPDATE schedule_jobs SET paused = 1 WHERE job_id = ?", (job_id,))
        return _job_with(counted, paused=True), True
    return counted, False


def _aimed_at(chat: str) -> tuple[str, list[str]]:
    """The condition (and its values) of a job aimed at ``chat`` or one of its threads: its
    target is the chat, or sorts between ``<chat>/`` and ``<chat>0`` (``0`` follows ``/``
    in byte order, which both databases use for this column: SQLite's BINARY, PostgreSQL's
    ``COLLATE "C"``), with no ``LIKE`` whose wildcards a client id could hold."""
    return (
        "(to_target = ? OR (to_target > ? AND to_target < ?))",
        [chat, f"{chat}/", f"{chat}0"],
    )


def delete_job(conn: Connection, job_id: str) -> bool:
    """In the caller's transaction: the job and its occurrences."""
    conn.execute("DELETE FROM schedule_occurrences WHERE job_id = ?", (job_id,))
    return conn.execute("DELETE FROM schedule_jobs WHERE job_id = ?", (job_id,)).rowcount == 1


def _job_with(job: JobRecord, **changes: Any) -> JobRecord:
    values = {name: getattr(job, name) for name in JOB_COLUMNS}
    values.update(changes)
    return JobRecord(**values)
