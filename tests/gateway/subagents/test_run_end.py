"""A run's end, decided once: no announce turn for a run its requester's turn takes into a
batch, and no follow-up turn for a batch whose runs were all stopped.

The model is the wire-level OpenAI fake. A person's ``fan <chat>`` makes the agent spawn three
children in one model call and yield in the next; each child answers at once. The yield's
answer is held until the children have ended and wait for the turn to end — the moment when a
run used to decide alone, and spend an announce turn on a result its batch would take.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

from gateway.sessions import SessionKey, read_transcript
from gateway.subagents import COMPLETION_PREFIX
from tests.fakes.openai import FakeOpenAI, last_user_text, openai_server
from tests.fakes.provider_server import Step
from tests.gateway.harness import (
    HANG_GUARD_SECONDS,
    Harness,
    fake_model_config,
    running_gateway,
)

BATCHES = 200
CHILDREN = 3
AT_ONCE = 4
#: Room for every child of the chats in flight: a child that waits for its requester's turn
#: has left its lane slot, but one still running holds one.
WIDE = {"agent": {"subagents": {"maxConcurrent": AT_ONCE * CHILDREN, "maxChildrenPerSession": 5}}}
FOLLOWUP_HEAD = f"{COMPLETION_PREFIX} The sub-agents you waited for"


def chat_key(chat_id: str) -> str:
    return str(SessionKey.chat_channel("main", "memory", chat_id, None))


class Model:
    """Answers by request content (module docstring); counts each kind of call."""

    def __init__(self, fake: FakeOpenAI, gw_ref: list[Harness], *, hold_children: bool) -> None:
        self.fake = fake
        self._gw = gw_ref
        self.calls: Counter[str] = Counter()
        self.children_gate = asyncio.Event()
        #: Set once every child has asked the model, and once the yield was answered.
        self.children_asked = asyncio.Event()
        self.yielded = asyncio.Event()
        if not hold_children:
            self.children_gate.set()
        self._tasks: set[asyncio.Task[None]] = set()

    def __call__(self, body: Any) -> Step:
        messages = body["messages"]
        users = [m for m in messages if m["role"] == "user"]
        first = str(users[0]["content"]) if users else ""
        latest = last_user_text(body)
        if first.startswith("child "):
            if latest.startswith("[announce]"):
                self.calls["announce"] += 1
                return self.fake.text_step("announced")
            self.calls["child"] += 1
            if self.calls["child"] == CHILDREN:
                self.children_asked.set()
            return self.fake.text_step(f"result of {first}", hold=self.children_gate)
        if latest.startswith(FOLLOWUP_HEAD):
            self.calls["followup"] += 1
            return self.fake.text_step(f"combined {latest.count('status: ')}")
        last = messages[-1]
        if last["role"] == "tool":
            self.calls["yield"] += 1
            self.yielded.set()
            spawned = [
                json.loads(m["content"])["runId"]
                for m in messages
                if m["role"] == "tool" and '"runId"' in str(m["content"])
            ]
            return self._calls(("sessions_yield", {}), hold=self._when_waiting(spawned))
        if latest.startswith("fan "):
            self.calls["spawn"] += 1
            chat = latest.removeprefix("fan ")
            tasks = [("sessions_spawn", {"task": f"child {chat} {n}"}) for n in range(CHILDREN)]
            return self._calls(*tasks)
        self.calls["other"] += 1
        return self.fake.text_step(f"echo {latest}")

    def _calls(self, *calls: tuple[str, Any], hold: asyncio.Event | None = None) -> Step:
        listed = [(f"call-{uuid.uuid4().hex[:8]}", name, args) for name, args in calls]
        body = orjson.dumps(self.fake.completion(content=None, tool_calls=listed))
        return Step(body=body, hold=hold)

    def _when_waiting(self, run_ids: list[str]) -> asyncio.Event:
        """An event set once every run of ``run_ids`` has ended and waits for the turn
        (children held by the test are not waited for: they are still running)."""
        ready = asyncio.Event()
        if not self.children_gate.is_set():
            ready.set()
            return ready
        task = asyncio.ensure_future(self._watch(run_ids, ready))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return ready

    async def _watch(self, run_ids: list[str], ready: asyncio.Event) -> None:
        async with asyncio.timeout(HANG_GUARD_SECONDS):
            await self._gw[0].turn_factory.turns.until_waiting(run_ids)
        ready.set()


async def test_yielded_batches_cost_exactly_six_model_calls_each(tmp_path: Path) -> None:
    """200 batches of 3, 4 chats at a time: the spawning call, the yielding call, three
    children and one follow-up — never an announce turn, though every child ends before
    its requester's yield."""
    gw_ref: list[Harness] = []
    async with (
        openai_server() as fake,
        running_gateway(tmp_path, config=fake_model_config(fake, WIDE)) as gw,
    ):
        gw_ref.append(gw)
        model = Model(fake, gw_ref, hold_children=False)
        fake.responder = model
        chats = [f"c{n}" for n in range(BATCHES)]
        for start in range(0, BATCHES, AT_ONCE):
            group = chats[start : start + AT_ONCE]
            for chat in group:
                await gw.say(f"fan {chat}", chat_id=chat)
            for chat in group:
                reply = await gw.reply(chat)
                assert reply.text.startswith(f"combined {CHILDREN}\n\nStats: {CHILDREN} sub-agents")
        await gw.runs_idle()
        assert model.calls == {
            "spawn": BATCHES,
            "yield": BATCHES,
            "child": BATCHES * CHILDREN,
            "followup": BATCHES,
        }
        assert len(fake.requests) == 6 * BATCHES
        runs = await gw.db.runs.list(limit=BATCHES * CHILDREN + 1)
        assert len(runs) == BATCHES * CHILDREN
        assert {(r.progress.status, r.delivery.state, r.delivery.announce_state) for r in runs} == {
            ("done", "consumed", "consumed")
        }
        assert not [m for m in gw.channel.sent if m.kind == "announce"]


