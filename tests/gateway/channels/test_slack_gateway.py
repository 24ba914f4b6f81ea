"""The gateway with the real Slack channel against the fake Slack: replies and announces in
the right thread, chat commands, and a spawn whose thread the conversation has left."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from tests.fakes.slack import BOT_USER_ID, FakeSlack
from tests.gateway.harness import Harness, running_gateway
from tests.gateway.slack_fake import joined, slack_on_fake

MENTION = f"<@{BOT_USER_ID}>"


@asynccontextmanager
async def slack_gateway(tmp_path: Path) -> AsyncIterator[tuple[Harness, FakeSlack]]:
    # Posts are read whole here; streamed replies have their own tests.
    async with (
        slack_on_fake(streaming="off") as (fake, channel),
        running_gateway(tmp_path) as gw,
        joined(gw, channel, fake),
    ):
        yield gw, fake


async def test_a_spawn_announces_in_its_thread_after_the_conversation_moved_on(
    tmp_path: Path,
) -> None:
    async with slack_gateway(tmp_path) as (gw, fake):
        gate = asyncio.Event()
        blocker = gw.lanes.subagent.submit(gate.wait)  # the run waits, queued
        first = fake.message(f"{MENTION} bg task: tides", channel="C1")
        await fake.push_event(first)
        (accepted,) = await fake.wait_posts(1)
        assert accepted.thread_ts == first["ts"]  # replyInThread: a new thread
        run_id = accepted.text.split()[-1]
        # The person starts a new thread before the sub-agent finishes.
        second = fake.message(f"{MENTION} hello", channel="C1")
        await fake.push_event(second)
        posts = await fake.wait_posts(2)
        assert (posts[1].text, posts[1].thread_ts) == ("hi there", second["ts"])
        gate.set()
        await blocker
        await gw.finished(run_id)
        assert (await gw.delivery(run_id)).state == "delivered"
        announce = (await fake.wait_posts(3))[2]
        assert announce.channel == "C1"
        assert announce.thread_ts == first["ts"]
        assert announce.text.startswith("ANNOUNCE: done: tides")
        assert "Stats: runtime " in announce.text


async def test_thread_replies_stay_in_their_thread_and_session(tmp_path: Path) -> None:
    async with slack_gateway(tmp_path) as (gw, fake):
        top = fake.message(f"{MENTION} hello", channel="C1")
        await fake.push_event(top)
        await fake.wait_posts(1)
        reply = fake.message("hello again", channel="C1", thread_ts=top["ts"])
        await fake.push_event(reply)
        posts = await fake.wait_posts(2)
        assert posts[1].thread_ts == top["ts"]
        sessions = await gw.store.list()
        slack = [s for s in sessions if ":slack:" in s.key]
        assert len(slack) == 1
        history = await gw.store.history(slack[0].key)
        assert [m["content"] for m in history] == ["hello", "hi there", "hello again", "hi there"]


async def test_chat_commands_work_in_slack_messages(tmp_path: Path) -> None:
    async with slack_gateway(tmp_path) as (gw, fake):
        await fake.push_event(fake.message("!spawn task: cmd", channel="D1", user="U7"))
        (started,) = await fake.wait_posts(1)
        assert started.text.startswith("Started sub-agent run ")
        runs = await gw.db.runs.list()
        assert runs[0].request.parent_session_key == "agent:main:slack:dm:u7"
        await gw.finished(runs[0].run_id)
        announce = (await fake.wait_posts(2))[1]
        assert announce.channel == "D1"
        assert announce.text.startswith("ANNOUNCE: done: cmd")
