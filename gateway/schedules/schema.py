"""The schedules' tables in the state database, and their migrations.

The state database runs these with its own (``gateway.state.schema.FEATURE_SCHEMAS`` names
this module), in the same transaction as that version's state statements; the SQL that
reads and writes the tables is :mod:`gateway.schedules.store`'s. Statements are written in
SQLite's words, as every state migration is (PostgreSQL runs them translated). This module
imports nothing of Herald's: the state layer loads it by name, below every feature.

Version 14 keeps scheduled jobs (``schedule_jobs``: trigger, target, next fire time, pause
and failure count), each job's occurrences (``schedule_occurrences``: ``ran``, ``missed`` or
``skipped``, one row per due time) and, on a run an occurrence started, ``runs.job_id`` and
``runs.occurrence_at``: one run per job and due time, ever (a unique index). An occurrence is
written with its run in the transaction that moves the job's ``next_run_at`` on. Never edit a
released migration: add the next version's statements under its number (after the state
has that version).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

_V14: Final = (
    """
    CREATE TABLE schedule_jobs (
        job_id TEXT PRIMARY KEY,
        declared INTEGER NOT NULL DEFAULT 0,
        trigger_kind TEXT NOT NULL CHECK (trigger_kind IN ('cron', 'every', 'at')),
        trigger_value TEXT NOT NULL,
        timezone TEXT NOT NULL,
        anchor REAL NOT NULL,
        agent_id TEXT NOT NULL,
        task TEXT NOT NULL,
        to_target TEXT NOT NULL,
        label TEXT,
        model TEXT,
        run_timeout_seconds REAL NOT NULL DEFAULT 0,
        enabled INTEGER NOT NULL DEFAULT 1,
        created_by TEXT,
        created_at REAL NOT NULL,
        next_run_at REAL,
        paused INTEGER NOT NULL DEFAULT 0,
        consecutive_failures INTEGER NOT NULL DEFAULT 0,
        last_run_at REAL,
        last_run_id TEXT,
        last_status TEXT
    ) WITHOUT ROWID
    """,
    "CREATE INDEX schedule_jobs_due ON schedule_jobs (next_run_at) WHERE next_run_at IS NOT NULL",
    "CREATE INDEX schedule_jobs_creator ON schedule_jobs (created_by)",
    """
    CREATE TABLE schedule_occurrences (
        job_id TEXT NOT NULL,
        occurrence_at REAL NOT NULL,
        outcome TEXT NOT NULL CHECK (outcome IN ('ran', 'missed', 'skipped')),
        run_id TEXT,
        recorded_at REAL NOT NULL,
        PRIMARY KEY (job_id, occurrence_at)
    ) WITHOUT ROWID
    """,
    "ALTER TABLE runs ADD COLUMN job_id TEXT",
    "ALTER TABLE runs ADD COLUMN occurrence_at REAL",
    "CREATE UNIQUE INDEX runs_occurrence ON runs (job_id, occurrence_at) WHERE job_id IS NOT NULL",
)

#: Version → the statements this feature adds to it.
MIGRATIONS: Final[Mapping[int, tuple[str, ...]]] = {14: _V14}
