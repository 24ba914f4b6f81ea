"""A real gateway SIGKILLed in the middle of announce sends to Slack and Discord, restarted
each time: every announce ends in its chat exactly once, as the fakes recorded it.

``herald run`` is a subprocess with both chat channels pointed at the fakes (Slack in
Socket Mode, replying in threads; Discord with its gateway), started through
:mod:`tests.gateway.quick_herald` (ready once the fake Discord has sent its guild). Two
chat turns, one in a Slack channel and one in a Discord channel, spawn :data:`PER_CHAT`
sub-agent runs each. Before each life the test arranges for one announce post to be cut
off: the fake takes the request (``stored``: the message is in the chat) or not, and never
answers; once the fake holds it, the process is killed, so the send was under way and its
outcome never recorded. The cuts cover both chats and both sides of the instant the chat
takes the post. The last life finishes everything.

The fakes' records are the truth: each run's announce is in its chat exactly once, and no
announce is left ``uncertain`` (found in the chat, or sent once more when it was not there).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from discord.utils import snowflake_time

from channels.discord.lookup import LOOKUP_CLOCK_SKEW as DISCORD_LOOKUP_SKEW
from channels.slack.constants import LOOKUP_CLOCK_SKEW as SLACK_LOOKUP_SKEW
from gateway.constants import STATE_DB_NAME
from gateway.state import FINISHED_STATUSES, SqliteStateDB
from tests.fakes.discord import BOT_ID as DISCORD_BOT_ID
from tests.fakes.discord import FakeDiscord, RecordedRequest, text_channel_payload, user_payload
from tests.fakes.slack import APP_TOKEN, BOT_TOKEN, BOT_USER_ID, FakeSlack
from tests.faults._support import duplicates
from tests.gateway.daemon_process import (
    HANG_GUARD_SECONDS,
    QUICK_HERALD,
    free_port,
    herald,
    write_config,
)

pytestmark = pytest.mark.slow

PER_CHAT = 8
GUILD = "1300000000000000001"
GENERAL = "1300000000000000002"
ALICE = user_payload("1400000000000000001", "alice")
#: (chat, stored) of the announce post cut off in each life that is killed: the chat's next
#: one. Slack's runs are queued first, so its announces come first and Discord's remain.
CUTS = (("slack", True), ("slack", False), ("discord", True), ("discord", False))
SESSION_KEY = re.compile(r"sessionKey (agent:main:subagent:[0-9a-f-]+)")


def script() -> dict[str, Any]:
    """The scripted model: one batch of spawns per chat, each job answering after a beat."""
    rules: list[dict[str, Any]] = [{"match": r"^\[announce\]", "reply": "ANNOUNCE {lastAssistant}"}]
    for chat in ("slack", "discord"):
        calls = [
            {"name": "sessions_spawn", "arguments": {"task": f"{chat}-job-{n}"}}
            for n in range(PER_CHAT)
        ]
        rules.append(
            {
                "match": f"batch {chat}$",
                "reply": "",
                "toolCalls": calls,
                "afterTool": f"spawned {chat}",
            }
        )
    rules.append({"match": r"-job-(\d+)$", "reply": "result $1", "delaySeconds": 0.1})
    return {"rules": rules, "default": {"reply": "?"}}


def config(tmp_path: Path, port: int, slack: FakeSlack, discord: FakeDiscord) -> Path:
    script_path = tmp_path / "script.json"
    script_path.write_text(json.dumps(script()), encoding="utf-8")
    return write_config(
        tmp_path / "herald.json",
        {
            "gateway": {"port": port, "stateDir": str(tmp_path / "state")},
            "agent": {"model": "t/m", "subagents": {"maxConcurrent": 2}},
            "models": {
                "providers": {
                    "t": {"api": "scripted", "script": str(script_path), "models": [{"id": "m"}]}
                }
            },
            "channels": {
                "webchat": {"enabled": False},
                "slack": {
                    "enabled": True,
                    "mode": "socket",
                    "botToken": BOT_TOKEN,
                    "appToken": APP_TOKEN,
                    "apiBaseUrl": slack.api_base_url,
                },
                "discord": {
                    "enabled": True,
                    "token": discord.token,
                    "apiBaseUrl": discord.api_base_url,
                    "gatewayUrl": discord.gateway_url,
                },
            },
        },
    )


def is_announce(text: object) -> bool:
    return isinstance(text, str) and text.startswith("ANNOUNCE")


def cut_next_announce(slack: FakeSlack, discord: FakeDiscord, life: int) -> None:
    chat, stored = CUTS[life]
    if chat == "slack":
        slack.cut_off(
            "chat.postMessage", stored=stored, matching=lambda args: is_announce(args.get("text"))
        )
    else:
        discord.cut_off_next_message(
            stored=stored, matching=lambda body: is_announce(body.get("content"))
        )


def announce_calls(chat: str, slack: FakeSlack, discord: FakeDiscord) -> int:
    """Announce posts the chat's fake has received (answered, cut off, or refused)."""
    if chat == "slack":
        calls = slack.calls_to("chat.postMessage")
        return sum(1 for c in calls if is_announce(c.args.get("text")))
    requests = discord.requests_to("POST", f"/channels/{GENERAL}/messages")
    return sum(
        1 for r in requests if isinstance(r.body, Mapping) and is_announce(r.body.get("content"))
    )


