"""Chat turns: one message → one agent turn → one answer, on bounded lanes.

The model is the wire-level OpenAI fake; a ``hold`` gate keeps it "thinking" for exactly as
long as a test needs. Lanes are built small here (the gateway's session lane holds
``SESSION_LANE_MAX_QUEUED`` turns; filling it for real would take 10,000 messages).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from gateway.constants import SESSION_LANE_MAX_QUEUED, SESSION_LANE_WIDTH
from gateway.runtime import BUSY_REPLY
from lanes import Lane
from tests.fakes.openai import FakeOpenAI, HeldReplies, last_user_text
from tests.gateway.harness import (
    HANG_GUARD_SECONDS,
    Harness,
    fake_model_config,
    running_gateway,
)
from tests.gateway.runtime.conftest import MakeRouter, MakeTurns

CHAT_KEY = "agent:main:memory:channel:c1"


def echo(body: Any) -> str:
    return f"re: {last_user_text(body)}"


async def arrived(held: HeldReplies, count: int = 1) -> None:
    async with asyncio.timeout(HANG_GUARD_SECONDS):
        await held.arrived(count)


async def test_a_full_session_lane_tells_the_chat_it_is_busy_and_drops_nothing(
    gw: Harness, model: FakeOpenAI, make_turns: MakeTurns, make_router: MakeRouter
) -> None:
    assert gw.lanes.session.max_queued == SESSION_LANE_MAX_QUEUED
    held = HeldReplies(model, echo)
    model.responder = held
    session_lane = Lane("session", SESSION_LANE_WIDTH, max_queued=2)
    router = make_router(make_turns(session_lane=session_lane))
    for n in range(4):  # one chat floods: its turns run one at a time
        await router.handle_inbound(gw.channel.inbound(f"message {n}"))
    # The first turn runs (the model holds it), two wait, the fourth did not fit.
    assert (session_lane.active, session_lane.queued) == (1, 2)
    (busy,) = gw.channel.sent
    assert (busy.chat_id, busy.kind, busy.text) == ("c1", "notice", BUSY_REPLY)

    held.gate.set()
    replies = await gw.wait_sent(lambda m: m.kind == "reply", 3)
    assert [m.text for m in replies] == ["re: message 0", "re: message 1", "re: message 2"]
    assert len(gw.channel.sent) == 4  # every message answered: three replies, one "busy"
    assert len(held.asked) == 3


async def test_a_turn_that_cannot_queue_for_a_main_slot_answers_busy(
    gw: Harness, model: FakeOpenAI, make_turns: MakeTurns
) -> None:
    model.responder = lambda body: model.text_step(echo(body))
    main_lane = Lane("main", 0, max_queued=1)  # paused: turns wait for a slot
    turns = make_turns(main_lane=main_lane)
    first = await gw.store.ensure("agent:main:memory:channel:c0")
    second = await gw.store.ensure("agent:main:memory:channel:c1")
    waiting = turns.submit_turn(first, "one", gw.channel.inbound("one", chat_id="c0"))
    busy = turns.submit_turn(second, "two", gw.channel.inbound("two", chat_id="c1"))
    async with asyncio.timeout(HANG_GUARD_SECONDS):
        await busy
    assert [(m.chat_id, m.kind, m.text) for m in gw.channel.sent] == [("c1", "reply", BUSY_REPLY)]
    main_lane.max_concurrent = 1
    async with asyncio.timeout(HANG_GUARD_SECONDS):
        await waiting
    assert [(m.chat_id, m.text) for m in gw.channel.sent] == [("c1", BUSY_REPLY), ("c0", "re: one")]
    assert [last_user_text(r.body) for r in model.requests] == ["one"]


async def test_each_turn_sends_the_conversation_so_far_and_records_its_usage(
    gw: Harness, model: FakeOpenAI
) -> None:
    model.reply_text("first answer", prompt_tokens=100, completion_tokens=10)
    model.reply_text("second answer", prompt_tokens=200, completion_tokens=20)
    await gw.say("first question")
    assert (await gw.reply()).text == "first answer"
    await gw.say("second question")
    assert (await gw.reply(count=2)).text == "second answer"
    sent = [(m["role"], m["content"]) for m in model.requests[1].body["messages"]]
    assert sent[1:] == [
        ("user", "first question"),
        ("assistant", "first answer"),
        ("user", "second question"),
    ]
    session = await gw.store.require(CHAT_KEY)
    assert (session.usage.input, session.usage.output) == (300, 30)
    assert session.cost_usd is not None
    assert abs(session.cost_usd - (300 * 1.0 + 30 * 2.0) / 1e6) < 1e-12


async def test_a_model_error_is_the_reply_and_the_next_turn_rereads_the_transcript(
    gw: Harness, model: FakeOpenAI
) -> None:
    model.reply_error(400, "this model does not exist", kind="invalid_request_error")
    model.reply_text("better now")
    await gw.say("first try")
    failed = await gw.reply()
    assert failed.text.startswith("Sorry, the model call failed: ")
    assert "this model does not exist" in failed.text
    await gw.say("second try")
    assert (await gw.reply(count=2)).text == "better now"
    # The transcript kept the failed turn's message; the next turn sends it too.
    sent = [(m["role"], m["content"]) for m in model.requests[1].body["messages"]]
    assert sent[1:] == [("user", "first try"), ("user", "second try")]
    events = [r for r in (await gw.store.read(CHAT_KEY)).records if r.get("type") == "event"]
    assert [e["event"] for e in events] == ["error"]
    assert "this model does not exist" in events[0]["data"]["error"]


async def test_an_empty_model_reply_is_replaced_by_a_note(gw: Harness, model: FakeOpenAI) -> None:
    model.reply_text("")
    await gw.say("say nothing")
    assert (await gw.reply()).text == "(the model gave an empty reply)"


async def test_stop_cancels_the_sessions_running_and_queued_turns_and_says_stopped(
    gw: Harness, model: FakeOpenAI
) -> None:
    held = HeldReplies(model, echo)
    model.responder = held
    await gw.say("slow one")
    await gw.say("queued behind it")
    await arrived(held)
    assert gw.turns.stop("agent:main:memory:channel:elsewhere") == 0
    assert gw.turns.stop(CHAT_KEY) == 2
    (stopped,) = await gw.wait_sent(lambda m: m.kind == "notice")
    assert (stopped.chat_id, stopped.text) == ("c1", "Stopped.")
    async with asyncio.timeout(HANG_GUARD_SECONDS):
        await gw.lanes.session.join()
    assert [m.kind for m in gw.channel.sent] == ["notice"]  # no reply for either
    assert len(held.asked) == 1


async def test_a_turn_past_the_agents_timeout_is_told_so(tmp_path: Path, model: FakeOpenAI) -> None:
    held = HeldReplies(model, echo)  # never released: the turn times out
    model.responder = held
    config = fake_model_config(model, {"agent": {"timeoutSeconds": 0.2}})
    async with running_gateway(tmp_path, config=config) as gw:
        await gw.say("take your time")
        reply = await gw.reply()
    assert reply.text.startswith("Sorry, this took longer than ")


async def test_a_turn_out_of_iterations_says_how_many_calls_it_made(
    tmp_path: Path, model: FakeOpenAI
) -> None:
    model.reply_tool_calls([("call_1", "ls", {"path": "."})], text="Let me look.")
    model.reply_tool_calls([("call_2", "ls", {"path": "."})])
    config = fake_model_config(model, {"agent": {"maxIterations": 2}})
    async with running_gateway(tmp_path, config=config) as gw:
        await gw.say("look around")
        reply = await gw.reply()
    assert reply.text == "Let me look.\n\n(stopped after 2 model calls without a final answer)"


async def test_a_turn_the_gateways_stop_cuts_off_stays_recorded_to_be_resumed(
    gw: Harness, model: FakeOpenAI
) -> None:
    held = HeldReplies(model, echo)  # never released: the drain ends before the reply
    model.responder = held
    await gw.say("slow one")
    await arrived(held)
    await gw.turns.close(0)
    # Not "Stopped.": nobody asked it to stop. The message stays recorded, so the next start
    # (or, in a cluster, a live replica) resumes its turn from the transcript.
    assert gw.channel.sent == []
    (record,) = await gw.db.inbound.pending()
    assert record.message.text == "slow one"
