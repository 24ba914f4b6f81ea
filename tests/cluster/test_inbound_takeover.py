"""A mention a replica acknowledged and then died with is answered by a survivor, once.

Two real replicas (``herald run`` subprocesses, one PostgreSQL database, one state
directory), Slack in HTTP mode against the fake Slack, the scripted model holding the turn.
The mention goes to replica 0, which is killed with SIGKILL right after its 200: Slack will
not send the event again. Once replica 0's heartbeat is old enough, replica 1 takes over its
unhandled message and answers it, exactly once. The replicas beat and count one another dead
at test speed (:mod:`tests.gateway.quick_herald`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.cluster.replicas import running_cluster
from tests.fakes.slack import FakeSlack
from tests.gateway.daemon_process import QUICK_HERALD

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

#: Generous: takeover waits out the dead-replica cut-off (seconds: :data:`QUICK_HERALD`);
#: never an assertion about speed.
GUARD_SECONDS = 120
ANSWER = "answered by whoever is left"


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    fake = FakeSlack()
    await fake.start()
    try:
        yield fake
    finally:
        await fake.close()


def held_script() -> dict[str, Any]:
    rule = {"match": "held question$", "reply": ANSWER, "delaySeconds": 2}
    return {"rules": [rule], "default": {"reply": "?"}}


async def test_a_survivor_answers_the_mention_a_killed_replica_acknowledged(
    tmp_path: Path, pg_url: str, slack: FakeSlack
) -> None:
    async with running_cluster(
        tmp_path,
        database_url=pg_url,
        slack=slack,
        script=held_script(),
        replicas=2,
        command=QUICK_HERALD,
    ) as cluster:
        thread, _ = await cluster.mention("the held question", to=0)
        await cluster.kill(0)
        assert not [p for p in slack.posts if ANSWER in p.text]
        await slack.wait_for(
            lambda: any(ANSWER in p.text for p in slack.posts), within=GUARD_SECONDS
        )
        answers = [p for p in slack.posts if ANSWER in p.text]
        assert len(answers) == 1
        assert answers[0].thread_ts == thread
        # Cleared once the survivor's turn ended: nothing is left to run again.
        async with asyncio.timeout(GUARD_SECONDS):
            while _pending(pg_url):  # noqa: ASYNC110 - the database has no event to wait on
                await asyncio.sleep(0.1)


def _pending(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT COUNT(*) FROM inbound").fetchone()
    return int(row[0]) if row else 0
