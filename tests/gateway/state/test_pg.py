"""What the PostgreSQL backend adds to the state database's promises: replicas that start
together migrate once; concurrent writes of several replicas each behave as if alone; a
lost database is reported, then used again when it returns; the password stays secret."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from gateway.state import ConstraintError, SqliteStateDB, StateError, StateUnavailableError
from gateway.state.connection import Connection
from gateway.state.postgres import PgStateDB
from gateway.state.postgres.schema import MIGRATION_LOCK
from gateway.state.schema import LATEST_VERSION
from tests.postgres import PostgresServer

pytestmark = pytest.mark.postgres


async def test_replicas_starting_together_migrate_once(pg_url: str, tmp_path: Path) -> None:
    replicas = await asyncio.gather(
        *(PgStateDB.connect(pg_url, replica_id=f"r{n}", state_dir=tmp_path) for n in range(5))
    )
    try:
        assert {db.schema_version for db in replicas} == {LATEST_VERSION}
        rows = await replicas[0].read(
            lambda c: c.execute("SELECT version FROM schema_version ORDER BY version").fetchall()
        )
        assert [row[0] for row in rows] == list(range(1, LATEST_VERSION + 1))
        with psycopg.connect(pg_url) as admin:  # the lock was given back
            locks = admin.execute(
                "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = %s",
                [MIGRATION_LOCK & 0xFFFFFFFF],
            ).fetchone()
            assert locks is not None
            assert locks[0] == 0
    finally:
        await asyncio.gather(*(db.close() for db in replicas))


async def test_concurrent_read_modify_writes_of_two_replicas_lose_nothing(
    pg_url: str, tmp_path: Path
) -> None:
    one = await PgStateDB.connect(pg_url, replica_id="one", state_dir=tmp_path)
    two = await PgStateDB.connect(pg_url, replica_id="two", state_dir=tmp_path)
    try:
        await one.write(lambda c: c.execute("CREATE TABLE counter (n INTEGER NOT NULL)"))
        await one.write(lambda c: c.execute("INSERT INTO counter VALUES (0)"))

        def increment(conn: Connection) -> None:
            # Read, then write what was read plus one: the pattern of a run's completion.
            n = conn.execute("SELECT n FROM counter").fetchone()[0]
            conn.execute("UPDATE counter SET n = ?", (n + 1,))

        await asyncio.gather(*(db.write(increment) for _ in range(40) for db in (one, two)))
        total = await one.read(lambda c: c.execute("SELECT n FROM counter").fetchone()[0])
        assert total == 80
    finally:
        await one.close()
        await two.close()


def _as_user(url: str, user: str) -> str:
    parts = urlsplit(url)
    netloc = f"{user}:pw-{user}-secret@{parts.hostname}:{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


async def test_a_lost_database_is_reported_then_used_again(
    postgres_server: PostgresServer, pg_url: str, tmp_path: Path
) -> None:
    user = f"u{abs(hash(pg_url)) % 10**8}"
    admin_url = postgres_server.admin_url()
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {user} LOGIN")
        schema = pg_url.rsplit("%3D", 1)[1]
        admin.execute(f"GRANT ALL ON SCHEMA {schema} TO {user}")
    url = _as_user(pg_url, user)
    db = await PgStateDB.connect(url, replica_id="lost", state_dir=tmp_path)
    try:
        assert await db.ping()
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f"ALTER ROLE {user} NOLOGIN")
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                [user],
            )
        with pytest.raises(StateUnavailableError) as lost:
            await db.sessions.list()
        assert f"pw-{user}-secret" not in str(lost.value)
        assert not await db.ping()  # it tries again, and is refused
        with pytest.raises(StateUnavailableError) as refused:
            await db.runs.get("r1")
        assert f"pw-{user}-secret" not in str(refused.value)
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f"ALTER ROLE {user} LOGIN")
        assert await db.ping()
        assert await db.sessions.list() == []
        assert f"pw-{user}-secret" not in repr(db)
    finally:
        await db.close()


async def test_an_unreachable_database_fails_the_open_without_the_password(
    tmp_path: Path,
) -> None:
    url = "postgresql://herald:pw-unreachable-secret@127.0.0.1:1/herald"
    with pytest.raises(StateUnavailableError) as failed:
        await PgStateDB.connect(url, replica_id="none", state_dir=tmp_path)
    assert "pw-unreachable-secret" not in str(failed.value)
    assert "127.0.0.1" in str(failed.value)


async def test_a_write_opens_its_transaction_with_its_first_statement(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = await PgStateDB.connect(pg_url, replica_id="trips", state_dir=tmp_path)
    try:
        await db.write(lambda c: c.execute("CREATE TABLE t (n INTEGER NOT NULL)"))
        sent: list[str] = []
        execute = psycopg.ClientCursor.execute

        def counted(
            cursor: psycopg.ClientCursor[object], query: str, params: Any = None, **kw: Any
        ) -> psycopg.ClientCursor[object]:
            sent.append(" ".join(query.split()))
            return execute(cursor, query, params, **kw)

        monkeypatch.setattr(psycopg.ClientCursor, "execute", counted)

        def insert_two(conn: Connection) -> tuple[int, int]:
            first = conn.execute("INSERT INTO t VALUES (?) RETURNING n", (1,)).fetchone()
            second = conn.execute("INSERT INTO t VALUES (?)", (2,)).rowcount
            conn.queue("INSERT INTO t VALUES (?)", (3,))
            conn.queue("INSERT INTO t VALUES (?)", (4,))
            return first[0], second

        # The first statement's rows and the second's count, not BEGIN's.
        assert await db.write(insert_two) == (1, 1)
        # BEGIN travels with the first statement, queued ones with the COMMIT: three round
        # trips for four statements, a BEGIN and a COMMIT. The text run a second time is
        # prepared on its way (the PREPARE travels with it too).
        assert sent == [
            "BEGIN ISOLATION LEVEL SERIALIZABLE; INSERT INTO t VALUES (1) RETURNING n",
            "INSERT INTO t VALUES (%s)",
            "PREPARE h1 AS INSERT INTO t VALUES ($1); EXECUTE h1(3); EXECUTE h1(4); COMMIT",
        ]
        sent.clear()

        def only_queued(conn: Connection) -> None:
            conn.queue("INSERT INTO t VALUES (?)", (5,))

        await db.write(only_queued)
        assert sent == ["BEGIN ISOLATION LEVEL SERIALIZABLE; EXECUTE h1(5); COMMIT"]
        sent.clear()

        def nothing(conn: Connection) -> str:
            return "no statement"

        assert await db.write(nothing) == "no statement"
        assert sent == []  # nothing ran: no BEGIN, no COMMIT either

        def fails(conn: Connection) -> None:
            conn.execute("INSERT INTO t VALUES (?)", (6,))
            conn.queue("INSERT INTO t VALUES (NULL)")  # refused at the COMMIT

        with pytest.raises(ConstraintError):
            await db.write(fails)
        assert sent[-1] == "ROLLBACK"
        rows = await db.read(lambda c: c.execute("SELECT n FROM t ORDER BY n").fetchall())
        assert [row[0] for row in rows] == [1, 2, 3, 4, 5]  # the failed write kept nothing
        sent.clear()

        def last_one(conn: Connection) -> int:
            conn.queue("DELETE FROM t WHERE n = ?", (5,))
            return int(conn.last("UPDATE t SET n = n WHERE n < ?", (3,)).rowcount)

        # Its last statement goes with the COMMIT: one round trip for the whole write.
        assert await db.write(last_one) == 2
        assert sent == [
            "BEGIN ISOLATION LEVEL SERIALIZABLE; DELETE FROM t WHERE n = 5;"
            " UPDATE t SET n = n WHERE n < 3; COMMIT"
        ]

        def after_last(conn: Connection) -> None:
            conn.last("DELETE FROM t WHERE n = ?", (4,))
            conn.execute("DELETE FROM t WHERE n = ?", (3,))

        with pytest.raises(StateError, match="after the write's last"):
            await db.write(after_last)  # refused, not run outside the transaction
        rows = await db.read(lambda c: c.execute("SELECT n FROM t ORDER BY n").fetchall())
        assert [row[0] for row in rows] == [1, 2, 3]
        monkeypatch.undo()
        assert await db.write(lambda c: c.execute("SELECT COUNT(*) FROM t").fetchone()[0]) == 3
    finally:
        await db.close()


async def test_both_backends_make_the_same_tables_and_columns(pg_url: str, tmp_path: Path) -> None:
    lite = await SqliteStateDB.open(tmp_path / "herald.db")
    pg = await PgStateDB.connect(pg_url, replica_id="cols", state_dir=tmp_path)
    try:
        lite_columns = await lite.read(
            lambda c: {
                (str(t), str(col))
                for t, col in c.execute(
                    "SELECT m.name, p.name FROM sqlite_master m, pragma_table_info(m.name) p"
                    " WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite%'"
                )
            }
        )
        pg_columns = await pg.read(
            lambda c: {
                (str(t), str(col))
                for t, col in c.execute(
                    "SELECT table_name, column_name FROM information_schema.columns"
                    " WHERE table_schema = current_schema()"
                    " AND table_name NOT LIKE 'procrastinate%'"
                )
            }
        )
        assert pg_columns == lite_columns
    finally:
        await lite.close()
        await pg.close()
