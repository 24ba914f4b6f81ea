"""A reply streamed into a Slack thread through the whole gateway (the real Slack channel on
the fake Slack, the real OpenAI provider on the fake model): a model stream cut mid-way ends
the reply with what was said and Herald's own one line, never the client's error text; the
detail goes to the log, without the key."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from gateway.agent.conversation import STREAM_BROKE_NOTE
from tests.fakes.openai import openai_server
from tests.fakes.slack import BOT_USER_ID, FakeSlack
from tests.gateway.harness import fake_model_config, running_gateway
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
