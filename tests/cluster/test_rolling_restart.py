"""A rolling restart under load loses nothing, doubles nothing and leaves no chat unanswered.

Three real ``herald run`` replicas on one PostgreSQL database, Slack in HTTP mode against the
wire-level fake Slack. Sixty top-level mentions, each spawning three sub-agents (180
runs), are sent while the replicas are stopped with SIGTERM and started again one at a time
(each waits for the one before to be ready again, as an operator's loop or systemd's
``herald@`` units restarted in turn do). Every event goes through a "load balancer": a live
replica picked at random, another when the one picked refuses the connection or answers an
error (it is stopping), the same event id each time, as Slack retries. The drain is shorter
than a run, so each stop cuts runs off (handed back to the queue, resumed elsewhere) and
finds chat turns and announces in flight.

Then: every mention got its reply once, in its thread; every run ended ``done`` and Slack
received each announce exactly once, in the thread of the mention that asked for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest

from tests.cluster.replicas import Cluster, announces, batch_script, results_by_thread
from tests.fakes.slack import BOT_USER_ID, FakeSlack

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

BATCHES = 60
PER_BATCH = 3
RUNS = BATCHES * PER_BATCH
REPLICAS = 3
#: Shorter than a run's model call: a stop cuts runs off rather than waiting for them.
DRAIN_SECONDS = 0.2
JOB_SECONDS = 0.5
#: Mentions sent while each replica restarts (at most; the rest go after the last restart).
DURING_RESTART = 12
#: Mentions sent to a replica as it gets SIGTERM.
AT_THE_STOP = 4
#: Seconds between mentions while a replica restarts: load throughout its stop and start.
PACE_SECONDS = 0.2
#: Generous guard on the whole; never an assertion about speed.
GUARD_SECONDS = 300
IN_FLIGHT = frozenset({"queued", "running"})
REPLY = re.compile(r"^spawned batch (\d+)$")


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    fake = FakeSlack()
    await fake.start()
    try:
        yield fake
    finally:
        await fake.close()


def statuses(database_url: str) -> Counter[str]:
    with psycopg.connect(database_url, autocommit=True) as conn:
        return Counter(str(status) for (status,) in conn.execute("SELECT status FROM runs"))


class Load:
    """The mentions, numbered in order, each sent through :meth:`Cluster.balanced`."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.threads: dict[int, str] = {}

    async def send(self, first: int | None = None) -> None:
        batch = len(self.threads)
        event = self.cluster.slack.message(f"<@{BOT_USER_ID}> batch {batch:02d}", channel="C1")
        self.threads[batch] = str(event["ts"])
        await self.cluster.balanced(event, first=first)

    async def while_restarting(self, done: asyncio.Event) -> None:
        for _ in range(DURING_RESTART):
            if done.is_set():
                return
            await self.send()
            await asyncio.sleep(PACE_SECONDS)


async def restart(load: Load, index: int, database_url: str) -> None:
    """Stop replica ``index`` with SIGTERM once runs are in flight, as mentions reach it
    (the balancer does not know yet); start it again."""
    cluster = load.cluster
    async with asyncio.timeout(GUARD_SECONDS):
        while not (await asyncio.to_thread(statuses, database_url)).keys() & IN_FLIGHT:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
    # Taken before the stop and handled during its drain, or refused and sent elsewhere.
    arriving = [asyncio.ensure_future(load.send(first=index)) for _ in range(AT_THE_STOP)]
    await asyncio.sleep(0)  # their connections are under way
    code = await cluster.terminate(index)
    assert code == 0, "\n".join(cluster.daemon(index).raw[-40:])
    await asyncio.gather(*arriving)
    await cluster.start(index)


async def test_a_rolling_restart_under_load_loses_and_doubles_nothing(
    tmp_path: Path, pg_url: str, slack: FakeSlack
) -> None:
    script = batch_script(BATCHES, PER_BATCH, job_seconds=JOB_SECONDS)
    cluster = Cluster(
        tmp_path,
        database_url=pg_url,
        slack=slack,
        script=script,
        replicas=REPLICAS,
        width=4,
        config={"gateway": {"shutdownDrainSeconds": DRAIN_SECONDS}},
    )
    load = Load(cluster)
    try:
        await cluster.start_all()
        for _ in range(5):  # runs in flight before the first stop
            await load.send()
        for index in range(REPLICAS):
            done = asyncio.Event()
            sending = asyncio.ensure_future(load.while_restarting(done))
            try:
                await restart(load, index, pg_url)
            finally:
                done.set()
                await sending
        while len(load.threads) < BATCHES:
            await load.send()
        assert len(load.threads) == BATCHES

        def answered() -> bool:
            replies = [p for p in slack.posts if REPLY.match(p.text)]
            return len(announces(slack.posts)) >= RUNS and len(replies) >= BATCHES

        with contextlib.suppress(TimeoutError):
            await slack.wait_for(answered, within=GUARD_SECONDS)
        await asyncio.sleep(2)  # anything posted twice would show up now
    finally:
        await cluster.close()

    replies: dict[int, list[str | None]] = {}
    for post in slack.posts:
        if match := REPLY.match(post.text):
            replies.setdefault(int(match.group(1)), []).append(post.thread_ts)
    unanswered = sorted(set(range(BATCHES)) - set(replies))
    said = {b: [p.text for p in slack.posts if p.thread_ts == load.threads[b]] for b in unanswered}
    assert unanswered == [], f"mentions never answered (what their threads got): {said}"
    twice_or_misplaced = {b: where for b, where in replies.items() if where != [load.threads[b]]}
    assert twice_or_misplaced == {}

    assert statuses(pg_url) == Counter({"done": RUNS})
    counts = announces(slack.posts)
    assert len(counts) == RUNS
    assert [key for key, n in counts.items() if n > 1] == []
    placed = results_by_thread(slack.posts)
    assert set(placed) == {(b, j) for b in range(BATCHES) for j in range(PER_BATCH)}
    misplaced = {job: where for job, where in placed.items() if where != [load.threads[job[0]]]}
    assert misplaced == {}
