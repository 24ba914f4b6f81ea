"""Dedicated asynchronous PostgreSQL connections of the cluster's long-lived tasks (a
channel's lock, the web chat's LISTEN), each named in ``pg_stat_activity``.

A session-level lock or a LISTEN lives exactly as long as its connection, so these are
never pooled. TCP keepalives on both ends make a silently dead peer (a replica's host gone,
a cut network) show as a dropped connection within seconds instead of hours: the server
then frees the replica's locks for another to take.
"""

from __future__ import annotations

import select
from typing import Any, Final

import psycopg
from psycopg import pq
from psycopg_pool import AsyncConnectionPool

from configbase import redact_url

#: PostgreSQL truncates application_name to 63 bytes.
APPLICATION_NAME_MAX: Final = 63
#: Seconds to wait for the server to answer a connect (libpq would wait for the OS).
CONNECT_TIMEOUT: Final = 10
#: Idle seconds before the first keepalive probe, seconds between probes, probes lost
#: before the connection counts as dead: about 11 s from silence to a freed lock, well
#: within the 30 s a vanished holder's Discord connection may take to move.
KEEPALIVE_IDLE: Final = 5
KEEPALIVE_INTERVAL: Final = 2
KEEPALIVE_COUNT: Final = 3


def application_name(replica_id: str, role: str) -> str:
    """``herald:<replica>:<role>``: how operators (and tests) find the connection."""
    return f"herald:{replica_id}:{role}"[:APPLICATION_NAME_MAX]


async def connect(
    url: str, replica_id: str, role: str
) -> psycopg.AsyncConnection[tuple[object, ...]]:
    """An autocommit connection for ``role``; psycopg's errors propagate (their messages
    carry no password: libpq never prints it)."""
    conn = await psycopg.AsyncConnection.connect(
        url,
        autocommit=True,
        application_name=application_name(replica_id, role),
        connect_timeout=CONNECT_TIMEOUT,
        keepalives=1,
        keepalives_idle=KEEPALIVE_IDLE,
        keepalives_interval=KEEPALIVE_INTERVAL,
        keepalives_count=KEEPALIVE_COUNT,
    )
    try:
        # The server's side of the same: it frees a vanished replica's locks.
        for setting, value in (
            ("tcp_keepalives_idle", KEEPALIVE_IDLE),
            ("tcp_keepalives_interval", KEEPALIVE_INTERVAL),
            ("tcp_keepalives_count", KEEPALIVE_COUNT),
        ):
            await conn.execute(f"SET {setting} = {value}")
    except BaseException:  # failed, or cancelled by a stop: never left open behind
        await conn.close()
        raise
    return conn


async def check_idle(conn: psycopg.AsyncConnection[Any]) -> None:
    """A pool's ``check``: psycopg_pool's own (an empty query, one round trip) only when the
    socket of a connection idle in the pool has something to read.

    An idle connection is sent nothing by the server unless it is going away: a restart, a
    terminated backend or a dropped socket leaves a message or an end of file to read, and
    then the round trip finds the connection broken and the pool replaces it. A silent
    socket is handed out as it is, saving a round trip on every use (about five per run).
    A connection that dies between this check and its use fails its statement, as it could
    after the round trip too."""
    if conn.closed or conn.info.transaction_status != pq.TransactionStatus.IDLE:
        await AsyncConnectionPool.check_connection(conn)
        return
    poll = select.poll()
    poll.register(conn.pgconn.socket, select.POLLIN)
    if poll.poll(0):
        await AsyncConnectionPool.check_connection(conn)


def describe(url: str, exc: BaseException) -> str:
    """An error about ``url`` for logs: the URL with its password masked, and what failed."""
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"{redact_url(url)}: {detail}"
