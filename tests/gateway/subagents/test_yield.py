"""``sessions_yield``: the runs of a batch, one follow-up turn, one reply with the batch's stats.

The scripted model spawns and yields in one answer (``fan a b``), and answers the follow-up
by quoting the results it was given, so each test sees what reached the model.
"""

from __future__ import annotations

import asyncio
import copy
import re
from pathlib import Path
from typing import Any

from channels import OutboundMessage
from gateway.sessions import read_transcript
from tests.gateway.harness import TEST_SCRIPT, Harness, running_gateway

CHAT_KEY = "agent:main:memory:channel:c1:thread:t1"
STATS = re.compile(
    r"^Stats: (?P<n>\d+) sub-agents \((?P<counts>[^)]+)\) • runtime \d+s"
    r" • tokens [\d.]+k? \(in [\d.]+k? / out [\d.]+k?\) • est \$[\d.]+"
    r" • runs (?P<runs>[0-9a-f]{8}(, [0-9a-f]{8})*)$"
)


def spawn(task: str, label: str) -> dict[str, Any]:
    return {"name": "sessions_spawn", "arguments": {"task": task, "label": label}}


def yield_call(**arguments: Any) -> dict[str, Any]:
    return {"name": "sessions_yield", "arguments": arguments}


def script() -> dict[str, Any]:
    rules: list[dict[str, Any]] = [
        {
            "match": r"^fan (?P<a>\S+) (?P<b>\S+)$",
            "reply": "",
            "toolCalls": [
                spawn("task: ${a}", "${a}"),
                spawn("task: ${b}", "${b}"),
                yield_call(message="Working on ${a} and ${b}."),
            ],
        },
        {
            "match": r"^fanslow$",
            "reply": "",
            "toolCalls": [
                spawn("task: quick", "quick"),
                spawn("task-slow: long", "long"),
                # Room for the quick one to end first on either backend (a cluster's queue
                # hands a run to its worker with a poll, not at once).
                yield_call(timeoutSeconds=2),
            ],
        },
        {
            "match": r"^twice$",
            "reply": "",
            "toolCalls": [
                spawn("task: one", "one"),
                yield_call(message="first yield"),
                yield_call(message="second yield"),
            ],
        },
        {
            "match": r"^yield alone$",
            "reply": "",
            "toolCalls": [yield_call()],
            "afterTool": "nothing: {result.status}",
        },
        {
            "match": (
                r"^\[sub-agent completion\] The sub-agents you waited for[\s\S]*?"
                r"result:\n(?P<r1>[^\n]+)[\s\S]*?result:\n(?P<r2>[^\n]+)"
            ),
            "reply": "combined ${r1} | ${r2}",
        },
        {
            "match": r"^\[sub-agent completion\] The sub-agents[\s\S]*?result:\n(?P<r1>[^\n]+)",
            "reply": "only ${r1}",
        },
    ]
    data = copy.deepcopy(TEST_SCRIPT)
    data["rules"] = rules + data["rules"]
    return data


def quick_first(gw: Harness) -> None:
    """Hold a batch's timeout, once due, until its run labelled ``quick`` is final: how soon a
    queued run starts depends on the machine's load, what the test checks does not."""
    batches = gw.subagents.batches
    due = batches._due

    async def when_quick_is_done(batch_id: str) -> None:
        try:
            (quick,) = [r for r in await gw.db.runs.list() if r.request.label == "quick"]
            await gw.finished(quick.run_id)
        finally:  # the timeout fires whatever happened: the test's assertions say what
            due(batch_id)

    def held_due(batch_id: str) -> None:
        task = asyncio.ensure_future(when_quick_is_done(batch_id))
        held.add(task)
        task.add_done_callback(held.discard)

    held: set[asyncio.Task[None]] = set()
    batches._due = held_due  # type: ignore[method-assign]


def replies(gw: Harness) -> list[OutboundMessage]:
    return [m for m in gw.channel.sent if m.kind == "reply"]


