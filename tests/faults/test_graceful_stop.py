"""A real gateway stopped cleanly (SIGTERM) while sub-agent runs are in flight, restarted
each time: a clean stop must lose and repeat nothing, so it is safer than a crash.

``herald run`` is a subprocess with the scripted model and the real Slack channel in Socket
Mode against the wire-level fake Slack, which records every message really posted and takes
Slack-like time to answer a post (so stops find posts in flight and announces waiting). Five DM
sessions each spawn ten runs (50 in all) on a ``subagent`` lane 4 wide; each job answers
after a seeded delay, some after a tool call. The daemon gets SIGTERM :data:`STOPS` times,
each once a seeded number of announces has reached the chat (so every stop finds runs
running or queued, and announces being delivered), with a short drain: runs that finish
during it are announced while Slack is still connected, the others are parked and resume on
the next start. The last process is left to finish.

Unlike a SIGKILL, a clean stop never cuts a send off, so nothing may be uncertain: every run
ends ``done``, its outbox item ``delivered``, and Slack received each announce exactly once.
And an announce the stop never handed to Slack stays ``pending``, to be sent after the
restart, rather than being recorded as a send the stop might have cut off.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import signal
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.constants import STATE_DB_NAME
from gateway.state import FINISHED_STATUSES, OutboxRecord, SqliteStateDB
from tests.fakes.slack import APP_TOKEN, BOT_TOKEN, FakeSlack
from tests.faults._support import audit_transcripts, duplicates, fault_seed
from tests.gateway.daemon_process import HANG_GUARD_SECONDS, Daemon, free_port, herald

pytestmark = pytest.mark.slow

RUNS = 50
PER_TURN = 10  # sessions_spawn calls honoured per model turn
SESSIONS = RUNS // PER_TURN  # one DM each, so no session has more than ten runs at once
STOPS = 5
#: Seconds a stop lets running work finish: shorter than the longest jobs, so some are parked.
DRAIN_SECONDS = 0.5
CHILD_KEY = re.compile(r"sessionKey (agent:main:subagent:[0-9a-f-]{36})")


def script(rng: random.Random) -> dict[str, Any]:
    """The scripted model: a batch of ten spawns per session, each job with a seeded delay."""
    rules: list[dict[str, Any]] = [{"match": r"^\[announce\]", "reply": "ANNOUNCE {lastAssistant}"}]
    for batch in range(SESSIONS):
        jobs = range(batch * PER_TURN, (batch + 1) * PER_TURN)
        rules.append(
            {
                "match": f"^batch {batch}$",
                "reply": "",
                "toolCalls": [
                    {"name": "sessions_spawn", "arguments": {"task": f"job-{n:02d}"}} for n in jobs
                ],
                "afterTool": f"spawned batch {batch}",
            }
        )
    for n in range(RUNS):
        rule: dict[str, Any] = {
            "match": f"^job-{n:02d}$",
            "reply": f"result {n:02d}",
            "delaySeconds": round(rng.uniform(0.15, 0.9), 3),
        }
        if rng.random() < 0.4:
            rule |= {
                "reply": "",
                "toolCalls": [{"name": "ls", "arguments": {"path": "."}}],
                "afterTool": f"listed {n:02d}",
                "afterToolError": f"listing failed {n:02d}",
            }
        rules.append(rule)
    return {"rules": rules, "default": {"reply": "?"}}


def write_config(
    tmp_path: Path, port: int, fake: FakeSlack, rules: dict[str, Any], *, width: int
) -> Path:
    """A config for ``herald run``: the scripted model with ``rules``, the sub-agent lane
    ``width`` wide, Slack in Socket Mode against ``fake``."""
    script_path = tmp_path / "script.json"
    script_path.write_text(json.dumps(rules), encoding="utf-8")
    config = {
        "gateway": {
            "port": port,
            "stateDir": str(tmp_path / "state"),
            "shutdownDrainSeconds": DRAIN_SECONDS,
        },
        "agent": {"model": "t/m", "subagents": {"maxConcurrent": width}},
        "models": {
            "providers": {
                "t": {"api": "scripted", "script": str(script_path), "models": [{"id": "m"}]}
            }
        },
        "channels": {
            "webchat": {"enabled": False},
            "slack": {
                "enabled": True,
                "mode": "socket",
                "botToken": BOT_TOKEN,
                "appToken": APP_TOKEN,
                "apiBaseUrl": fake.api_base_url,
                "streaming": "off",  # posts are read whole; streaming has its own tests
            },
        },
    }
    path = tmp_path / "herald.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


def announced(fake: FakeSlack) -> Counter[str]:
    """Announces Slack received, by the child session they name."""
    return Counter(m.group(1) for post in fake.posts if (m := CHILD_KEY.search(post.text)))


def announces_reach(fake: FakeSlack, target: int) -> Callable[[], bool]:
    return lambda: sum(announced(fake).values()) >= target


async def wait_ready(http: aiohttp.ClientSession, daemon: Daemon) -> None:
    """Until ``/readyz`` says every channel is connected (Slack's socket is open)."""
    async with asyncio.timeout(HANG_GUARD_SECONDS):
        while True:
            async with http.get(f"{daemon.url}/readyz") as response:
                if response.status == 200:
                    return
            await asyncio.sleep(0.05)


async def unfinished_runs(db_path: Path) -> int:
    db = await SqliteStateDB.open(db_path, readonly=True)
    try:
        runs = await db.runs.list(limit=RUNS + 10)
    finally:
        await db.close()
    return sum(1 for run in runs if run.progress.status not in FINISHED_STATUSES) + RUNS - len(runs)


async def test_five_sigterms_with_50_runs_in_flight_lose_and_repeat_no_announce(
    tmp_path: Path,
) -> None:
    rng = random.Random(fault_seed(1505))
    port = free_port()
    db_path = tmp_path / "state" / STATE_DB_NAME
    unfinished_at_stop: list[int] = []
    fake = FakeSlack(channels={"D1"})
    # Slack's own latency: stops find posts in flight and announces waiting their turn.
    fake.slow("chat.postMessage", 0.08)
    await fake.start()
    try:
        config = write_config(tmp_path, port, fake, script(rng), width=4)
        async with aiohttp.ClientSession() as http:
            for life in range(STOPS + 1):
                async with herald("run", "--config", str(config), port=port) as daemon:
                    await daemon.wait_healthy()
                    await wait_ready(http, daemon)
                    if life == 0:
                        for batch in range(SESSIONS):
                            text = f"batch {batch}"
                            await fake.push_event(
                                fake.message(text, channel="D1", user=f"U{batch}")
                            )
                        await fake.wait_for(
                            lambda: (
                                sum(p.text.startswith("spawned") for p in fake.posts) == SESSIONS
                            ),
                            within=HANG_GUARD_SECONDS,
                        )
                    if life < STOPS:
                        # Targets leave at least 14 runs for the later lives: every stop finds
                        # runs in flight (at most 4 finish in a drain).
                        target = rng.randint(6 * life + 2, 7 * life + 8)
                        await fake.wait_for(
                            announces_reach(fake, target),
                            within=HANG_GUARD_SECONDS,
                        )
                        daemon.process.send_signal(signal.SIGTERM)
                        assert await daemon.wait_exit() == 0, "\n".join(daemon.raw[-30:])
                        unfinished_at_stop.append(await unfinished_runs(db_path))
                    else:
                        await fake.wait_for(
                            lambda: len(announced(fake)) >= RUNS, within=HANG_GUARD_SECONDS
                        )
                        daemon.process.send_signal(signal.SIGTERM)
                        assert await daemon.wait_exit() == 0
    finally:
        await fake.close()

    db = await SqliteStateDB.open(db_path, readonly=True)
    try:
        runs = await db.runs.list(limit=RUNS + 10)
        items = await db.outbox.list()
    finally:
        await db.close()
    assert len(unfinished_at_stop) == STOPS
    assert all(unfinished_at_stop), f"a stop found no run in flight: {unfinished_at_stop}"
    # 0 never final, 0 lost, 0 duplicated: each run's announce reached Slack exactly once.
    assert len(runs) == RUNS
    assert Counter(run.progress.status for run in runs) == {"done": RUNS}
    received = announced(fake)
    assert duplicates(received) == {}
    assert set(received) == {run.child_session_key for run in runs}
    assert Counter(item.state for item in items) == {"delivered": RUNS}
    assert {run.delivery.announce_state for run in runs} == {"delivered"}
    audit = audit_transcripts(tmp_path / "state")
    assert audit.files >= RUNS + SESSIONS
    assert audit.invalid == []
    assert audit.headless == []


QUEUED = 8  # announces waiting when the stop comes
#: Seconds Slack takes per post in that test: the drain cannot deliver every waiting one.
POST_LATENCY = 0.25


def queued_runs_script() -> dict[str, Any]:
    spawns = [{"name": "sessions_spawn", "arguments": {"task": f"job-{n}"}} for n in range(QUEUED)]
    return {
        "rules": [
            {"match": r"^\[announce\]", "reply": "ANNOUNCE {lastAssistant}"},
            {"match": "^go$", "reply": "", "toolCalls": spawns, "afterTool": "spawned"},
            {"match": "^job-(.)$", "reply": "result $1", "delaySeconds": 0.05},
        ],
        "default": {"reply": "?"},
    }


async def outbox_items(db_path: Path) -> list[OutboxRecord]:
    db = await SqliteStateDB.open(db_path, readonly=True)
    try:
        return await db.outbox.list()
    finally:
        await db.close()


def posts_to(fake: FakeSlack, text: str) -> int:
    """chat.postMessage calls carrying ``text``, answered or not yet."""
    return sum(text in str(call.args.get("text")) for call in fake.calls_to("chat.postMessage"))


async def test_announces_the_stop_never_handed_to_the_chat_stay_pending_and_go_after_restart(
    tmp_path: Path,
) -> None:
    port = free_port()
    db_path = tmp_path / "state" / STATE_DB_NAME
    fake = FakeSlack(channels={"D1"})
    await fake.start()
    try:
        config = write_config(tmp_path, port, fake, queued_runs_script(), width=QUEUED)
        async with aiohttp.ClientSession() as http:
            async with herald("run", "--config", str(config), port=port) as daemon:
                await daemon.wait_healthy()
                await wait_ready(http, daemon)
                await fake.push_event(fake.message("go", channel="D1"))
                await fake.wait_for(lambda: posts_to(fake, "spawned") == 1)
                # Slack hangs while the runs finish, so their announces queue up behind the
                # first; from the stop on it answers again, but slowly.
                fake.hold("chat.postMessage")
                fake.slow("chat.postMessage", POST_LATENCY)
                async with asyncio.timeout(HANG_GUARD_SECONDS):
                    # The state is another process's database: nothing to await.
                    while len(await outbox_items(db_path)) < QUEUED:  # noqa: ASYNC110
                        await asyncio.sleep(0.05)
                daemon.process.send_signal(signal.SIGTERM)
                fake.release("chat.postMessage")
                assert await daemon.wait_exit() == 0
            items = await outbox_items(db_path)
            sent = [i for i in items if posts_to(fake, i.text) > 0]
            never = [i for i in items if posts_to(fake, i.text) == 0]
            # The drain sent what it could while Slack was connected; the rest were never
            # handed to Slack, and nothing says they were.
            assert sent, "the stop sent nothing"
            assert never, "the stop had time for every announce"
            assert {i.state for i in sent} == {"delivered"}
            assert [(i.state, i.attempts, i.last_error) for i in never] == [
                ("pending", 0, None)
            ] * len(never)

            fake.slow("chat.postMessage", 0)
            async with herald("run", "--config", str(config), port=port) as daemon:
                await daemon.wait_healthy()
                await fake.wait_for(
                    lambda: all(posts_to(fake, i.text) for i in never), within=HANG_GUARD_SECONDS
                )
                daemon.process.send_signal(signal.SIGTERM)
                assert await daemon.wait_exit() == 0
    finally:
        await fake.close()
    items = await outbox_items(db_path)
    assert Counter(item.state for item in items) == {"delivered": QUEUED}
    assert sorted(p.text for p in fake.posts if p.text.startswith("ANNOUNCE")) == sorted(
        item.text for item in items
    )
