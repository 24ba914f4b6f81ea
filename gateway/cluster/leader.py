"""Which replica holds a channel's one inbound connection: a PostgreSQL advisory lock per
name, held on a dedicated connection (:class:`PgLeadership`, a
:class:`channels.Leadership`).

A session-level advisory lock belongs to its connection: when the holder dies (even
``kill -9``) its connection drops and the server frees the lock, and a standby replica,
trying every ``poll`` seconds, takes it. The holder checks its connection every ``poll``
seconds; a check that fails ends the lease, and the channel gives its connection up before
another replica can have taken the lock over. A replica that lost a lock waits twice
``poll`` before trying for it again, so a healthy standby takes over rather than a holder
whose connection to the database just failed. The lock's key is made from the schema and
the name, so clusters sharing one database in different schemas never meet.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final

import psycopg

from channels import Lease
from gateway.cluster.connection import connect, describe
from gateway.constants import CLUSTER_POLL_SECONDS

log = logging.getLogger(__name__)

#: The lock key: a 64-bit hash of the schema and the name, computed by the server.
TRY_LOCK: Final = (
    "SELECT pg_try_advisory_lock(hashtextextended(coalesce(current_schema(), '') || %s, 0))"
)
LOCK_PREFIX: Final = ":herald:leader:"
#: A lost lock is tried again after this many polls: a healthy standby gets it first.
YIELD_POLLS: Final = 2

Connection = psycopg.AsyncConnection[tuple[object, ...]]


class _PgLease:
    """A held lock; its watcher checks the connection every ``poll`` seconds."""

    def __init__(self, conn: Connection, name: str, url: str, poll: float) -> None:
        self._conn = conn
        self._name = name
        self._url = url
        self._poll = poll
        self._lost = asyncio.Event()
        self._watch = asyncio.create_task(self._watching(), name=f"leader-{name}")

    def __repr__(self) -> str:
        return f"<PgLease {self._name} {'lost' if self._lost.is_set() else 'held'}>"

    async def lost(self) -> None:
        await self._lost.wait()

    @property
    def is_lost(self) -> bool:
        return self._lost.is_set()

    async def _watching(self) -> None:
        try:
            while True:
                await asyncio.sleep(self._poll)
                async with asyncio.timeout(self._poll):
                    await self._conn.execute("SELECT 1")
        except (psycopg.Error, OSError, TimeoutError) as exc:
            log.warning("leader lock %s lost: %s", self._name, describe(self._url, exc))
            self._lost.set()

    async def release(self) -> None:
        self._watch.cancel()
        await asyncio.gather(self._watch, return_exceptions=True)
        with contextlib.suppress(psycopg.Error, OSError):
            await self._conn.close()  # the server frees the lock with its connection


class PgLeadership:
    """:class:`channels.Leadership` across the replicas of one PostgreSQL database."""

    def __init__(self, url: str, replica_id: str, *, poll: float = CLUSTER_POLL_SECONDS) -> None:
        self._url = url
        self._replica = replica_id
        self._poll = poll
        self._lost_at: dict[str, float] = {}

    def __repr__(self) -> str:
        return f"<PgLeadership replica={self._replica} poll={self._poll:g}s>"

    @asynccontextmanager
    async def hold(self, name: str) -> AsyncIterator[Lease]:
        """Wait until this replica holds ``name``'s lock; hold it inside the block."""
        lost_at = self._lost_at.pop(name, None)
        if lost_at is not None:
            await asyncio.sleep(max(0.0, lost_at + YIELD_POLLS * self._poll - time.monotonic()))
        conn = await self._acquire(name)
        lease = _PgLease(conn, name, self._url, self._poll)
        log.info("leader lock %s taken", name, extra={"replica": self._replica})
        try:
            yield lease
        finally:
            if lease.is_lost:
                self._lost_at[name] = time.monotonic()
            await lease.release()

    async def _acquire(self, name: str) -> Connection:
        conn: Connection | None = None
        failing = False
        try:
            while True:
                try:
                    if conn is None or conn.closed or conn.broken:
                        conn = await connect(self._url, self._replica, f"leader:{name}")
                    row = await (await conn.execute(TRY_LOCK, (LOCK_PREFIX + name,))).fetchone()
                    if row is not None and row[0] is True:
                        held, conn = conn, None
                        return held
                    failing = False
                except (psycopg.Error, OSError) as exc:
                    if not failing:  # once per outage, not every poll
                        log.warning(
                            "leader lock %s: database unreachable: %s",
                            name,
                            describe(self._url, exc),
                        )
                    failing = True
                await asyncio.sleep(self._poll)
        finally:
            if conn is not None:  # cancelled (a stop) while standing by
                with contextlib.suppress(psycopg.Error, OSError):
                    await conn.close()
