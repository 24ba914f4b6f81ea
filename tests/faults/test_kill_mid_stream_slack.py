"""``kill -9`` while a reply is being streamed into a Slack thread (natively:
``chat.startStream``/``appendStream``): the restarted gateway re-runs the turn and the thread
ends with one reply, not a half-written stream beside a whole answer.

``herald run`` (a subprocess, Slack in HTTP mode against the wire-level fake Slack, the real
OpenAI provider against the fake model held mid-stream, :mod:`tests.faults._midstream`)
streams the first words of the reply into the mention's thread and records the streamed
message; it is killed with SIGKILL. The restarted gateway runs the turn again: it stops the
dead process's stream and updates that message (``chat.update``) to the whole reply.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.openai import openai_server
from tests.fakes.slack import BOT_TOKEN, BOT_USER_ID, SIGNING_SECRET, FakeSlack
from tests.faults._midstream import (
    STORY,
    gateway,
    gateway_config,
    hold_the_first_answer,
    streamed_recorded,
)
from tests.gateway.daemon_process import HANG_GUARD_SECONDS, free_port

pytestmark = pytest.mark.slow


def bot_messages(slack: FakeSlack) -> list[str]:
    return [str(m["text"]) for m in slack.history.get("C1", []) if m.get("bot_id")]


async def test_a_reply_cut_by_kill_9_mid_stream_ends_as_one_reply(tmp_path: Path) -> None:
    slack = FakeSlack()
    await slack.start()
    try:
        async with openai_server() as model:
            port = free_port()
            config = gateway_config(
                tmp_path,
                port,
                model,
                {
                    "slack": {
                        "enabled": True,
                        "mode": "http",
                        "botToken": BOT_TOKEN,
                        "signingSecret": SIGNING_SECRET,
                        "apiBaseUrl": slack.api_base_url,
                    }
                },
            )
            hold_the_first_answer(model)
            event = slack.message(f"<@{BOT_USER_ID}> tea?", channel="C1")
            async with gateway(config, port) as first:
                assert await slack.send_event(f"{first.url}/slack/events", event) == 200
                await slack.wait_for(lambda: len(bot_messages(slack)) == 1)
                [partial] = bot_messages(slack)
                assert STORY.startswith(partial)
                assert partial != STORY
                assert slack.open_streams  # streamed natively, and left open by the kill
                await streamed_recorded(tmp_path)
                await first.kill()

            async with gateway(config, port):
                await slack.wait_for(
                    lambda: bot_messages(slack) == [STORY], within=HANG_GUARD_SECONDS
                )
    finally:
        await slack.close()

    assert len(model.requests) == 2  # the turn ran again after the restart
    assert bot_messages(slack) == [STORY]
    assert slack.open_streams == {}
    [reply] = [m for m in slack.history["C1"] if m.get("bot_id")]
    assert reply["thread_ts"] == event["ts"]
