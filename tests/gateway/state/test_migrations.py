"""The one migration source: released migrations stay what they were on both backends, and a
database an older Herald made upgrades to exactly the schema a fresh one gets.

The released migrations (versions 1-15, two hand-written sets before one source served
both) are kept verbatim in ``tests/gateway/state/legacy``; the databases "made by the old
code" are built from them, statement by statement, as that code's runners did.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from gateway.state import StateDB
from gateway.state.connection import Connection
from gateway.state.postgres.migrations import postgresql
from gateway.state.schema import FEATURE_SCHEMAS, LATEST_VERSION, STATE_MIGRATIONS, migrations
from tests import postgres
from tests.gateway.state.conftest import StateTarget
from tests.gateway.state.legacy import postgres_v15, sqlite_v15

RELEASED = len(sqlite_v15.MIGRATIONS)


def _words(sql: str) -> str:
    return " ".join(sql.split())


def test_released_migrations_are_unchanged_on_sqlite() -> None:
    assert migrations()[:RELEASED] == sqlite_v15.MIGRATIONS


def test_released_migrations_translate_to_their_postgresql_twins() -> None:
    translated = [[_words(postgresql(s)) for s in version] for version in migrations()[:RELEASED]]
    assert translated == [[_words(s) for s in version] for version in postgres_v15.MIGRATIONS]


def test_the_translation_reads_only_type_words() -> None:
    # A lower-case column called "text" or "real" is a name, not a type.
    sql = "CREATE TABLE t (text TEXT NOT NULL, real REAL, n INTEGER) WITHOUT ROWID"
    assert postgresql(sql) == (
        'CREATE TABLE t (text TEXT COLLATE "C" NOT NULL, real DOUBLE PRECISION, n BIGINT)'
    )
    index = "CREATE UNIQUE INDEX i ON t (a, b) WHERE a IS NOT NULL"
    assert postgresql(index) == (
        "CREATE UNIQUE INDEX i ON t (a NULLS FIRST, b NULLS FIRST) WHERE a IS NOT NULL"
    )


def _old_sqlite(path: Path, version: int) -> None:
    """A SQLite file as the released code left it at ``version``."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute(
            "CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)"
        )
        for number, migration in enumerate(sqlite_v15.MIGRATIONS[:version], start=1):
            conn.execute("BEGIN IMMEDIATE")
            for statement in migration:
                conn.execute(statement)
            conn.execute("INSERT INTO schema_version VALUES (?, ?)", (number, time.time()))
            conn.execute("COMMIT")
    finally:
        conn.close()


def _old_postgres(url: str, version: int) -> None:
    """A PostgreSQL schema as the released code left it at ``version``."""
    from procrastinate.schema import SchemaManager

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE schema_version"
            " (version BIGINT PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)"
        )
        for number, migration in enumerate(postgres_v15.MIGRATIONS[:version], start=1):
            with conn.transaction():
                for statement in migration:
                    if statement == sqlite_v15.JOB_QUEUE_SCHEMA:
                        conn.execute(SchemaManager.get_schema())
                    else:
                        conn.execute(statement)
                conn.execute("INSERT INTO schema_version VALUES (%s, %s)", (number, time.time()))


def _sqlite_schema(conn: Connection) -> list[tuple[Any, ...]]:
    rows = conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name")
    return [tuple(row) for row in rows]


def _postgres_schema(conn: Connection) -> list[tuple[Any, ...]]:
    """Columns (type, collation, default, position), indexes and constraints of the current
    schema, with its name left out (each test has a schema of its own)."""
    schema = conn.execute("SELECT current_schema()").fetchone()[0]
    columns = conn.execute(
        "SELECT table_name, ordinal_position, column_name, data_type, collation_name,"
        " is_nullable, column_default, is_identity FROM information_schema.columns"
        " WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position"
    )
    indexes = conn.execute(
        "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema()"
        " ORDER BY indexname"
    )
    constraints = conn.execute(
        "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint"
        " WHERE connamespace = current_schema()::regnamespace ORDER BY 1, 2"
    )
    rows = [("column", *row) for row in columns] + [("index", *row) for row in indexes]
    rows += [("constraint", *row) for row in constraints]
    return [tuple(str(v).replace(f"{schema}.", "") for v in row) for row in rows]


async def _schema(target: StateTarget, db: StateDB) -> list[tuple[Any, ...]]:
    return await db.read(_sqlite_schema if target.url is None else _postgres_schema)


@pytest.mark.parametrize("version", [6, 13, RELEASED])
async def test_a_database_the_released_code_made_upgrades_to_a_fresh_ones_schema(
    state_target: StateTarget, request: pytest.FixtureRequest, tmp_path: Path, version: int
) -> None:
    if state_target.url is None:
        _old_sqlite(state_target.path, version)
        fresh = StateTarget(state_target.backend, tmp_path / "fresh.db", None)
    else:
        _old_postgres(state_target.url, version)
        server: postgres.PostgresServer = request.getfixturevalue("postgres_server")
        fresh = StateTarget(state_target.backend, tmp_path / "fresh.db", server.fresh_url())
    upgraded = await state_target.open()
    try:
        new = await fresh.open()
        assert upgraded.schema_version == new.schema_version == LATEST_VERSION
        old_schema, fresh_schema = await _schema(state_target, upgraded), await _schema(fresh, new)
        # Not an empty comparison: the newest tables are in it.
        assert any("schedule_occurrences" in str(row) for row in fresh_schema)
        assert old_schema == fresh_schema
    finally:
        for db in fresh.opened:
            await db.close()


def test_the_schedules_own_their_tables_and_the_state_runs_them() -> None:
    from gateway.schedules import schema as schedules_schema

    assert schedules_schema.__name__ in FEATURE_SCHEMAS
    assert not STATE_MIGRATIONS[13]  # version 14 is the schedules' alone
    assert migrations()[13] == schedules_schema.MIGRATIONS[14]
    state_sql = " ".join(" ".join(version) for version in STATE_MIGRATIONS)
    assert "schedule_" not in state_sql


def test_a_feature_version_the_state_does_not_have_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gateway.schedules import schema as schedules_schema

    migrations.cache_clear()
    monkeypatch.setattr(schedules_schema, "MIGRATIONS", {LATEST_VERSION + 1: ("SELECT 1",)})
    try:
        with pytest.raises(ValueError, match=r"gateway\.schedules\.schema\.MIGRATIONS: version"):
            migrations()
    finally:
        monkeypatch.undo()
        migrations.cache_clear()