async def test_a_yield_posts_its_message_then_one_combined_reply_with_the_batch_stats(
    tmp_path: Path,
    database_url: str | None,
) -> None:
    async with running_gateway(tmp_path, database_url=database_url, script=script()) as gw:
        # The children wait until the yield has formed the batch (the model is instant).
        gate = asyncio.Event()
        blocker = gw.lanes.subagent.submit(gate.wait)
        await gw.say("fan tea coffee", thread_id="t1")
        (first,) = await gw.wait_sent(lambda m: m.kind == "reply")
        gate.set()
        await blocker
        first, followup = await gw.wait_sent(lambda m: m.kind == "reply", count=2)
        assert (first.text, first.thread_id) == ("Working on tea and coffee.", "t1")
        body, _, stats = followup.text.partition("\n\n")
        assert body == "combined done: tea | done: coffee"  # both results, in spawn order
        assert followup.thread_id == "t1"
        match = STATS.fullmatch(stats)
        assert match, stats
        assert (match["n"], match["counts"]) == ("2", "2 done")
        runs = await gw.db.runs.list(oldest_first=True)
        assert match["runs"] == ", ".join(run.run_id[:8] for run in runs)
        # The runs posted nothing of their own, and their announce turn never ran.
        await gw.runs_idle()
        assert not [m for m in gw.channel.sent if m.kind == "announce"]
        for run in runs:
            assert (run.progress.status, run.delivery.announce_state, run.delivery.state) == (
                "done",
                "consumed",
                "consumed",
            )
            child = read_transcript(
                gw.store.transcript_path(await gw.store.require(run.child_session_key))
            ).records
            assert not any("[announce]" in str(r.get("message", {})) for r in child)
        (batch_id,) = {run.delivery.batch_id for run in runs}
        assert batch_id is not None
        batch = await gw.db.batches.get(batch_id)
        assert batch is not None
        assert batch.state == "done"
        assert batch.reply_text == followup.text
        # The follow-up's user message is in the transcript once, with its meta.
        session = await gw.store.require(CHAT_KEY)
        records = read_transcript(gw.store.transcript_path(session)).records
        metas = [r["meta"] for r in records if "kind" in r.get("meta", {})]
        assert metas == [{"kind": "subagent_followup", "batchId": batch_id}]
        assert len(replies(gw)) == 2


async def test_a_timed_out_batch_answers_with_what_finished_and_the_rest_come_later(
    tmp_path: Path,
    database_url: str | None,
) -> None:
    async with running_gateway(tmp_path, database_url=database_url, script=script()) as gw:
        quick_first(gw)
        await gw.say("fanslow", thread_id="t1")
        (followup,) = await gw.wait_sent(lambda m: m.kind == "reply")
        body, _, stats = followup.text.partition("\n\n")
        assert body == "only done: quick"
        match = STATS.fullmatch(stats)
        assert match, stats
        assert match["counts"] == "1 done, 1 running"
        _, slow = await gw.db.runs.list(oldest_first=True)
        assert slow.progress.status in ("queued", "running")
        refreshed = await gw.db.runs.get(slow.run_id)
        assert refreshed is not None
        assert refreshed.delivery.batch_id is None  # left the batch: it ends on its own
        await gw.runs.abort(slow.run_id)
        (announce,) = await gw.announce()
        assert announce.run_id == slow.run_id
        assert "was cancelled" in announce.text
        await gw.runs_idle()
        final = await gw.db.runs.get(slow.run_id)
        assert final is not None
        assert final.delivery.state == "delivered"  # into the conversation, once


async def test_a_yield_with_nothing_pending_says_so_and_the_turn_goes_on(
    tmp_path: Path, database_url: str | None
) -> None:
    async with running_gateway(tmp_path, database_url=database_url, script=script()) as gw:
        await gw.say("yield alone")
        assert (await gw.reply()).text == "nothing: nothing_pending"
        assert await gw.db.batches.open_batches() == []


async def test_a_second_yield_in_the_same_turn_is_not_run(
    tmp_path: Path, database_url: str | None
) -> None:
    async with running_gateway(tmp_path, database_url=database_url, script=script()) as gw:
        gate = asyncio.Event()
        blocker = gw.lanes.subagent.submit(gate.wait)
        await gw.say("twice")
        (first,) = await gw.wait_sent(lambda m: m.kind == "reply")
        assert first.text == "first yield"
        session = await gw.store.require("agent:main:memory:channel:c1")
        tools = [
            m
            for m in await gw.store.history(session.key, include_tools=True)
            if m["role"] == "tool"
        ]
        assert [t["content"] for t in tools[1:]][
            -1
        ] == "sessions_yield: not run, the run already ended"
        gate.set()
        await blocker
        await gw.wait_sent(lambda m: m.kind == "reply", count=2)
        batches = {run.delivery.batch_id for run in await gw.db.runs.list()}
        assert len(batches) == 1  # one batch, one follow-up
