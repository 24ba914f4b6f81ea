"""Three real replicas on one PostgreSQL database share the work of one Slack workspace.

Slack is in HTTP mode: each event goes, signed, to a replica picked at random (a load
balancer's choice). Thirty top-level mentions each spawn five sub-agents: 150 runs, executed
on whichever replica's worker takes them, each announced exactly once, in the thread of the
mention that asked for it. ``/subagents list`` asked of any replica lists a thread's runs,
wherever they ran.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.cluster.replicas import (
    Cluster,
    announces,
    batch_script,
    results_by_thread,
    running_cluster,
)
from tests.fakes.slack import FakeSlack

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

BATCHES = 30
PER_BATCH = 5
RUNS = BATCHES * PER_BATCH
#: Generous: 150 runs of 0.2 s on 3 × 8 slots take seconds; never an assertion about speed.
GUARD_SECONDS = 240


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    fake = FakeSlack()
    await fake.start()
    try:
        yield fake
    finally:
        await fake.close()


async def finished_by(cluster: Cluster) -> dict[int, float]:
    """How many runs each replica ended, from its own ``/metrics``."""
    counts: dict[int, float] = {}
    async with aiohttp.ClientSession() as http:
        for index in range(len(cluster)):
            async with http.get(f"{cluster.url(index)}/metrics") as response:
                text = await response.text()
            counts[index] = sum(
                sample.value
                for family in text_string_to_metric_families(text)
                for sample in family.samples
                if sample.name == "herald_runs_finished_total"
                and sample.labels.get("replica") == cluster.replica_id(index)
            )
    return counts


def run_statuses(database_url: str) -> list[str]:
    with psycopg.connect(database_url, autocommit=True) as conn:
        return [str(status) for (status,) in conn.execute("SELECT status FROM runs")]


async def test_three_replicas_announce_150_runs_once_each_in_the_asking_thread(
    tmp_path: Path, pg_url: str, slack: FakeSlack
) -> None:
    script = batch_script(BATCHES, PER_BATCH, job_seconds=0.2)
    async with running_cluster(
        tmp_path, database_url=pg_url, slack=slack, script=script, replicas=3, width=8
    ) as cluster:
        threads: dict[int, str] = {}
        asked_of: dict[int, int] = {}
        for batch in range(BATCHES):
            threads[batch], asked_of[batch] = await cluster.mention(f"batch {batch:02d}")
        assert set(asked_of.values()) == {0, 1, 2}, "every replica takes some of the events"

        await slack.wait_for(lambda: len(announces(slack.posts)) >= RUNS, within=GUARD_SECONDS)
        await list_from_each_replica(cluster, threads)
        workers = await finished_by(cluster)

    counts = announces(slack.posts)
    assert len(counts) == RUNS
    assert [key for key, n in counts.items() if n > 1] == []
    placed = results_by_thread(slack.posts)
    assert set(placed) == {(b, j) for b in range(BATCHES) for j in range(PER_BATCH)}
    misplaced = {job: where for job, where in placed.items() if where != [threads[job[0]]]}
    assert misplaced == {}
    assert run_statuses(pg_url) == ["done"] * RUNS
    assert sum(workers.values()) == RUNS, workers
    assert all(n > 0 for n in workers.values()), f"every replica runs some of the work: {workers}"


async def list_from_each_replica(cluster: Cluster, threads: dict[int, str]) -> None:
    """``/subagents list`` in three threads, each asked of another replica: each reply names
    the thread's five runs, done, wherever they ran."""
    for replica, batch in enumerate((0, BATCHES // 2, BATCHES - 1)):
        before = len(cluster.slack.posts)
        await cluster.reply_in_thread(threads[batch], "/subagents list", to=replica)

        def listing(before: int = before, batch: int = batch) -> str | None:
            return next(
                (
                    p.text
                    for p in cluster.slack.posts[before:]
                    if p.thread_ts == threads[batch] and f"job {batch:02d}-" in p.text
                ),
                None,
            )

        await cluster.slack.wait_for(lambda: listing() is not None, within=30)
        reply = listing()
        assert reply is not None
        for job in range(PER_BATCH):
            assert f"job {batch:02d}-{job}" in reply, reply
