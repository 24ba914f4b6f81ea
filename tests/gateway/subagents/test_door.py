"""The one door for runs started outside a chat, on the wire fakes.

The same task spawned into one Slack thread from each origin — the chat's own agent calling
``sessions_spawn``, an MCP client's ``spawn``, a scheduled occurrence and ``herald spawn
--to`` (a process of its own, through the HTTP API) — gives runs and child sessions of one
shape: they differ in their ids and times, and in what says where they came from (the
origin chat's thread, the job and its due time), nothing else.

An occurrence and its run are written together or not at all: a spawn whose occurrence
cannot be recorded (another writer took the due time) keeps no run and no child session,
and a run that cannot be recorded (its job and due time have one already) keeps no
occurrence and leaves the job where it was.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Final

import pytest

from gateway.schedules.setup import SCHEDULER
from gateway.schedules.store import JobRecord, JobsTable, advance
from gateway.schema.targets import ChatTargetError
from gateway.state import Connection, RunRecord, SessionRecord, run_columns
from gateway.subagents import Occurrence, SpawnAccepted, SpawnRefused, SpawnRequest
from tests.fakes.slack import BOT_USER_ID, FakeSlack
from tests.gateway.commands._cli import cli
from tests.gateway.harness import Harness, hang_guard, running_gateway
from tests.gateway.mcp.test_serve import call, client
from tests.gateway.slack_fake import joined, slack_on_fake

TOKEN: Final = "herald-door-token-0123456789"
CHANNEL: Final = "C0123456789"
#: The thread a person's message starts (its ts): where every origin aims.
THREAD: Final = "1700000000.000100"
TARGET: Final = f"slack:{CHANNEL}/{THREAD}"
#: The harness script's ``bg <task>`` rule spawns ``<task>`` with this label.
LABEL: Final = "bg"
TASK: Final = "task: shape"
#: What differs between two runs of one shape: their ids, times and paths.
PER_RUN: Final = frozenset(
    {"run_id", "child_session_key", "child_session_id", "created_at", "started_at"}
    | {"ended_at", "transcript_path", "announce_text", "announce_state", "announce_error"}
    | {"delivery", "held_by", "completion_by"}
)
#: What says where a run came from.
ORIGIN: Final = frozenset(
    {"origin_channel", "origin_account", "origin_chat_id", "origin_thread_id"}
    | {"origin_chat_type", "job_id", "occurrence_at"}
)
SESSION_PER_RUN: Final = frozenset(
    {"key", "session_id", "created_at", "updated_at", "origin", "archive_due_at"}
)


@asynccontextmanager
async def serving(tmp_path: Path) -> AsyncIterator[tuple[Harness, FakeSlack]]:
    """A listening gateway with ``mcp.serve`` on and the real Slack channel on the fake."""
    config = {
        "gateway": {"auth": {"token": TOKEN}},
        "mcp": {"serve": {"enabled": True}},
        "agent": {"subagents": {"maxConcurrent": 4}},
    }
    async with (
        slack_on_fake({CHANNEL}) as (fake, slack),
        running_gateway(tmp_path, config=config, listen=True) as gw,
        joined(gw, slack, fake),
    ):
        yield gw, fake


def job(job_id: str, *, due: float, task: str = TASK) -> JobRecord:
    return JobRecord(
        job_id=job_id,
        trigger_kind="every",
        trigger_value="1h",
        timezone="UTC",
        anchor=due,
        agent_id="main",
        task=task,
        to_target=TARGET,
        created_at=due,
        label=LABEL,
        next_run_at=due,
    )


async def new_run(gw: Harness, known: set[str]) -> RunRecord:
    """The one run not in ``known``, once it exists (its id then joins ``known``)."""
    async with hang_guard("a new run"):
        while True:
            fresh = [r for r in await gw.db.runs.list(limit=50) if r.run_id not in known]
            if fresh:
                (run,) = fresh
                known.add(run.run_id)
                return run
            await asyncio.sleep(0.02)


def shape(record: RunRecord | SessionRecord, without: frozenset[str]) -> dict[str, Any]:
    """``record``'s columns but ``without``."""
    values = run_columns(record) if isinstance(record, RunRecord) else asdict(record)
    return {k: v for k, v in values.items() if k not in without}


