"""The state schema in SQLite: the migrations applied at open, in order, each with its
``schema_version`` row in one transaction (SQLite's DDL is transactional), so a failed
migration leaves the previous version intact."""

from __future__ import annotations

import logging
import sqlite3
import time
from pathlib import Path

from gateway.state.errors import SchemaError
from gateway.state.schema import LATEST_VERSION, migrations

log = logging.getLogger(__name__)


def current_version(conn: sqlite3.Connection) -> int:
    """The schema version of the file ``conn`` is on (0: none applied yet)."""
    exists = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
    ).fetchone()
    if exists is None:
        return 0
    row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
    return int(row[0] or 0)


def check_current(conn: sqlite3.Connection, path: Path) -> int:
    """The schema version, which must be this code's (a read-only open migrates nothing)."""
    version = current_version(conn)
    if version != LATEST_VERSION:
        raise SchemaError(
            f"{path} has schema version {version}; this Herald reads "
            f"version {LATEST_VERSION} (start the daemon once to migrate)"
        )
    return version


def migrate(conn: sqlite3.Connection, path: Path) -> int:
    """Bring the file to :data:`LATEST_VERSION`; returns it. A file newer than this Herald
    raises :class:`SchemaError` (nothing is changed)."""
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_version "
        "(version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)"
    )
    current = current_version(conn)
    if current > LATEST_VERSION:
        raise SchemaError(
            f"{path} has schema version {current}, newer than this Herald ({LATEST_VERSION})"
        )
    for version in range(current + 1, LATEST_VERSION + 1):
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in migrations()[version - 1]:
                conn.execute(statement)
            conn.execute(
                "INSERT INTO schema_version (version, applied_at) VALUES (?, ?)",
                (version, time.time()),
            )
        except sqlite3.Error as exc:
            conn.execute("ROLLBACK")
            raise SchemaError(f"{path}: migration to version {version} failed: {exc}") from exc
        conn.execute("COMMIT")
        log.info("state database %s: migrated to schema version %d", path, version)
    return LATEST_VERSION
