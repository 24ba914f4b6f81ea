"""One session, one turn at a time, across replicas: the session lane holds a PostgreSQL
advisory lock per session key around each of its jobs."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from gateway.runtime.turns import LOCK_LOST_REPLY
from tests.gateway.cluster._replicas import advisory_locks, eventually, sql, two_replicas
from tests.gateway.harness import TEST_SCRIPT, Harness

pytestmark = pytest.mark.postgres

#: Turns of four lines each (the message, a tool call, its result, the reply), each model
#: call a little slow: two replicas writing one transcript unguarded interleave them.
SCRIPT: dict[str, Any] = {
    "rules": [
        {
            "match": r"^turn (\w+)$",
            "reply": "",
            "toolCalls": [{"name": "agents_list", "arguments": {}}],
            "afterTool": "done $1",
            "delaySeconds": 0.05,
        },
        {"match": r"^slow$", "reply": "slow done", "delaySeconds": 60},
        *TEST_SCRIPT["rules"],
    ],
    "default": {"reply": "default reply"},
}
KEY = "agent:main:memory:channel:c1"


def turns_of(records: list[dict[str, Any]]) -> list[list[tuple[str, str]]]:
    """The transcript's messages as (role, text) runs, one run per user message."""
    runs: list[list[tuple[str, str]]] = []
    for record in records:
        if record.get("type") != "message":
            continue
        body = record["message"]
        role, text = body["role"], str(body.get("content") or "")
        if role == "user":
            runs.append([])
        runs[-1].append((role, text))
    return runs


async def no_advisory_lock(url: str) -> bool:
    return not await advisory_locks(url)


async def test_concurrent_turns_of_one_session_on_two_replicas_never_interleave(
    tmp_path: Path, pg_url: str
) -> None:
    async with two_replicas(tmp_path, pg_url, script=SCRIPT) as (a, b):
        names = [f"{side}{i}" for i in range(4) for side in ("a", "b")]
        sent = [(a if name.startswith("a") else b).say(f"turn {name}") for name in names]
        await asyncio.gather(*sent)
        await a.reply(count=4)
        await b.reply(count=4)
        await a.runs_idle()
        await b.runs_idle()

        contents = await a.store.read(KEY)
        turns = turns_of(contents.records)
        assert sorted(turn[0][1] for turn in turns) == sorted(f"turn {n}" for n in names)
        for turn in turns:
            name = turn[0][1].removeprefix("turn ")
            # Each turn's lines together, in order: nothing of another turn between them.
            assert [role for role, _ in turn] == ["user", "assistant", "tool", "assistant"]
            assert turn[-1] == ("assistant", f"done {name}")
        # Released after each turn: nothing is held once both replicas are idle.
        assert await advisory_locks(pg_url) == []
        for gw in (a, b):
            assert gw.cluster is not None
            assert gw.cluster.locks.held == frozenset()


async def _lock_holder(url: str, replica: str) -> int | None:
    for pid, name in await advisory_locks(url):
        if name == f"herald:{replica}:locks":
            return pid
    return None


async def test_a_turn_whose_lock_connection_dies_is_stopped_and_the_lock_released(
    tmp_path: Path, pg_url: str
) -> None:
    async with two_replicas(tmp_path, pg_url, script=SCRIPT) as (a, b):
        await a.say("slow")

        async def held() -> bool:
            return await _lock_holder(pg_url, "a") is not None

        await eventually(held, "replica a holds the session's lock during its turn")
        pid = await _lock_holder(pg_url, "a")
        await sql(pg_url, "SELECT pg_terminate_backend(%s)", pid)

        # The turn stops (it must not go on writing unguarded) and says so in its chat.
        stopped = await a.wait_sent(lambda m: m.text == LOCK_LOST_REPLY)
        assert stopped[0].chat_id == "c1"
        await eventually(lambda: no_advisory_lock(pg_url), "the lock went with its connection")
        # The session goes on, on the other replica, and on this one with a new connection.
        await b.say("turn b1")
        assert (await b.reply()).text == "done b1"
        await a.say("turn a1")
        assert (await a.reply()).text == "done a1"
        await a.runs_idle()
        texts = [
            r["message"].get("content")
            for r in (await b.store.read(KEY)).records
            if r.get("type") == "message"
        ]
        assert "slow done" not in texts
        assert texts.count("done b1") == 1
        assert texts.count("done a1") == 1


async def test_a_replica_waits_for_the_lock_another_holds(tmp_path: Path, pg_url: str) -> None:
    async with two_replicas(tmp_path, pg_url, script=SCRIPT) as (a, b):
        await a.say("slow")

        async def held() -> bool:
            return await _lock_holder(pg_url, "a") is not None

        await eventually(held, "replica a holds the session's lock")
        await b.say("turn b1")
        # b's turn holds its place on b's session lane, waiting on the server for the lock.
        await eventually(lambda: _waiting(pg_url), "replica b waits for the lock")
        assert _replies(b) == []
        a.turns.stop(KEY)  # /stop on a: its turn ends, the lock is free, b goes on
        assert (await b.reply()).text == "done b1"


async def _waiting(url: str) -> bool:
    rows = await sql(
        url,
        "SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
        " WHERE l.locktype = 'advisory' AND NOT l.granted AND a.application_name = %s",
        "herald:b:locks",
    )
    return bool(rows)


def _replies(gw: Harness) -> list[str]:
    return [m.text for m in gw.channel.sent if m.kind == "reply"]
