"""The state schema on PostgreSQL: the migrations of :mod:`gateway.state.schema`, in
PostgreSQL's words (:func:`gateway.state.postgres.migrations.postgresql`), applied under an
advisory lock.

Replicas may start together: each takes the same session-level advisory lock before it
reads the schema version, so exactly one applies a missing version and the others, once
they hold the lock, find nothing left to do. Each version is one transaction with its
``schema_version`` row (PostgreSQL's DDL is transactional, as SQLite's is).
"""

from __future__ import annotations

import logging
import time
from typing import Final

from gateway.state.errors import SchemaError, StateError, StateUnavailableError
from gateway.state.postgres.connection import PgConnection
from gateway.state.postgres.migrations import postgresql
from gateway.state.schema import JOB_QUEUE_SCHEMA, LATEST_VERSION, migrations

log = logging.getLogger(__name__)

#: The advisory lock key of schema migrations: "HERALD" in ASCII, then 1 (a signed int64
#: that nothing else of Herald's uses).
MIGRATION_LOCK: Final = 0x4845_5241_4C44_0001

_VERSION_TABLE: Final = (
    "CREATE TABLE IF NOT EXISTS schema_version"
    " (version BIGINT PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)"
)


def current_version(conn: PgConnection) -> int:
    """The schema version of the database ``conn`` is on (0: none applied yet)."""
    exists = conn.execute_native("SELECT to_regclass('schema_version') IS NOT NULL")
    if not exists or not exists[0][0]:
        return 0
    rows = conn.execute_native("SELECT MAX(version) FROM schema_version")
    return int(rows[0][0] or 0)


def check_current(conn: PgConnection, location: str) -> int:
    """The schema version, which must be this code's (a read-only open migrates nothing)."""
    version = current_version(conn)
    if version != LATEST_VERSION:
        raise SchemaError(
            f"{location} has schema version {version}; this Herald reads "
            f"version {LATEST_VERSION} (start the daemon once to migrate)"
        )
    return version


def migrate(conn: PgConnection, location: str) -> int:
    """Bring the database to :data:`LATEST_VERSION` under the migration lock; returns it.

    A database newer than this Herald raises :class:`SchemaError` (nothing is changed).
    """
    if not conn.execute_native("SELECT pg_try_advisory_lock(%s)", [MIGRATION_LOCK])[0][0]:
        log.info("state database %s: waiting for another replica's migration", location)
        conn.execute_native("SELECT pg_advisory_lock(%s)", [MIGRATION_LOCK])
    try:
        conn.execute_native(_VERSION_TABLE)
        current = current_version(conn)
        if current > LATEST_VERSION:
            raise SchemaError(
                f"{location} has schema version {current}, newer than this Herald "
                f"({LATEST_VERSION})"
            )
        for version in range(current + 1, LATEST_VERSION + 1):
            _apply(conn, location, version)
    finally:
        if not conn.closed:
            conn.execute_native("SELECT pg_advisory_unlock(%s)", [MIGRATION_LOCK])
    return LATEST_VERSION


def _apply(conn: PgConnection, location: str, version: int) -> None:
    conn.execute_native("BEGIN")
    try:
        for statement in migrations()[version - 1]:
            if statement == JOB_QUEUE_SCHEMA:
                _apply_job_queue_schema(conn)
                continue
            conn.execute_native(postgresql(statement))
        conn.execute_native(
            "INSERT INTO schema_version (version, applied_at) VALUES (%s, %s)",
            [version, time.time()],
        )
        conn.execute_native("COMMIT")
    except BaseException as exc:
        if conn.closed:
            raise  # the connection is gone: the database is unavailable, not the schema bad
        conn.execute_native("ROLLBACK")
        if isinstance(exc, StateError) and not isinstance(exc, StateUnavailableError):
            raise SchemaError(f"{location}: migration to version {version} failed: {exc}") from exc
        raise
    log.info("state database %s: migrated to schema version %d", location, version)


def _apply_job_queue_schema(conn: PgConnection) -> None:
    """Procrastinate's schema, unless its tables exist (its ``apply_schema`` is not
    idempotent: a database procrastinate was set up in by hand keeps what it has)."""
    exists = conn.execute_native("SELECT to_regclass('procrastinate_jobs') IS NOT NULL")
    if exists and exists[0][0]:
        return
    from procrastinate.schema import SchemaManager

    # Without parameters: the schema is many statements, and its '%' are literal.
    conn.execute_native(SchemaManager.get_schema())
