"""``kill -9`` while a reply is being streamed into Discord: the restarted gateway re-runs the
turn and the chat ends with one reply, not a half-written one beside a whole one.

``herald run`` (a subprocess, the real Discord channel against the wire-level fake Discord,
the real OpenAI provider against the fake model) posts the first words of a reply and the
model is held mid-stream; the gateway is killed with SIGKILL. The restarted gateway finds the
recorded message unanswered and runs its turn again: its first post carries the nonce the
streamed message was posted with, so Discord hands that message back and the re-run edits it
to the whole reply.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.fakes.discord import BOT_ID, FakeDiscord, text_channel_payload, user_payload
from tests.fakes.openai import openai_server
from tests.gateway.daemon_process import free_port, herald, write_config

pytestmark = pytest.mark.slow

GUILD = "1300000000000000001"
GENERAL = "1300000000000000002"
ALICE = user_payload("1400000000000000001", "alice")
STORY = "Tea reached Europe in the seventeenth century, first as a medicine, then as a habit."


def bot_messages(discord: FakeDiscord) -> list[str]:
    held = discord.messages.get(GENERAL, [])
    return [str(m["content"]) for m in held if m["author"]["id"] == BOT_ID]


async def test_a_reply_cut_by_kill_9_mid_stream_ends_as_one_reply(tmp_path: Path) -> None:
    async with FakeDiscord() as discord, openai_server() as model:
        discord.add_guild(GUILD, "guild", [text_channel_payload(GENERAL, GUILD, "general")], [])
        port = free_port()
        config = write_config(
            tmp_path / "herald.json",
            {
                "gateway": {"port": port, "stateDir": str(tmp_path / "state")},
                "agent": {"model": "fake/gpt-4o-mini"},
                "models": {
                    "providers": {
                        "fake": {
                            "api": "openai-completions",
                            "baseUrl": model.base_url,
                            "apiKey": model.api_key,
                            "maxRetries": 0,
                            "models": [{"id": "gpt-4o-mini"}],
                        }
                    }
                },
                "channels": {
                    "webchat": {"enabled": False},
                    "discord": {
                        "enabled": True,
                        "token": discord.token,
                        "apiBaseUrl": discord.api_base_url,
                        "gatewayUrl": discord.gateway_url,
                    },
                },
            },
        )
        never = asyncio.Event()  # the first answer never finishes: the gateway dies first
        model.reply_stream(STORY, hold=never, hold_at=4)
        model.reply_text(STORY)  # the re-run's answer (streamed: it asks for a stream)
        async with herald("run", "--config", str(config), port=port) as first:
            await first.wait_log("gateway ready")
            await discord.post_message(
                channel_id=GENERAL, guild_id=GUILD, author=ALICE, content=f"<@{BOT_ID}> tea?"
            )
            await discord.wait_until(lambda: len(bot_messages(discord)) == 1)
            [partial] = bot_messages(discord)
            assert STORY.startswith(partial)
            assert partial != STORY
            await first.kill()

        async with herald("run", "--config", str(config), port=port) as second:
            await second.wait_log("gateway ready")
            await discord.wait_until(lambda: bot_messages(discord) == [STORY])

    assert len(model.requests) == 2  # the turn ran again after the restart
    assert bot_messages(discord) == [STORY]
