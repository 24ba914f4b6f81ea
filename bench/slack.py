"""Issue 6: messages per second through the Slack channel — fake Socket Mode in, fake Web API
out, zero-latency model — against the same flow through the in-memory channel.

Both sides run the whole gateway in-process on the zero-latency OpenAI-compatible fake of
:mod:`bench._common`: each message is one chat turn (one model call, transcript lines, usage
in the database) and one reply. The Slack side pushes real Socket Mode envelopes from the
wire-level fake Slack of the test suite (``tests.fakes.slack``; reused rather than copied,
since a second Slack fake would only drift) and waits until ``chat.postMessage`` has been
called once per message; the baseline injects the same messages through
:class:`channels.memory.MemoryChannel`. Messages come from ``users`` distinct DMs, so turns
of different sessions run side by side as in a busy workspace.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from pathlib import Path

from bench._common import (
    CountingChannel,
    Row,
    bench_settings,
    fake_openai,
    format_table,
    row,
    running_services,
)
from channels.slack import SlackChannel, SlackConfig
from tests.fakes.slack import APP_TOKEN, BOT_TOKEN, FakeSlack

QUICK = {"messages": 100}
#: Bound of one side of the benchmark: a guard against a hang, never a speed statement.
HANG_GUARD_SECONDS = 600


async def _through_slack(messages: int, users: int, base_url: str, state: Path) -> float:
    fake = FakeSlack(channels={f"D{n}" for n in range(users)})
    await fake.start()
    channel = SlackChannel(
        SlackConfig.model_validate(
            {
                "enabled": True,
                "botToken": BOT_TOKEN,
                "appToken": APP_TOKEN,
                "apiBaseUrl": fake.api_base_url,
            }
        )
    )
    try:
        async with running_services(bench_settings(state, base_url), state, channel):
            await fake.wait_connected()
            events = [
                fake.message(f"hello {n}", channel=f"D{n % users}", user=f"U{n % users}")
                for n in range(messages)
            ]
            started = time.perf_counter()
            for event in events:
                await fake.push_event(event)
            async with asyncio.timeout(HANG_GUARD_SECONDS):
                while len(fake.posts) < messages:  # the fake's own wait gives up after 5 s
                    with contextlib.suppress(TimeoutError):
                        await fake.wait_posts(messages)
            return time.perf_counter() - started
    finally:
        await fake.close()


async def _through_memory(messages: int, users: int, base_url: str, state: Path) -> float:
    channel = CountingChannel()
    async with running_services(bench_settings(state, base_url), state, channel):
        inbound = [channel.message(f"hello {n}", f"D{n % users}") for n in range(messages)]
        started = time.perf_counter()
        for message in inbound:
            await channel.receive(message)
        await channel.wait_sent(messages)
        return time.perf_counter() - started


async def _measure(messages: int, users: int) -> tuple[float, float]:
    async with fake_openai() as fake:
        with tempfile.TemporaryDirectory() as tmp:
            slack = await _through_slack(messages, users, fake.base_url, Path(tmp) / "slack")
            memory = await _through_memory(messages, users, fake.base_url, Path(tmp) / "memory")
    return messages / slack, messages / memory


def run(messages: int = 1000, users: int = 20) -> list[Row]:
    """``messages`` chat turns through each channel; rows of messages per second."""
    slack, memory = asyncio.run(_measure(messages, users))
    rows = [row("Slack messages/s (vs in-memory channel)", slack, memory, "report", digits=1)]
    print(format_table(rows))
    return rows


if __name__ == "__main__":
    run()
