"""A replica's queue stops even when its cancellations are lost: on Python 3.11
psycopg_pool's wait for a connection (``asyncio.wait_for``) loses a cancellation that lands
just as a connection is handed over, and the task that lost it runs on."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gateway.cluster.queue import POOL_MAX, ProcrastinateQueue
from tests.gateway.harness import FAST_QUEUE, HANG_GUARD_SECONDS, running_gateway

pytestmark = pytest.mark.postgres

#: The worker (registering) and both checks start by asking the pool for a connection.
WAITERS = 3
#: A queue whose tasks all end stops well within this.
STOP_GUARD_SECONDS = 5.0


async def test_the_queue_stops_when_its_pool_hands_connections_over_as_it_closes(
    tmp_path: Path, pg_url: str
) -> None:
    async with running_gateway(tmp_path, database_url=pg_url):  # the schema, migrated
        queue = ProcrastinateQueue(pg_url, width=1, replica_id="r2", timing=FAST_QUEUE)
        await queue.open()
        try:
            pool = queue._connector.pool
            held = [await pool.getconn() for _ in range(POOL_MAX)]
            await queue.start()
            async with asyncio.timeout(HANG_GUARD_SECONDS):
                waiting = pool.get_stats().get("requests_waiting", 0)
                while waiting < WAITERS:  # the pool has no event to wait on
                    await asyncio.sleep(0.02)
                    waiting = pool.get_stats().get("requests_waiting", 0)
            for conn in held:  # each waiting task is handed one...
                await pool.putconn(conn)
            closing = asyncio.ensure_future(queue.close(0))  # ...as it is cancelled
            try:
                async with asyncio.timeout(STOP_GUARD_SECONDS):
                    await closing
            except TimeoutError:
                raise AssertionError(f"the queue never stopped: {queue!r}") from None
        finally:
            await queue.aclose()
