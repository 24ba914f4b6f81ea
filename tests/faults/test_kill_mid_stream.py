"""``kill -9`` while a reply is being streamed into Discord: the restarted gateway re-runs the
turn and the chat ends with one reply, not a half-written one beside a whole one.

``herald run`` (a subprocess, the real Discord channel against the wire-level fake Discord,
the real OpenAI provider against the fake model) posts the first words of a reply and the
model is held mid-stream; the gateway is killed with SIGKILL (:mod:`tests.faults._midstream`).
The restarted gateway finds the recorded message unanswered, with the streamed message
recorded beside it, and runs its turn again editing that message to the whole reply. The
fake's nonce window is off, so the nonce the message was posted with cannot be what finds it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.discord import BOT_ID, FakeDiscord, text_channel_payload, user_payload
from tests.fakes.openai import openai_server
from tests.faults._midstream import (
    STORY,
    gateway,
    gateway_config,
    hold_the_first_answer,
    streamed_recorded,
)
from tests.gateway.daemon_process import free_port

pytestmark = pytest.mark.slow

GUILD = "1300000000000000001"
GENERAL = "1300000000000000002"
ALICE = user_payload("1400000000000000001", "alice")


def bot_messages(discord: FakeDiscord) -> list[str]:
    held = discord.messages.get(GENERAL, [])
    return [str(m["content"]) for m in held if m["author"]["id"] == BOT_ID]


async def test_a_reply_cut_by_kill_9_mid_stream_ends_as_one_reply(tmp_path: Path) -> None:
    async with FakeDiscord() as discord, openai_server() as model:
        discord.nonce_window = 0.0
        discord.add_guild(GUILD, "guild", [text_channel_payload(GENERAL, GUILD, "general")], [])
        port = free_port()
        config = gateway_config(
            tmp_path,
            port,
            model,
            {
                "discord": {
                    "enabled": True,
                    "token": discord.token,
                    "apiBaseUrl": discord.api_base_url,
                    "gatewayUrl": discord.gateway_url,
                }
            },
        )
        hold_the_first_answer(model)
        async with gateway(config, port) as first:
            await discord.post_message(
                channel_id=GENERAL, guild_id=GUILD, author=ALICE, content=f"<@{BOT_ID}> tea?"
            )
            await discord.wait_until(lambda: len(bot_messages(discord)) == 1)
            [partial] = bot_messages(discord)
            assert STORY.startswith(partial)
            assert partial != STORY
            await streamed_recorded(tmp_path)
            await first.kill()

        async with gateway(config, port) as second:
            await discord.wait_until(lambda: bot_messages(discord) == [STORY])
            await second.kill()

    assert len(model.requests) == 2  # the turn ran again after the restart
    assert bot_messages(discord) == [STORY]