async def wait_cut_off(chat: str, slack: FakeSlack, discord: FakeDiscord, count: int) -> None:
    """Until the chat's fake has received ``count`` announce posts (the last one held).
    Polls under the daemon tests' hang guard: a loaded machine may take a while."""
    async with asyncio.timeout(HANG_GUARD_SECONDS):
        while announce_calls(chat, slack, discord) < count:  # noqa: ASYNC110
            await asyncio.sleep(0.05)


async def wait_ready(url: str) -> None:
    """Until ``/readyz`` says every channel is connected."""
    async with asyncio.timeout(HANG_GUARD_SECONDS), aiohttp.ClientSession() as http:
        while True:
            with contextlib.suppress(aiohttp.ClientError):
                async with http.get(f"{url}/readyz") as response:
                    if response.status == 200:
                        return
            await asyncio.sleep(0.05)


async def wait_settled(db_path: Path) -> None:
    """Until every run is final and every announce settled (another process's database)."""
    async with asyncio.timeout(HANG_GUARD_SECONDS):
        while True:
            db = await SqliteStateDB.open(db_path, readonly=True)
            try:
                runs = await db.runs.list(limit=3 * PER_CHAT)
                items = await db.outbox.list()
            finally:
                await db.close()
            final = len(runs) == 2 * PER_CHAT and all(
                r.progress.status in FINISHED_STATUSES for r in runs
            )
            open_items = [i for i in items if i.state in ("pending", "sending")]
            if final and len(items) == len(runs) and not open_items:
                return
            await asyncio.sleep(0.1)


async def sends_under_way(db_path: Path) -> dict[int, tuple[str, float]]:
    """Every send a killed life left under way, its outcome unknown: outbox id → (chat, when
    its first attempt began)."""
    db = await SqliteStateDB.open(db_path, readonly=True)
    try:
        items = await db.outbox.list()
    finally:
        await db.close()
    return {
        i.id: (i.channel, i.first_attempt_at)
        for i in items
        if i.state == "sending" and i.id is not None and i.first_attempt_at is not None
    }


def lookup_moments(slack: FakeSlack, discord: FakeDiscord) -> dict[str, list[float]]:
    """Per chat, the moments (epoch seconds) the chat was read from to look for a send: a
    cut-off send is looked for from its first attempt less the lookup's clock skew. Other
    reads (a chat reply looked for after a restart, Discord's catch-up) may come too."""
    slack_reads = slack.calls_to("conversations.replies")
    discord_reads = lookups_in(discord, GENERAL)
    return {
        "slack": [float(c.args["oldest"]) for c in slack_reads if "oldest" in c.args],
        "discord": [
            snowflake_time(int(r.query["after"])).timestamp()
            for r in discord_reads
            if str(r.query.get("after", "")).isdigit()
        ],
    }


def looked_up(chat: str, first_attempt_at: float, moments: Mapping[str, list[float]]) -> bool:
    """Whether the send whose first attempt began at ``first_attempt_at`` was looked for
    (Discord's snowflakes hold milliseconds)."""
    skew = SLACK_LOOKUP_SKEW if chat == "slack" else DISCORD_LOOKUP_SKEW
    return any(abs(m - (first_attempt_at - skew)) < 0.002 for m in moments[chat])


async def wait_runs(db_path: Path, count: int) -> None:
    """Until the database holds ``count`` runs (another process's)."""
    async with asyncio.timeout(HANG_GUARD_SECONDS):
        while True:
            db = await SqliteStateDB.open(db_path, readonly=True)
            try:
                runs = await db.runs.list(limit=count)
            finally:
                await db.close()
            if len(runs) >= count:
                return
            await asyncio.sleep(0.05)