async def test_stop_after_a_yield_runs_no_follow_up_and_the_agent_learns_of_it(
    tmp_path: Path, database_url: str | None
) -> None:
    gw_ref: list[Harness] = []
    async with (
        openai_server() as fake,
        running_gateway(
            tmp_path, database_url=database_url, config=fake_model_config(fake, WIDE)
        ) as gw,
    ):
        gw_ref.append(gw)
        model = Model(fake, gw_ref, hold_children=True)  # the children never answer
        fake.responder = model
        await gw.say("fan c1")
        async with asyncio.timeout(HANG_GUARD_SECONDS):
            await model.children_asked.wait()
            await model.yielded.wait()
            await gw.lanes.session.join()  # the yielding turn has ended
        (batch,) = await gw.db.batches.open_batches()
        asked = len(fake.requests)
        sent = len(gw.channel.sent)
        await gw.say("/stop")
        (answer,) = await gw.wait_sent(lambda m: m.kind == "notice")
        assert answer.text == f"Stopped {CHILDREN} sub-agents."
        for run_id in batch.run_ids:
            await gw.finished(run_id)
        await gw.runs_idle()
        # No model call after the stop, and the /stop answer is the only line in the chat.
        assert len(fake.requests) == asked
        assert len(gw.channel.sent) == sent + 1
        assert model.calls["followup"] == model.calls["announce"] == 0
        runs = await gw.db.batches.runs_of(batch)
        assert {(r.progress.status, r.delivery.state) for r in runs} == {("cancelled", "consumed")}
        # The transcript holds the runs' completions (the agent will see them) and the line.
        session = await gw.store.require(chat_key("c1"))
        records = read_transcript(gw.store.transcript_path(session)).records
        (written,) = [r for r in records if r.get("meta", {}).get("kind") == "subagent_followup"]
        assert written["message"]["content"].count("status: cancelled") == CHILDREN
        events = [
            r for r in records if r.get("type") == "event" and r.get("event") == "batch_stopped"
        ]
        assert [e["data"]["text"] for e in events] == [f"Stopped {CHILDREN} sub-agents."]
        # The person's next message reaches an agent that knows the runs were cancelled.
        await gw.say("what happened?")
        reply = await gw.reply()
        assert reply.text == "echo what happened?"
        last = fake.requests[-1].body["messages"]
        assert any(
            m["role"] == "user" and str(m["content"]).count("status: cancelled") == CHILDREN
            for m in last
        )


async def test_a_batch_stopped_run_by_run_posts_one_line_itself_and_runs_no_turn(
    tmp_path: Path,
) -> None:
    """Runs of a yielded batch stopped one by one (the API's abort, not ``/stop``): no answer
    told the chat, so the batch posts Herald's one line itself — and still no model call."""
    gw_ref: list[Harness] = []
    async with (
        openai_server() as fake,
        running_gateway(tmp_path, config=fake_model_config(fake, WIDE)) as gw,
    ):
        gw_ref.append(gw)
        model = Model(fake, gw_ref, hold_children=True)
        fake.responder = model
        await gw.say("fan c1")
        async with asyncio.timeout(HANG_GUARD_SECONDS):
            await model.children_asked.wait()
            await model.yielded.wait()
            await gw.lanes.session.join()
        (batch,) = await gw.db.batches.open_batches()
        asked = len(fake.requests)
        for run_id in batch.run_ids:
            await gw.runs.abort(run_id)
        (line,) = await gw.wait_sent(lambda m: m.text.startswith("Stopped "))
        assert line.text == f"Stopped {CHILDREN} sub-agents."
        await gw.runs_idle()
        assert len(fake.requests) == asked  # no follow-up turn, no announce turn
        done = await gw.db.batches.get(batch.batch_id)
        assert done is not None
        assert (done.state, done.stopped_at) == ("done", None)
