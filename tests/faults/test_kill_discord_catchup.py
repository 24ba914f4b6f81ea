"""A Discord message sent while the gateway was down is answered once it is back.

Discord replays nothing to a fresh gateway session, so ``herald run`` (a subprocess, with the
real Discord channel against the wire-level fake Discord and the scripted model) is killed
with SIGKILL after answering one mention; a person then mentions the bot while no connection
is up (the fake only keeps the message in its channel). The restarted gateway reads the
channel past the newest message it took and answers the missed mention exactly once; the
mention answered before the kill is not answered again.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.discord import BOT_ID, FakeDiscord, text_channel_payload, user_payload
from tests.gateway.daemon_process import QUICK_HERALD, free_port, herald, write_config

pytestmark = pytest.mark.slow

GUILD = "1300000000000000001"
GENERAL = "1300000000000000002"
ALICE = user_payload("1400000000000000001", "alice")


def gateway_config(tmp_path: Path, port: int, discord: FakeDiscord) -> Path:
    script = tmp_path / "script.json"
    rule = {"match": r"question (\w+)$", "reply": "answer $1"}
    script.write_text(json.dumps({"rules": [rule], "default": {"reply": "?"}}), "utf-8")
    data = {
        "gateway": {"port": port, "stateDir": str(tmp_path / "state")},
        "agent": {"model": "t/m"},
        "models": {
            "providers": {"t": {"api": "scripted", "script": str(script), "models": [{"id": "m"}]}}
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
    }
    return write_config(tmp_path / "herald.json", data)


def answers(discord: FakeDiscord) -> Counter[str]:
    """The bot's messages as they stand (a streamed reply is posted, then edited whole)."""
    held = discord.messages.get(GENERAL, [])
    return Counter(str(m["content"]) for m in held if m["author"]["id"] == discord.bot["id"])


async def answered(discord: FakeDiscord, text: str) -> None:
    await discord.wait_until(lambda: answers(discord)[text] > 0)


def mention(text: str) -> dict[str, Any]:
    return {
        "channel_id": GENERAL,
        "guild_id": GUILD,
        "author": ALICE,
        "content": f"<@{BOT_ID}> {text}",
    }


async def test_a_mention_sent_while_killed_is_answered_once_after_the_restart(
    tmp_path: Path,
) -> None:
    async with FakeDiscord() as discord:
        discord.add_guild(GUILD, "guild", [text_channel_payload(GENERAL, GUILD, "general")], [])
        port = free_port()
        config = str(gateway_config(tmp_path, port, discord))
        async with herald("run", "--config", config, port=port, command=QUICK_HERALD) as first:
            await first.wait_log("gateway ready")
            await discord.post_message(**mention("question one"))
            await answered(discord, "answer one")
            await first.kill()

        discord.store_message(**mention("question two"))  # no connection: no event

        async with herald("run", "--config", config, port=port, command=QUICK_HERALD) as second:
            await second.wait_log("gateway ready")
            await answered(discord, "answer two")
            await discord.post_message(**mention("question three"))
            await answered(discord, "answer three")  # after anything read again before it

    assert answers(discord) == {"answer one": 1, "answer two": 1, "answer three": 1}
