"""Which state database a configuration means, opened, migrated or inspected.

Without ``cluster.databaseUrl`` the state is SQLite at ``<stateDir>/herald.db`` (the
default: one process, :mod:`gateway.state.sqlite`); with it, PostgreSQL
(:mod:`gateway.state.postgres`), shared
by every replica. Everything that opens the state database goes through :func:`open_state`.
The PostgreSQL modules (and psycopg) are imported only when a configuration names one.
"""

from __future__ import annotations

import asyncio
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import quote

from gateway.constants import STATE_DB_NAME
from gateway.schema.state import StateConfig
from gateway.state.database import StateDB
from gateway.state.errors import StateError, StateUnavailableError
from gateway.state.schema import LATEST_VERSION
from gateway.state.sqlite import SqliteStateDB
from gateway.state.sqlite.schema import current_version

Backend = Literal["sqlite", "postgresql"]


@dataclass(frozen=True, slots=True)
class SchemaStatus:
    """Where the state database is and how far its schema is migrated."""

    backend: Backend
    #: The SQLite file, or the PostgreSQL URL with its password masked.
    location: str
    #: None: there is no database yet (SQLite: no file).
    version: int | None
    latest: int = LATEST_VERSION

    @property
    def pending(self) -> list[int]:
        """Versions ``herald run`` (or ``herald db migrate``) would apply."""
        return list(range((self.version or 0) + 1, self.latest + 1))

    @property
    def newer(self) -> bool:
        """The database was migrated by a newer Herald than this one."""
        return self.version is not None and self.version > self.latest


def backend_of(config: StateConfig) -> Backend:
    return "postgresql" if config.database_url is not None else "sqlite"


def sqlite_path(config: StateConfig) -> Path:
    return config.state_dir / STATE_DB_NAME


async def open_state(config: StateConfig, *, readonly: bool = False) -> StateDB:
    """The configured state database, opened (and, unless ``readonly``, migrated)."""
    url = config.database_url
    if url is None:
        return await SqliteStateDB.open(sqlite_path(config), readonly=readonly)
    from gateway.state.postgres import PgStateDB

    return await PgStateDB.connect(
        url.get_secret_value(),
        readonly=readonly,
        replica_id=config.replica_id,
        state_dir=config.state_dir,
    )


async def migrate_state(config: StateConfig) -> SchemaStatus:
    """Apply every pending migration (as ``herald run`` does at start); the status after."""
    db = await open_state(config)
    await db.close()
    return await schema_status(config)


async def schema_status(config: StateConfig) -> SchemaStatus:
    """The schema version of the configured database, without changing anything."""
    url = config.database_url
    if url is None:
        path = sqlite_path(config)
        version = await asyncio.to_thread(_sqlite_version, path)
        return SchemaStatus("sqlite", str(path), version)
    location = url.masked()
    version = await asyncio.to_thread(_pg_version, url.get_secret_value(), location, config)
    return SchemaStatus("postgresql", location, version)


async def database_reachable(db: StateDB) -> bool | None:
    """Whether a shared database answers now; None for SQLite (a local file, always there
    while the process runs)."""
    return await db.reachable()


def _sqlite_version(path: Path) -> int | None:
    if not path.exists():
        return None
    try:
        conn = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True)
        try:
            return current_version(conn)
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise StateError(f"cannot read {path}: {exc}") from exc


def _pg_version(url: str, location: str, config: StateConfig) -> int:
    import psycopg

    from gateway.state.postgres.connection import PgConnection
    from gateway.state.postgres.schema import current_version as pg_version

    name = f"herald:{config.replica_id}"
    try:
        conn = PgConnection.connect(url, application_name=name[:63], readonly=True)
    except psycopg.Error as exc:
        text = " ".join(str(exc).split())  # libpq's messages run over several lines
        secret = config.database_url
        for part in secret.secret_parts() if secret is not None else ():
            text = text.replace(part, "********")
        raise StateUnavailableError(f"state database {location}: {text}") from exc
    try:
        return pg_version(conn)
    finally:
        conn.close()
