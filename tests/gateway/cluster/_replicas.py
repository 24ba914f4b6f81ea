"""Replicas of a cluster in one test loop: real gateway apps (the harness) with their own
``cluster.replicaId``, on one PostgreSQL database and one state directory."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import psycopg

from channels import Channel
from gateway.parts.timing import Timing
from tests.gateway.harness import (
    FAST_TIMING,
    HANG_GUARD_SECONDS,
    Harness,
    merge,
    running_gateway,
)


@asynccontextmanager
async def replica(
    tmp_path: Path,
    pg_url: str,
    replica_id: str,
    *,
    config: dict[str, Any] | None = None,
    script: dict[str, Any] | None = None,
    channels: dict[str, Channel] | None = None,
    timing: Timing = FAST_TIMING,
) -> AsyncIterator[Harness]:
    """One replica named ``replica_id`` on ``pg_url`` and ``tmp_path``'s state directory."""
    named = merge(config or {}, {"cluster": {"replicaId": replica_id}})
    async with running_gateway(
        tmp_path,
        config=named,
        script=script,
        state_dir=tmp_path / "state",
        database_url=pg_url,
        channels=channels,
        timing=timing,
    ) as gw:
        yield gw


@asynccontextmanager
async def two_replicas(
    tmp_path: Path,
    pg_url: str,
    *,
    config: dict[str, Any] | None = None,
    script: dict[str, Any] | None = None,
    timing: Timing = FAST_TIMING,
) -> AsyncIterator[tuple[Harness, Harness]]:
    """Replicas ``a`` and ``b``, started one after the other, stopped in reverse."""
    async with AsyncExitStack() as stack:
        a = await stack.enter_async_context(
            replica(tmp_path, pg_url, "a", config=config, script=script, timing=timing)
        )
        b = await stack.enter_async_context(
            replica(tmp_path, pg_url, "b", config=config, script=script, timing=timing)
        )
        yield a, b


async def sql(url: str, query: str, *params: object) -> list[tuple[Any, ...]]:
    """Run ``query`` on its own connection to ``url`` (the test's schema); its rows."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cursor = await conn.execute(query, params)
        return await cursor.fetchall() if cursor.description else []


async def advisory_locks(url: str) -> list[tuple[int, str]]:
    """The advisory locks granted now: (pid holding it, its application_name)."""
    return [
        (int(pid), str(name))
        for pid, name in await sql(
            url,
            "SELECT l.pid, a.application_name FROM pg_locks l"
            " JOIN pg_stat_activity a ON a.pid = l.pid"
            " WHERE l.locktype = 'advisory' AND l.granted",
        )
    ]


async def eventually(check: Callable[[], Awaitable[bool]], what: str) -> None:
    """Wait until ``check()`` holds (a hang guard, never a speed assertion)."""
    try:
        async with asyncio.timeout(HANG_GUARD_SECONDS):
            while not await check():  # noqa: ASYNC110 - the database has no event to wait on
                await asyncio.sleep(0.02)
    except TimeoutError:
        raise AssertionError(f"never happened: {what}") from None
