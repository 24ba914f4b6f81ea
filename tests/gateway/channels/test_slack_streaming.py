"""A reply streamed into a Slack thread through the whole gateway (the real Slack channel on
the fake Slack, the real OpenAI provider on the fake model): a model stream cut mid-way ends
the reply with what was said and Herald's own one line, never the client's error text; the
detail goes to the log, without the key. Each turn's final text goes to the reply it
opened."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from channels import InboundMessage
from gateway.agent.conversation import STREAM_BROKE_NOTE
from gateway.sessions import SessionKey
from tests.fakes.openai import Step, last_user_text, openai_server
from tests.fakes.slack import BOT_USER_ID, FakeSlack
from tests.gateway.harness import HANG_GUARD_SECONDS, fake_model_config, running_gateway
from tests.gateway.slack_fake import joined, slack_on_fake

STORY = "Tea came to Europe in the seventeenth century, first as a medicine, then as a habit."


def bot_texts(fake: FakeSlack) -> list[str]:
    return [str(m["text"]) for m in fake.history.get("C1", []) if m.get("bot_id")]


async def test_a_model_stream_cut_midway_ends_with_heralds_own_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    async with (
        openai_server() as model,
        slack_on_fake(streaming="auto") as (fake, channel),
        running_gateway(tmp_path, config=fake_model_config(model)) as gw,
        joined(gw, channel, fake),
    ):
        model.reply_stream(STORY, cut_at=5)
        await fake.push_event(fake.message(f"<@{BOT_USER_ID}> tea?", channel="C1"))
        # The final reply is the update that carries the reply's metadata.
        await fake.wait_for(lambda: any("metadata" in c.args for c in fake.calls_to("chat.update")))

    [reply] = bot_texts(fake)
    said, line = reply.rsplit("\n\n", 1)
    assert said
    assert STORY.startswith(said)
    assert "&lt;" not in reply  # no client error text (escaped by Slack's mrkdwn)
    assert line == STREAM_BROKE_NOTE
    assert fake.calls_to("chat.startStream")  # it was streamed natively
    assert not fake.calls_to("chat.postMessage")
    logged = [r.getMessage() for r in caplog.records if "model call failed" in r.getMessage()]
    assert logged  # the detail, for the operator
    key = model.api_key
    assert key
    assert not any(key in r.getMessage() for r in caplog.records)


THREAD = "1700000000.000100"


async def test_two_turns_in_one_thread_each_finish_the_reply_they_opened(tmp_path: Path) -> None:
    """A turn's final text goes to the reply object it opened, nowhere else. Two turns of
    two sessions answer in one thread at once, and both answer one recorded message: the
    id by which the channel once found a reply's stream again, so that the first turn's
    final text went to the second turn's message (and its own was taken back). Each reply
    is posted once, streamed, then made its turn's final text; nothing is deleted."""
    gates = {"first?": asyncio.Event(), "second?": asyncio.Event()}
    async with (
        openai_server() as model,
        slack_on_fake(streaming="edit") as (fake, channel),
        running_gateway(tmp_path, config=fake_model_config(model)) as gw,
        joined(gw, channel, fake),
    ):
        asked: list[str] = []
        both_asked = asyncio.Event()  # both turns hold their reply open

        def answer(body: Any) -> Step:
            question = last_user_text(body)
            asked.append(question)
            if len(asked) == len(gates):
                both_asked.set()
            return model.text_step(f"The answer to {question}", hold=gates[question])

        model.responder = answer
        inbound = InboundMessage(
            channel="slack",
            account=channel.account,
            chat_id="C1",
            thread_id=THREAD,
            sender_id="U0ALICE",
            text="first? second?",
            message_id=THREAD,
        )
        keys = (SessionKey.chat_channel("main", "slack", "C1", THREAD), "agent:main:main")
        turns = []
        for key, question in zip(keys, gates, strict=True):
            session = await gw.store.ensure(str(key))
            turns.append(gw.turns.submit_turn(session, question, inbound, "inbound-row-1"))
        async with asyncio.timeout(HANG_GUARD_SECONDS):
            await both_asked.wait()
            gates["first?"].set()
            await turns[0]  # its final text delivered, its reply closed
            gates["second?"].set()
            await turns[1]

    assert sorted(bot_texts(fake)) == ["The answer to first?", "The answer to second?"]
    assert len(fake.calls_to("chat.postMessage")) == 2  # each reply posted once, streamed
    assert not fake.calls_to("chat.delete")
    finals = [c for c in fake.calls_to("chat.update") if "metadata" in c.args]
    assert sorted(str(c.args["text"]) for c in finals) == sorted(bot_texts(fake))
