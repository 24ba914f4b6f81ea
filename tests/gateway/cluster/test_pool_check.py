"""The cluster's pools check a connection on its way out by its socket: one the server
dropped while it sat idle is replaced, never handed to the lock or queue statement."""

from __future__ import annotations

import pytest
from psycopg_pool import AsyncConnectionPool

from gateway.cluster.connection import check_idle
from tests.gateway.cluster._replicas import eventually, sql

pytestmark = pytest.mark.postgres


async def test_a_pooled_connection_dropped_by_the_server_is_replaced(pg_url: str) -> None:
    pool = AsyncConnectionPool(
        pg_url, min_size=1, max_size=1, open=False, check=check_idle, kwargs={"autocommit": True}
    )
    await pool.open(wait=True)
    try:
        async with pool.connection() as conn:
            pid = conn.info.backend_pid
        await sql(pg_url, "SELECT pg_terminate_backend(%s)", pid)

        async def gone() -> bool:
            return not await sql(pg_url, "SELECT 1 FROM pg_stat_activity WHERE pid = %s", pid)

        await eventually(gone, "the pooled connection's backend ended")
        async with pool.connection() as conn:
            assert conn.info.backend_pid != pid
            assert await (await conn.execute("SELECT 1")).fetchone() == (1,)
    finally:
        await pool.close()


async def test_a_silent_idle_connection_is_handed_out_without_a_round_trip(
    pg_url: str,
) -> None:
    pool = AsyncConnectionPool(
        pg_url, min_size=1, max_size=1, open=False, check=check_idle, kwargs={"autocommit": True}
    )
    await pool.open(wait=True)
    try:
        async with pool.connection() as conn:
            pid = conn.info.backend_pid
            await conn.execute("SELECT 'last'")
        async with pool.connection() as conn:
            assert conn.info.backend_pid == pid
            # The server saw nothing since (psycopg_pool's own check sends an empty query).
            seen = await sql(pg_url, "SELECT query FROM pg_stat_activity WHERE pid = %s", pid)
            assert seen == [("SELECT 'last'",)]
    finally:
        await pool.close()
