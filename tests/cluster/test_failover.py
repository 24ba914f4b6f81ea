"""Losing a replica, or the database for a while, loses no run and announces none twice.

- ``kill -9`` of one replica with runs in flight, then of another, each time the one holding
  Discord's gateway connection: the survivors resume the dead replicas' runs (procrastinate
  sees their workers stop beating) from their transcripts; every run ends, Slack receives
  each announce exactly once, and Discord's connection moves to a survivor each time.
- The database stopped under load (``pg_ctl stop -m immediate``) and started again: every
  replica answers ``/readyz`` 503 while it is gone and 200 once it is back, and every run
  ends and is announced once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from tests import postgres
from tests.channels.discord.conftest import add_test_guild
from tests.cluster.replicas import Cluster, announces, batch_script, running_cluster
from tests.fakes.discord import FakeDiscord
from tests.fakes.slack import FakeSlack

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

#: Generous: failover waits out the stalled-worker timeout; never an assertion about speed.
GUARD_SECONDS = 300


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    fake = FakeSlack()
    await fake.start()
    try:
        yield fake
    finally:
        await fake.close()


@pytest.fixture
def own_postgres() -> Iterator[postgres.PostgresServer]:
    # Durable, as a production server is: an immediate stop keeps every acknowledged commit.
    server = postgres.own_server(durable=True)
    try:
        yield server
    finally:
        server.stop()


def announced_at_least(slack: FakeSlack, count: int) -> Callable[[], bool]:
    return lambda: len(announces(slack.posts)) >= count


def story(cluster: Cluster, database_url: str, child_keys: list[str]) -> list[str]:
    """Every log line of every replica about the runs of ``child_keys``, and their rows."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT run_id FROM runs WHERE child_session_key = ANY(%s)", (child_keys,)
        ).fetchall()
        outbox = conn.execute(
            "SELECT * FROM outbox WHERE run_id = ANY(%s)", ([r[0] for r in rows],)
        ).fetchall()
    ids = {str(r[0]) for r in rows}
    lines = [f"outbox: {item}" for item in outbox]
    for index, daemon in enumerate(cluster.daemons):
        if daemon is not None:
            lines += [f"{index}: {raw}" for raw in daemon.raw if any(i in raw for i in ids)]
    return lines


def run_statuses(database_url: str) -> dict[str, str]:
    with psycopg.connect(database_url, autocommit=True) as conn:
        rows = conn.execute("SELECT child_session_key, status FROM runs").fetchall()
    return {str(key): str(status) for key, status in rows}


async def test_two_replicas_killed_in_turn_lose_and_repeat_no_run(
    tmp_path: Path, pg_url: str, slack: FakeSlack
) -> None:
    batches, per_batch = 12, 10
    runs = batches * per_batch
    script = batch_script(batches, per_batch, job_seconds=1.5)
    async with FakeDiscord() as discord:
        add_test_guild(discord)
        channels = {
            "discord": {
                "enabled": True,
                "token": discord.token,
                "apiBaseUrl": discord.api_base_url,
                "gatewayUrl": discord.gateway_url,
            }
        }
        async with running_cluster(
            tmp_path,
            database_url=pg_url,
            slack=slack,
            script=script,
            replicas=3,
            width=4,
            config={"channels": channels},
        ) as cluster:
            for batch in range(batches):
                await cluster.mention(f"batch {batch:02d}")
            holders = []
            for after in (runs // 5, runs // 2):
                await slack.wait_for(announced_at_least(slack, after), within=GUARD_SECONDS)
                in_flight = [s for s in run_statuses(pg_url).values() if s in ("queued", "running")]
                assert in_flight, "the kill must find runs in flight"
                # The replica holding Discord's gateway connection dies each time.
                holders.append(await cluster.holder_of("discord"))
                identified = len(discord.identifies)
                await cluster.kill(holders[-1])
                # A survivor takes the lock the dead one's connection held, and identifies.
                survivor = await cluster.holder_of("discord")
                assert survivor != holders[-1]
                assert len(discord.identifies) > identified
                assert discord.open_connections == 1
            await slack.wait_for(announced_at_least(slack, runs), within=GUARD_SECONDS)
            # Anything announced twice would show up now, while the survivor settles.
            await asyncio.sleep(2)

    assert len(set(holders)) == 2, "two different replicas were killed"

    statuses = run_statuses(pg_url)
    assert len(statuses) == runs
    assert {s for s in statuses.values()} == {"done"}
    counts = announces(slack.posts)
    assert set(counts) == set(statuses)
    assert [key for key, n in counts.items() if n > 1] == []


async def test_the_database_restarted_under_load_loses_no_run(
    tmp_path: Path, own_postgres: postgres.PostgresServer, slack: FakeSlack
) -> None:
    url = own_postgres.admin_url()
    batches, per_batch = 6, 10
    runs = batches * per_batch
    script = batch_script(batches, per_batch, job_seconds=0.5)
    async with running_cluster(
        tmp_path, database_url=url, slack=slack, script=script, replicas=2, width=4
    ) as cluster:
        for batch in range(batches):
            await cluster.mention(f"batch {batch:02d}")
        await slack.wait_for(lambda: len(announces(slack.posts)) >= runs // 4, within=120)

        await asyncio.to_thread(own_postgres.halt)
        for replica in range(len(cluster)):
            await cluster.wait_ready(replica, status=503)
        await asyncio.sleep(3)  # work goes on trying while the database is away
        await asyncio.to_thread(own_postgres.resume)
        for replica in range(len(cluster)):
            await cluster.wait_ready(replica)

        await slack.wait_for(lambda: len(announces(slack.posts)) >= runs, within=GUARD_SECONDS)
        await asyncio.sleep(2)

    statuses = run_statuses(url)
    assert len(statuses) == runs
    assert set(statuses.values()) == {"done"}
    counts = announces(slack.posts)
    assert set(counts) == set(statuses)
    twice = [key for key, n in counts.items() if n > 1]
    assert twice == [], "\n".join(story(cluster, url, twice))
