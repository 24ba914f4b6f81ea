"""Session locks across replicas: one PostgreSQL advisory lock per session key.

The session lane serialises a session's turns inside one process; in a cluster each keyed
job of that lane also holds ``pg_advisory_lock`` of a hash of its schema and key for its whole
run (:meth:`SessionLocks.guard`, the lane's ``key_guard``), so two replicas never write one
transcript at once. The lock is session-level, on a connection the job holds from a pool as
wide as the session lane (every running job can hold one; none waits for another's).

Waiting: a lock another replica holds is waited for on the server (the job holds its lane
place meanwhile). A database that cannot be reached is waited out with backoff: the turn
starts once the lock is held, never without it.

A lost connection while the lock is held: the server has released the lock, so another
replica may begin a turn of the session. The job is **stopped**: a watcher waiting on the
connection's socket sees the loss at once and cancels the job with
:data:`gateway.constants.SESSION_LOCK_LOST` (a chat turn then tells the person), and the
job ends with :class:`SessionLockLostError`. It is not re-acquired: after the loss another
replica may already have written the session, so the stopped turn's state is stale.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Hashable
from contextlib import asynccontextmanager
from typing import Any, Final

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from configbase import redact_url, url_password
from gateway.backoff import backoff
from gateway.cluster.connection import check_idle
from gateway.constants import SESSION_LOCK_LOST

logger = logging.getLogger(__name__)

Connection = psycopg.AsyncConnection[tuple[Any, ...]]

#: Waiting out an unreachable database before taking a lock: 0.2 s, doubling, up to 5 s.
RETRY_FIRST_SECONDS: Final = 0.2
RETRY_MAX_SECONDS: Final = 5.0
#: PostgreSQL truncates application_name to 63 bytes.
APPLICATION_NAME_MAX: Final = 63
#: The lock key: a 64-bit hash of the schema and the session key, computed by the server, so
#: clusters sharing one database in different schemas never wait for each other's sessions.
_KEY_SQL: Final = "hashtextextended(coalesce(current_schema(), '') || ':session:' || %s, 0)"
LOCK_SQL: Final = f"SELECT pg_advisory_lock({_KEY_SQL})"
UNLOCK_SQL: Final = f"SELECT pg_advisory_unlock({_KEY_SQL})"


class SessionLockLostError(Exception):
    """The connection holding a session's lock was lost during the job: it was stopped."""

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(
            f"session {key}: the database connection holding its lock was lost; "
            "the turn was stopped so it cannot write unguarded"
        )


class _Hold:
    """One held lock: the job's task, and whether the lock is still known to be held."""

    __slots__ = ("active", "lost", "task")

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self.task = task
        self.active = True
        self.lost = False


