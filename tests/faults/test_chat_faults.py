"""Announces through the real Slack and Discord channels while their APIs fail sends.

The channels are the production ones (slack-bolt in Socket Mode, discord.py), talking to the
wire-level fakes, with the fakes' ``fault`` hooks failing sends at a set rate: Slack answers
HTTP 500 or 429 with ``Retry-After``; Discord answers 503, or 429 with a short
``retry_after`` that discord.py waits out itself. (Discord 500s are left out: discord.py
retries those internally after sleeping 1 s, 3 s, … which would only make the test slow.)
One Slack chat and one Discord channel do not exist: those announces fail permanently.

Whether a send fails is drawn from a ``Random`` seeded with (seed, the message, how many
times it was sent before), so a seed gives the same faults whatever the interleaving.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from channels import Channel
from channels.discord import DiscordChannel, DiscordConfig
from channels.slack import SlackChannel, SlackConfig
from gateway.state import Origin, RunRecord
from tests.fakes.discord import FakeDiscord, RestFault
from tests.fakes.slack import APP_TOKEN, BOT_TOKEN, TEAM_ID, Failure, FakeSlack
from tests.faults._support import (
    audit_transcripts,
    chat_context,
    duplicates,
    fault_seed,
    spawn_runs,
    wait_final,
)
from tests.gateway.harness import running_gateway

#: Share of sends that fail (transiently). The outbox tries 12 times, so every announce to
#: a chat that exists gets through.
FAULT_RATE = 0.35
RUNS_PER_CHAT = 6
SLACK_GONE = "C404"
DISCORD_CHAT = "1300000000000000001"
DISCORD_THREAD = "1300000000000000002"
DISCORD_GONE = "1300000000000000404"
GUARD_SECONDS = 40.0


class SendFaults:
    """Decides which sends fail: seeded, per (message, attempt); never for gone chats. The
    kinds of failure alternate per channel, so every kind happens once two sends failed."""

    def __init__(self, seed: int, rate: float) -> None:
        self.seed = seed
        self.rate = rate
        self.injected: Counter[str] = Counter()
        self._sent: Counter[str] = Counter()

    def draw(self, where: str, text: str) -> bool:
        """Whether this send is to fail."""
        attempt = self._sent[text]
        self._sent[text] += 1
        return random.Random(f"{self.seed}:{where}:{text}:{attempt}").random() < self.rate

    def _next_kind(self, first: str, second: str) -> str:
        kind = first if self.injected[first] <= self.injected[second] else second
        self.injected[kind] += 1
        return kind

    def slack(self, method: str, args: Mapping[str, Any]) -> Failure | None:
        if method != "chat.postMessage" or args.get("channel") == SLACK_GONE:
            return None
        if not self.draw("slack", str(args.get("text"))):
            return None
        if self._next_kind("slack 500", "slack 429") == "slack 500":
            return Failure(status=500)
        return Failure(status=429, retry_after=1)

    def discord(self, method: str, path: str, body: Any) -> RestFault | None:
        if method != "POST" or not path.endswith("/messages") or DISCORD_GONE in path:
            return None
        if not self.draw("discord", str((body or {}).get("content"))):
            return None
        if self._next_kind("discord 503", "discord 429") == "discord 503":
            return RestFault(503, {"message": "Service Unavailable", "code": 0})
        retry = {"message": "You are being rate limited.", "retry_after": 0.05, "global": False}
        return RestFault(429, retry, {"Retry-After": "1", "Via": "1.1 google"})


def posts_per_run(texts: list[str], runs: list[RunRecord]) -> Counter[str]:
    """How many posted texts name each run's child session (the announce's stats line)."""
    counts: Counter[str] = Counter()
    for text in texts:
        for run in runs:
            if run.child_session_key in text:
                counts[run.run_id] += 1
    return counts


async def test_announces_are_delivered_once_while_chat_apis_fail_sends(tmp_path: Path) -> None:
    seed = fault_seed(4242)
    faults = SendFaults(seed, FAULT_RATE)
    slack_fake = FakeSlack(channels={"C1", "C2"})
    await slack_fake.start()
    discord_fake = FakeDiscord()
    await discord_fake.start()
    discord_fake.deleted_channels.add(DISCORD_GONE)
    slack_fake.fault = faults.slack
    discord_fake.fault = faults.discord
    slack = SlackChannel(
        SlackConfig(
            enabled=True,
            mode="socket",
            bot_token=SecretStr(BOT_TOKEN),
            app_token=SecretStr(APP_TOKEN),
            api_base_url=slack_fake.api_base_url,
        )
    )
    discord = DiscordChannel(
        DiscordConfig(
            enabled=True,
            token=SecretStr(discord_fake.token),
            api_base_url=discord_fake.api_base_url,
            gateway_url=discord_fake.gateway_url,
        ),
        guild_ready_timeout=0.01,
    )
    config = {"agent": {"subagents": {"maxConcurrent": 4}}}
    try:
        chats: dict[str, Channel] = {slack.name: slack, discord.name: discord}
        async with running_gateway(tmp_path, config=config, channels=chats) as gw:
            origins = {
                "slack-c1": Origin("slack", TEAM_ID, "C1", None, "channel"),
                "slack-thread": Origin("slack", TEAM_ID, "C2", "1700000001.000001", "channel"),
                "slack-gone": Origin("slack", TEAM_ID, SLACK_GONE, None, "channel"),
                "discord-chat": Origin("discord", "bot", DISCORD_CHAT, None, "channel"),
                "discord-thread": Origin("discord", "bot", DISCORD_THREAD, None, "channel"),
                "discord-gone": Origin("discord", "bot", DISCORD_GONE, None, "channel"),
            }
            run_ids: dict[str, list[str]] = {}
            for name, origin in origins.items():
                ctx = await chat_context(gw, origin)
                tasks = [f"task: {name}-{n}" for n in range(RUNS_PER_CHAT)]
                run_ids[name] = await spawn_runs(gw, ctx, tasks)
            every = [r for ids in run_ids.values() for r in ids]
            await wait_final(gw, every, GUARD_SECONDS)
            deliveries = {r: await gw.delivery(r) for r in every}
            runs = {r: await gw.db.runs.get(r) for r in every}
    finally:
        await discord_fake.close()
        await slack_fake.close()

    # The faults really happened (else this test proves nothing).
    assert faults.injected["slack 500"] > 0, faults.injected
    assert faults.injected["discord 503"] > 0, faults.injected
    known = [run for run in runs.values() if run is not None]
    assert len(known) == len(runs)
    assert {run.progress.status for run in known} == {"done"}
    gone = {*run_ids["slack-gone"], *run_ids["discord-gone"]}
    # Every announce to a chat that exists reached it exactly once...
    slack_posts = posts_per_run([p.text for p in slack_fake.posts], known)
    discord_posts = posts_per_run(
        [str(body["content"]) for bodies in discord_fake.posted.values() for body in bodies],
        known,
    )
    assert duplicates(slack_posts) == {}
    assert duplicates(discord_posts) == {}
    slack_ok = {r for name in ("slack-c1", "slack-thread") for r in run_ids[name]}
    discord_ok = {r for name in ("discord-chat", "discord-thread") for r in run_ids[name]}
    assert set(slack_posts) == slack_ok
    assert set(discord_posts) == discord_ok
    for run in known:
        if run.run_id not in gone:
            assert deliveries[run.run_id].state == "delivered"
            assert run.delivery.announce_state == "delivered", run
    # ... in its thread.
    threaded = {p.thread_ts for p in slack_fake.posts if p.channel == "C2"}
    assert threaded == {"1700000001.000001"}
    assert set(discord_fake.posted) == {DISCORD_CHAT, DISCORD_THREAD}
    # A permanent failure is recorded on the run after one attempt, never retried.
    for run_id in gone:
        lost = runs[run_id]
        assert lost is not None
        assert lost.delivery.announce_state == "failed", lost
        assert lost.delivery.announce_error, lost
        assert deliveries[run_id].state == "failed"
        assert deliveries[run_id].attempts == 1
    gone_slack_calls = [
        c for c in slack_fake.calls_to("chat.postMessage") if c.args.get("channel") == SLACK_GONE
    ]
    assert len(gone_slack_calls) == RUNS_PER_CHAT
    gone_discord = discord_fake.requests_to("POST", f"/channels/{DISCORD_GONE}/messages")
    assert len(gone_discord) == RUNS_PER_CHAT
    audit = audit_transcripts(tmp_path / "state")
    assert (audit.invalid, audit.torn, audit.headless) == ([], [], [])