async def test_every_origin_gives_a_run_of_one_shape(tmp_path: Path) -> None:
    async with serving(tmp_path) as (gw, fake):
        known: set[str] = set()
        runs: dict[str, RunRecord] = {}
        # The chat: its agent spawns from the chat's own session.
        await fake.push_event(
            fake.message(f"<@{BOT_USER_ID}> {LABEL} {TASK}", channel=CHANNEL, ts=THREAD)
        )
        runs["chat"] = await new_run(gw, known)
        # An MCP client.
        async with client(gw, TOKEN) as session:
            accepted = await call(session, "spawn", {"task": TASK, "label": LABEL, "to": TARGET})
        runs["mcp"] = await new_run(gw, known)
        assert runs["mcp"].run_id == accepted["runId"]
        # A scheduled occurrence.
        due = float(int(time.time()) - 1)
        await JobsTable(gw.db).insert(job("shape", due=due))
        gw.app[SCHEDULER].wake()
        runs["schedule"] = await new_run(gw, known)
        # The CLI, a process of its own, through the HTTP API.
        config = tmp_path / "cli.json"
        config.write_text(json.dumps({"gateway": {"auth": {"token": TOKEN}}}), "utf-8")
        code, out, err = await cli(
            "spawn", TASK, "--label", LABEL, "--to", TARGET, "--url", gw.base_url,
            "-c", str(config),
        )  # fmt: skip
        assert code == 0, err
        runs["cli"] = await new_run(gw, known)
        assert runs["cli"].run_id in out

        final = {origin: await gw.finished(run.run_id) for origin, run in runs.items()}
        children = {
            origin: await gw.store.get(run.child_session_key) for origin, run in final.items()
        }

    assert {run.progress.status for run in final.values()} == {"done"}
    assert {run.progress.result_text for run in final.values()} == {"done: shape"}
    shapes = {origin: shape(run, PER_RUN | ORIGIN) for origin, run in final.items()}
    assert shapes["mcp"] == shapes["chat"]
    assert shapes["schedule"] == shapes["chat"]
    assert shapes["cli"] == shapes["chat"]
    thread_key = THREAD.replace(".", "_")
    assert final["chat"].request.parent_session_key == (
        f"agent:main:slack:channel:c0123456789:thread:{thread_key}"
    )
    # Every one announces in the chat; only the occurrence names its job and due time.
    origins = [run.request.origin for run in final.values()]
    assert {(o.channel, o.chat_id, o.thread_id) for o in origins if o} == {
        ("slack", CHANNEL, THREAD)
    }
    assert None not in origins
    assert [
        (o, r.request.job_id, r.request.occurrence_at) for o, r in final.items() if r.request.job_id
    ] == [("schedule", "shape", due)]
    sessions = {}
    for origin, child in children.items():
        assert isinstance(child, SessionRecord), origin
        sessions[origin] = shape(child, SESSION_PER_RUN)
    assert sessions["mcp"] == sessions["chat"]
    assert sessions["schedule"] == sessions["chat"]
    assert sessions["cli"] == sessions["chat"]


async def test_an_occurrence_another_writer_took_keeps_no_run_and_no_session(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path) as (gw, _fake):
        jobs = JobsTable(gw.db)
        due = float(int(time.time()) - 1)
        # Another writer (a replica) recorded the due time and moved the job on since this
        # pass read it: the spawn's transaction writes its session and run, then the
        # occurrence, which finds the due time taken.
        await jobs.insert(replace(job("taken", due=due), next_run_at=due + 3600))
        stale = replace(job("taken", due=due), next_run_at=due)
        await gw.app[SCHEDULER].fire(stale, due + 1)
        assert await gw.db.runs.list(limit=50) == []
        sessions = await gw.db.sessions.list(include_subagents=True, limit=100)
        assert [s.key for s in sessions if s.is_subagent] == []
        assert await jobs.occurrences("taken") == []
        after = await jobs.get("taken")
        assert after is not None
        assert (after.next_run_at, after.last_run_id) == (due + 3600, None)


async def test_a_run_that_cannot_be_recorded_keeps_no_occurrence(tmp_path: Path) -> None:
    async with serving(tmp_path) as (gw, _fake):
        jobs = JobsTable(gw.db)
        due = float(int(time.time()) + 3600)  # not due: the scheduler leaves it alone
        record = await jobs.insert(job("twice", due=due, task="task-slow: twice"))
        door = gw.subagents.door
        request = SpawnRequest(task="task-slow: twice", label=LABEL)

        def nothing(conn: Connection, run_id: str) -> None:
            return None

        first = await door.spawn(
            door.target(TARGET), request, occurrence=Occurrence("twice", due, nothing)
        )
        assert isinstance(first, SpawnAccepted)

        def recorded(conn: Connection, run_id: str) -> None:
            advance(conn, record, [(due, "ran")], due + 3600, due, run_id=run_id)

        # One run per job and due time, ever: the second run's insert fails, and the
        # occurrence its transaction would have recorded goes with it.
        again = await door.spawn(
            door.target(TARGET), request, occurrence=Occurrence("twice", due, recorded)
        )
        assert isinstance(again, SpawnRefused)
        assert [r.run_id for r in await gw.db.runs.list(limit=50)] == [first.run_id]
        assert await jobs.occurrences("twice") == []
        after = await jobs.get("twice")
        assert after is not None
        assert (after.next_run_at, after.last_run_id) == (due, None)


@pytest.mark.parametrize("text", ["teams:abc", "slack:not-an-id", "discord:123456789012345678"])
async def test_a_target_the_door_cannot_use_is_named(tmp_path: Path, text: str) -> None:
    async with serving(tmp_path) as (gw, _fake):
        with pytest.raises(ChatTargetError, match="chat target") as raised:
            gw.subagents.door.target(text)
        assert text in str(raised.value)
