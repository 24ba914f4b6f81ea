"""sessions_spawn end to end: accepted at once, the child runs, the announce lands."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from gateway.constants import MAX_SPAWNS_PER_TURN
from gateway.sessions import read_transcript
from gateway.subagents import SpawnRequest
from gateway.usage import format_cost, format_tokens
from tests.gateway.harness import running_gateway

STATS = re.compile(
    r"\n\nStats: runtime \d+s • tokens [\d.]+k? \(in [\d.]+k? / out [\d.]+k?\) • est \$[\d.]+"
    r" • sessionKey agent:main:subagent:[0-9a-f-]{36} • sessionId [0-9a-f-]{36}"
    r" • transcript (/\S+\.jsonl)$"
)


async def test_a_chat_turn_replies_in_the_same_chat_and_thread(
    tmp_path: Path, database_url: str | None
) -> None:
    async with running_gateway(tmp_path, database_url=database_url) as gw:
        await gw.say("hello", chat_id="c9", thread_id="t1")
        reply = await gw.reply("c9")
        assert (reply.text, reply.thread_id, reply.channel) == ("hi there", "t1", "memory")
        session = await gw.store.require("agent:main:memory:channel:c9:thread:t1")
        lines = read_transcript(gw.store.transcript_path(session)).records
        roles = [r["message"]["role"] for r in lines if r["type"] == "message"]
        assert roles == ["user", "assistant"]
        assert session.usage.input > 0
        assert session.usage.output > 0


async def test_spawn_is_accepted_and_the_announce_carries_the_pinned_stats_line(
    tmp_path: Path,
    database_url: str | None,
) -> None:
    async with running_gateway(tmp_path, database_url=database_url) as gw:
        await gw.say("bg task: tides", thread_id="t1")
        accepted = await gw.reply()
        match = re.fullmatch(r"accepted ([0-9a-f-]{36})", accepted.text)
        assert match, accepted.text
        run = await gw.finished(match.group(1))
        (announce,) = await gw.announce()
        assert announce.thread_id == "t1"
        assert announce.chat_id == "c1"
        assert announce.run_id == run.run_id
        body, _, _ = announce.text.partition("\n\nStats:")
        assert body == "ANNOUNCE: done: tides"
        stats = STATS.search(announce.text)
        assert stats, announce.text
        assert Path(stats.group(1)).is_absolute()
        assert run.progress.status == "done"
        assert run.progress.result_text == "done: tides"
        assert (await gw.delivery(run.run_id)).state == "delivered"
        final = await gw.db.runs.get(run.run_id)
        assert final is not None
        assert final.delivery.announce_state == "delivered"
        # The child saw only its task, with the sub-agent tool set.
        child = await gw.store.require(run.child_session_key)
        messages = await gw.store.history(child.key, include_tools=True)
        assert messages[0]["role"] == "user"
        assert messages[0]["content"] == "task: tides"
        assert child.parent_key == "agent:main:memory:channel:c1:thread:t1"


async def test_the_announce_goes_to_the_thread_captured_at_spawn(
    tmp_path: Path, database_url: str | None
) -> None:
    async with running_gateway(tmp_path, database_url=database_url) as gw:
        gate = asyncio.Event()
        blocker = gw.lanes.subagent.submit(gate.wait)  # hold the lane: run stays queued
        await gw.say("bg task: first", dm=True, thread_id="thread-a")
        accepted = await gw.reply("c1")
        run_id = accepted.text.split()[-1]
        # The conversation moves on to another thread of the same DM session.
        await gw.say("hello", dm=True, thread_id="thread-b")
        await gw.reply("c1", count=2)
        session = await gw.store.require("agent:main:memory:dm:u1")
        assert session.origin is not None
        assert session.origin.thread_id == "thread-b"
        gate.set()
        await blocker
        await gw.finished(run_id)
        (announce,) = await gw.announce()
        assert announce.thread_id == "thread-a"


async def test_at_most_ten_spawns_are_honoured_per_model_turn(
    tmp_path: Path, database_url: str | None
) -> None:
    async with running_gateway(tmp_path, database_url=database_url) as gw:
        await gw.say("many")
        await gw.reply()
        runs = await gw.db.runs.list()
        assert len(runs) == MAX_SPAWNS_PER_TURN
        session = await gw.store.require("agent:main:memory:channel:c1")
        tool_lines = await gw.store.history(session.key, include_tools=True)
        errors = [m for m in tool_lines if m["role"] == "tool" and "at most 10" in m["content"]]
        assert len(errors) == 2


async def test_announce_skip_posts_nothing(tmp_path: Path, database_url: str | None) -> None:
    async with running_gateway(tmp_path, database_url=database_url) as gw:
        ctx = await gw.context()
        result = await gw.spawn(ctx, SpawnRequest(task="task: SKIPME"))
        run = await gw.finished(result["runId"])
        assert run.progress.status == "done"
        assert run.delivery.announce_state == "skipped"
        assert gw.channel.sent == []
        assert await gw.db.outbox.get_by_run(run.run_id) is None


async def test_submit_error_ends_the_run_as_error_with_a_status_line(
    tmp_path: Path, database_url: str | None
) -> None:
    async with running_gateway(tmp_path, database_url=database_url) as gw:
        await gw.say("bg task-fail: fly")
        run_id = (await gw.reply()).text.split()[-1]
        run = await gw.finished(run_id)
        assert (run.progress.status, run.progress.error) == ("error", "cannot fly")
        (announce,) = await gw.announce()
        assert re.match(r'^Sub-agent "bg" failed after \d+s: cannot fly\n', announce.text)


async def test_submit_result_ends_the_run_with_its_result(
    tmp_path: Path, database_url: str | None
) -> None:
    async with running_gateway(tmp_path, database_url=database_url) as gw:
        ctx = await gw.context()
        result = await gw.spawn(ctx, SpawnRequest(task="task-submit: x"))
        run = await gw.finished(result["runId"])
        assert (run.progress.status, run.progress.result_text) == ("done", "submitted x")


async def test_run_timeout_aborts_the_child(tmp_path: Path, database_url: str | None) -> None:
    async with running_gateway(tmp_path, database_url=database_url) as gw:
        ctx = await gw.context()
        await gw.store.set_origin(ctx.session_key, None)
        result = await gw.spawn(
            ctx, SpawnRequest(task="task-slow: x", run_timeout_seconds=0.05, label="slow")
        )
        run = await gw.finished(result["runId"])
        assert run.progress.status == "timeout"
        assert run.delivery.announce_state == "no_origin"
        assert run.delivery.announce_text is not None
        assert run.delivery.announce_text.startswith('Sub-agent "slow" timed out after 0s.')


async def test_tokens_and_cost_cover_the_whole_run_including_the_announce(
    tmp_path: Path, database_url: str | None
) -> None:
    async with running_gateway(tmp_path, database_url=database_url) as gw:
        ctx = await gw.context()
        result = await gw.spawn(ctx, SpawnRequest(task="task: sum"))
        run = await gw.finished(result["runId"])
        child = await gw.store.require(run.child_session_key)
        contents = await gw.store.read(child.key)
        outputs = [
            r["message"]["usage"]["output"] for r in contents.messages if r["message"].get("usage")
        ]
        assert len(outputs) == 2  # the task's reply and the announce turn
        assert run.progress.usage.output == sum(outputs) == child.usage.output
        expected = (run.progress.usage.input * 1.0 + run.progress.usage.output * 2.0) / 1e6
        assert run.progress.cost_usd is not None
        assert abs(run.progress.cost_usd - expected) < 1e-12
        # The announce states the totals its run ends with, the announce turn's included
        # (they are saved by the same write as the final status).
        usage = run.progress.usage
        stated = f"(in {format_tokens(usage.input)} / out {format_tokens(usage.output)})"
        assert stated in (run.delivery.announce_text or ""), run.delivery.announce_text
        assert f"est {format_cost(run.progress.cost_usd)}" in (run.delivery.announce_text or "")


async def test_a_reply_goes_to_the_thread_of_the_message_it_answers(
    tmp_path: Path, database_url: str | None
) -> None:
    async with running_gateway(tmp_path, database_url=database_url) as gw:
        # Hold the DM session's lane so the first turn waits while the person moves threads.
        key = "agent:main:memory:dm:u1"
        gate = asyncio.Event()
        blocker = gw.lanes.session.submit(gate.wait, key=key)
        await gw.say("hello", dm=True, thread_id="thread-a")
        await gw.say("hello", dm=True, thread_id="thread-b")
        gate.set()
        await blocker
        await gw.reply("c1", count=2)
        replies = [m for m in gw.channel.sent if m.kind == "reply"]
        assert [(m.thread_id, m.text) for m in replies] == [
            ("thread-a", "hi there"),
            ("thread-b", "hi there"),
        ]