async def start_batches(slack: FakeSlack, discord: FakeDiscord, db_path: Path) -> None:
    """Slack's batch, then Discord's once Slack's runs are queued: Slack's announces come
    first, so the first two lives cut Slack's and Discord's remain for the next two. Sent
    together, the two turns race, and under load Discord's could queue its runs first."""
    await slack.push_event(slack.message(f"<@{BOT_USER_ID}> batch slack", channel="C1"))
    await wait_runs(db_path, PER_CHAT)
    await discord.post_message(
        channel_id=GENERAL,
        author=ALICE,
        content=f"<@{DISCORD_BOT_ID}> batch discord",
        guild_id=GUILD,
        mentions=[user_payload(DISCORD_BOT_ID, "herald", bot=True)],
    )


def lookups_in(discord: FakeDiscord, channel_id: str) -> list[RecordedRequest]:
    """Reads of the channel's messages that look for a cut-off send: from a moment (a
    snowflake made from a time), not from a message taken before (the catch-up after a
    restart reads from the last message the gateway took)."""
    taken = {m["id"] for m in discord.messages.get(channel_id, [])}
    reads = discord.requests_to("GET", f"/channels/{channel_id}/messages")
    return [r for r in reads if r.query.get("after") not in taken]


def visible_announces(slack: FakeSlack, discord: FakeDiscord) -> Counter[tuple[str, str]]:
    """(chat, child session key) of every announce message the chats hold."""
    texts = [("slack", m.get("text")) for m in slack.visible("C1")]
    texts += [
        ("discord", m.get("content"))
        for m in discord.messages.get(GENERAL, [])
        if m["author"]["id"] == DISCORD_BOT_ID
    ]
    seen: Counter[tuple[str, str]] = Counter()
    for chat, text in texts:
        match = SESSION_KEY.search(text) if isinstance(text, str) and is_announce(text) else None
        if match:
            seen[(chat, match.group(1))] += 1
    return seen


async def test_sigkill_mid_announce_send_leaves_every_announce_in_its_chat_exactly_once(
    tmp_path: Path,
) -> None:
    slack = FakeSlack()
    await slack.start()
    try:
        async with FakeDiscord() as discord:
            discord.add_guild(
                GUILD, "test guild", [text_channel_payload(GENERAL, GUILD, "general")], []
            )
            port = free_port()
            path = config(tmp_path, port, slack, discord)
            db_path = tmp_path / "state" / STATE_DB_NAME
            #: Sends whose outcome a kill left unknown: the cut-off one, and any other
            #: the chat had answered when the kill came before the answer was recorded.
            uncertain: dict[int, tuple[str, float]] = {}
            for life in range(len(CUTS) + 1):
                killed = life < len(CUTS)
                if killed:
                    chat, _stored = CUTS[life]
                    cut_at = announce_calls(chat, slack, discord) + 1
                    cut_next_announce(slack, discord, life)
                async with herald(
                    "run", "--config", str(path), port=port, command=QUICK_HERALD
                ) as daemon:
                    await daemon.wait_healthy()
                    await wait_ready(daemon.url)
                    if life == 0:
                        await start_batches(slack, discord, db_path)
                    if killed:
                        # Killed once the fake holds the cut-off post, before any answer.
                        await wait_cut_off(chat, slack, discord, cut_at)
                        daemon.process.send_signal(signal.SIGKILL)
                        assert await daemon.wait_exit() == -signal.SIGKILL
                        uncertain.update(await sends_under_way(db_path))
                    else:
                        await wait_settled(db_path)
                        daemon.process.send_signal(signal.SIGTERM)
                        assert await daemon.wait_exit() == 0
            visible = visible_announces(slack, discord)
            moments = lookup_moments(slack, discord)
    finally:
        await slack.close()

    db = await SqliteStateDB.open(db_path, readonly=True)
    try:
        runs = await db.runs.list(limit=3 * PER_CHAT)
        items = await db.outbox.list()
    finally:
        await db.close()
    assert len(runs) == 2 * PER_CHAT
    assert {run.progress.status for run in runs} == {"done"}
    expected = {
        (run.request.origin.channel if run.request.origin else "?", run.child_session_key)
        for run in runs
    }
    # Exactly once: every run's announce is in its chat, none twice, none left uncertain.
    assert duplicates(visible) == {}
    assert set(visible) == expected
    assert Counter(item.state for item in items) == {"delivered": 2 * PER_CHAT}
    assert {run.delivery.announce_state for run in runs} == {"delivered"}
    # Each send left under way was looked for in its chat before anything was sent again.
    under_way = Counter(chat for chat, _first in uncertain.values())
    assert min(under_way["slack"], under_way["discord"]) >= 2  # the cut-off ones at least
    assert [s for s in uncertain.values() if not looked_up(*s, moments)] == []
