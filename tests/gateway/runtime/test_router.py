"""The channels' inbound handler: a message → its agent and session → a command or a turn."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from channels.memory import MemoryChannel
from gateway.delivery import Replier
from gateway.runtime import HELP_TEXT, ChatCommands, ChatTurns, Router
from gateway.runtime.router import STOPPING_REPLY
from tests.fakes.openai import FakeOpenAI, HeldReplies, last_user_text
from tests.gateway.harness import (
    HANG_GUARD_SECONDS,
    Harness,
    fake_model_config,
    running_gateway,
)
from tests.gateway.runtime.conftest import MakeRouter, MakeTurns


def system_of(body: dict[str, object]) -> str:
    messages = body["messages"]
    assert isinstance(messages, list)
    return str(messages[0]["content"]) if messages[0]["role"] == "system" else ""


async def test_each_channel_is_answered_by_its_configured_agent(
    tmp_path: Path, model: FakeOpenAI
) -> None:
    model.responder = lambda body: model.text_step(f"re: {last_user_text(body)}")
    discord = MemoryChannel("discord")
    config = fake_model_config(model, {"channels": {"discord": {"agent": "helper"}}})
    async with running_gateway(tmp_path, config=config, channels={"discord": discord}) as gw:
        assert gw.router.agent_for_channel("discord") == "helper"
        assert gw.router.agent_for_channel("memory") == "main"  # no config: the default
        await discord.receive(discord.inbound("hi helper", chat_id="room"))
        await gw.say("hi main", chat_id="room")
        async with asyncio.timeout(HANG_GUARD_SECONDS):
            (helper_reply,) = await discord.wait_for(lambda m: m.kind == "reply")
        main_reply = await gw.reply("room")
        helper = await gw.store.get("agent:helper:discord:channel:room")
        main = await gw.store.get("agent:main:memory:channel:room")
    assert (helper_reply.chat_id, helper_reply.text) == ("room", "re: hi helper")
    assert (main_reply.chat_id, main_reply.text) == ("room", "re: hi main")
    assert helper is not None
    assert main is not None
    systems = {last_user_text(r.body): system_of(r.body) for r in model.requests}
    assert systems["hi helper"].startswith("You are the helper.")
    assert not systems["hi main"].startswith("You are the helper.")


async def test_a_dm_session_follows_the_person_to_the_chat_they_last_wrote_from(
    gw: Harness, model: FakeOpenAI
) -> None:
    model.responder = lambda body: model.text_step(f"re: {last_user_text(body)}")
    await gw.say("from d1", chat_id="d1", dm=True)
    assert (await gw.reply("d1")).text == "re: from d1"
    await gw.say("from d2", chat_id="d2", dm=True)
    assert (await gw.reply("d2")).text == "re: from d2"
    session = await gw.store.require("agent:main:memory:dm:u1")
    assert session.origin is not None
    assert (session.origin.chat_id, session.origin.chat_type) == ("d2", "dm")
    # One session: the second turn carried the first exchange.
    sent = [m["content"] for m in model.requests[1].body["messages"][1:]]
    assert sent == ["from d1", "re: from d1", "from d2"]


async def test_commands_are_answered_in_the_chat_without_the_model(
    gw: Harness, model: FakeOpenAI
) -> None:
    model.responder = lambda body: model.text_step(f"re: {last_user_text(body)}")
    await gw.say("/help")
    await gw.say("!HELP")  # where a chat's own UI claims "/"
    notices = await gw.wait_sent(lambda m: m.kind == "notice", 2)
    assert [(m.chat_id, m.text) for m in notices] == [("c1", HELP_TEXT), ("c1", HELP_TEXT)]
    await gw.say("/shrug it depends")  # looks like a command, is none: said so
    (*_, unknown) = await gw.wait_sent(lambda m: m.kind == "notice", 3)
    assert unknown.text == "Unknown command /shrug; see /help for the commands."
    assert model.requests == []
    await gw.say("/etc/hosts is broken")  # no command: an ordinary message for the agent
    assert (await gw.reply()).text == "re: /etc/hosts is broken"


async def test_handling_returns_once_the_turn_is_queued_not_answered(
    gw: Harness, model: FakeOpenAI
) -> None:
    held = HeldReplies(model, lambda body: "finally")
    model.responder = held
    async with asyncio.timeout(HANG_GUARD_SECONDS):  # a router that waited would hang here
        await gw.say("hello")
    assert gw.channel.sent == []
    held.gate.set()
    assert (await gw.reply()).text == "finally"


async def test_a_stopping_gateway_asks_the_person_to_send_again(
    gw: Harness, make_turns: MakeTurns, make_router: MakeRouter
) -> None:
    turns = make_turns()
    router = make_router(turns)
    await turns.close(0)
    await router.handle_inbound(gw.channel.inbound("are you there?", chat_id="late"))
    (notice,) = gw.channel.sent
    assert (notice.chat_id, notice.kind, notice.text) == ("late", "notice", STOPPING_REPLY)


async def test_a_message_no_session_can_be_named_for_is_dropped_with_a_warning(
    gw: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="gateway.runtime.router"):
        await gw.say("who am I?", chat_id="", dm=False)
    assert [r.getMessage() for r in caplog.records] == ["message dropped: no session key"]
    assert gw.channel.sent == []
    assert [s.key for s in await gw.store.list()] == []


async def test_a_message_is_recorded_until_its_turn_ended_and_a_command_never_is(
    gw: Harness, model: FakeOpenAI
) -> None:
    held = HeldReplies(model, lambda body: "done")
    model.responder = held
    await gw.say("/help")
    await gw.wait_sent(lambda m: m.kind == "notice")
    assert await gw.db.inbound.pending() == []
    await gw.say("remember me")
    async with asyncio.timeout(HANG_GUARD_SECONDS):
        await held.arrived()
    (record,) = await gw.db.inbound.pending()  # the turn runs: the message is kept
    assert record.message.text == "remember me"
    transcript = await gw.store.read("agent:main:memory:channel:c1")
    users = [r for r in transcript.records if r.get("message", {}).get("role") == "user"]
    assert [u.get("meta") for u in users] == [{"inbound": record.inbound_id}]
    held.gate.set()
    assert (await gw.reply()).text == "done"
    async with asyncio.timeout(HANG_GUARD_SECONDS):
        while await gw.db.inbound.pending():  # noqa: ASYNC110 - cleared just after the reply
            await asyncio.sleep(0.01)


async def test_a_stopping_replica_leaves_the_message_recorded_for_a_live_one(
    gw: Harness, make_turns: MakeTurns, make_commands: Callable[[ChatTurns], ChatCommands]
) -> None:
    turns = make_turns()
    router = Router(
        holder=gw.holder,
        store=gw.store,
        turns=turns,
        commands=make_commands(turns),
        replier=Replier(gw.channels),
        journal=gw.db.inbound,
        replica_id="stopping",
    )
    await turns.close(0)
    await router.handle_inbound(gw.channel.inbound("are you there?", chat_id="late"))
    assert gw.channel.sent == []  # no "send that again": another replica answers it
    (record,) = await gw.db.inbound.pending()
    assert (record.message.text, record.claimed_by) == ("are you there?", "stopping")