class SessionLocks:
    """Advisory locks for session keys, on a pool of ``size`` connections to ``url``.

    :meth:`open` before use, :meth:`close` after (idempotent). ``replica_id`` names the
    connections in ``pg_stat_activity`` (``herald:<replicaId>:locks``).
    """

    def __init__(self, url: str, *, size: int, replica_id: str) -> None:
        self._url = url
        self._location = redact_url(url)
        self._password = url_password(url)
        name = f"herald:{replica_id}:locks"[:APPLICATION_NAME_MAX]
        self._pool = AsyncConnectionPool(
            url,
            min_size=0,
            max_size=size,
            open=False,
            name="herald-session-locks",
            # A connection the server dropped while idle (a restart) is replaced on the way
            # out of the pool, not found broken by the lock statement; a silent one is
            # handed out without a round trip.
            check=check_idle,
            kwargs={"autocommit": True, "application_name": name},
        )
        self._held: dict[str, int] = {}
        self._releasing: set[asyncio.Future[None]] = set()
        self._closed = False

    def __repr__(self) -> str:
        return f"<SessionLocks {self._location} held={len(self._held)}>"

    @property
    def held(self) -> frozenset[str]:
        """The keys whose lock this process holds now."""
        return frozenset(self._held)

    async def open(self) -> None:
        await self._pool.open()

    async def close(self) -> None:
        """Close the pool (locks still held are released by the server). Idempotent."""
        if self._closed:
            return
        self._closed = True
        await asyncio.gather(*self._releasing, return_exceptions=True)
        await self._pool.close()

    @asynccontextmanager
    async def guard(self, key: Hashable) -> AsyncIterator[None]:
        """Hold ``key``'s lock for the body (the session lane's ``key_guard``); see the
        module docstring for waiting and for a connection lost meanwhile."""
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a session lock is held by a task")
        text = str(key)
        conn = await self._acquire(text)
        hold = _Hold(task)
        self._held[text] = self._held.get(text, 0) + 1
        watcher = asyncio.create_task(self._watch(conn, text, hold), name=f"lock watch {text}")
        try:
            yield
        except asyncio.CancelledError:
            if hold.lost:
                task.uncancel()
                raise SessionLockLostError(text) from None
            raise
        else:
            if hold.lost:  # the job caught the cancellation and finished anyway
                task.uncancel()
                raise SessionLockLostError(text)
        finally:
            hold.active = False
            self._drop(text)
            # In a task of its own: a second cancellation of the job cannot cut the release
            # short (a lock left held would stop the session on every replica).
            release = asyncio.ensure_future(self._release(conn, text, hold, watcher))
            self._releasing.add(release)
            release.add_done_callback(self._releasing.discard)
            await asyncio.shield(release)

    # -- internals --------------------------------------------------------------------------

    async def _acquire(self, key: str) -> Connection:
        attempt = 0
        while True:
            conn: Connection | None = None
            try:
                conn = await self._pool.getconn()
                await conn.execute(LOCK_SQL, (key,))
                if attempt:
                    logger.info("session lock taken after the database came back")
                return conn
            except (psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout) as exc:
                attempt += 1
                if conn is not None:
                    await self._discard(conn)
                delay = backoff(attempt, base=RETRY_FIRST_SECONDS, cap=RETRY_MAX_SECONDS)
                log = logger.warning if attempt == 1 else logger.debug
                log("session lock: database unreachable; waiting", extra={"error": self._say(exc)})
                await asyncio.sleep(delay)
            except BaseException:
                # Cancelled while waiting for the lock: the server may grant it still, so the
                # connection goes (and the lock with it), never back to the pool.
                if conn is not None:
                    await asyncio.shield(self._discard(conn))
                raise

    async def _watch(self, conn: Connection, key: str, hold: _Hold) -> None:
        """Wait on the connection's socket; its loss stops the job holding the lock."""
        try:
            async for _ in conn.notifies():
                pass
        except psycopg.Error as exc:
            if not hold.active:
                return
            hold.lost = True
            logger.error(
                "session lock lost with its database connection; stopping the turn",
                extra={"session": key, "error": self._say(exc)},
            )
            hold.task.cancel(SESSION_LOCK_LOST)

    async def _release(
        self,
        conn: Connection,
        key: str,
        hold: _Hold,
        watcher: asyncio.Task[None],
    ) -> None:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
        if hold.lost or conn.closed:
            await self._discard(conn)
            return
        try:
            await self._unlock(conn, key)
        except psycopg.Error as exc:
            logger.warning("session unlock failed", extra={"session": key, "error": self._say(exc)})
            await self._discard(conn)

    async def _unlock(self, conn: Connection, key: str) -> None:
        await conn.execute(UNLOCK_SQL, (key,))
        await self._pool.putconn(conn)

    async def _discard(self, conn: Connection) -> None:
        """Close ``conn`` (the server drops its locks) and hand it back to the pool, which
        replaces it."""
        try:
            await conn.close()
        finally:
            await self._pool.putconn(conn)

    def _drop(self, key: str) -> None:
        count = self._held.get(key, 0) - 1
        if count > 0:
            self._held[key] = count
        else:
            self._held.pop(key, None)

    def _say(self, exc: BaseException) -> str:
        text = " ".join(str(exc).split())
        return text.replace(self._password, "********") if self._password else text
