"""Fan-in overhead of ``sessions_yield`` (issue 14): from the last child's end to the reply.

Run with ``python -m bench.fanin``. Herald's side is the production path: a chat message
handed to the in-memory channel's handler runs a turn on the real ``openai-completions``
provider pointed at the zero-latency fake, whose answer spawns ``children`` sub-agents and
calls ``sessions_yield``; each child's turn is one model call; when the last child ends, the
batch's follow-up turn (one model call) runs on the chat session's lane and its reply, with
the stats line, goes through the outbox to the channel. One batch at a time, each in a chat
of its own.

The figure is the time from the last child's end (the run's ``ended_at``, written when its
turn returned) to the follow-up reply handed to the channel (the channel's own wall-clock
stamp): the child's final status, the batch's bookkeeping, the follow-up's transcript lines
and database writes, its model call, the outbox. The baseline is the model call alone:
after each batch, the very follow-up request body Herald sent (recorded by the fake) posted
to the same fake by a bare ``aiohttp`` client on a warm connection, the answer decoded.
Each side is the median over ``batches``, measured alternately. Goal: Herald ≤ 1.5× the
baseline. For scale, a second row gives a plain chat turn's time (message in, one model
call, reply sent) against the same call, and a third the fan-in in one chat that has
yielded ``long_chat`` batches before (the follow-up's cost must not grow with the
conversation's age beyond the longer model request, which the baseline sends too).
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from bench._common import (
    CountingChannel,
    Gateway,
    Row,
    bench_settings,
    fake_openai,
    fan_text,
    format_table,
    row,
    running_services,
)
from bench._orchestration import YieldGate, chat_key

BATCHES = 200
CHILDREN = 10
WIDTH = 8
WARMUP_BATCHES = 3
RATIO_GOAL = 1.5
#: Batches yielded one after another in one chat: its history grows by ~13 KiB each.
LONG_CHAT_BATCHES = 100
#: The aged-chat row is the median of the last 1/5 of those batches.
LONG_MEASURED_PART = 5
LONG_CHAT = "long"
QUICK: dict[str, Any] = {"batches": 3, "long_chat": 3}
#: How a follow-up's user message begins (its request is the one the baseline replays).
FOLLOWUP_PREFIX = "[sub-agent completion] The sub-agents you waited for"
#: A chat message the fake answers with text at once (the plain-turn row, for scale).
PLAIN_TEXT = "hello"


async def _batch(
    services: Gateway, channel: CountingChannel, gate: YieldGate, chat_id: str, children: int
) -> float:
    """One yielded batch in chat ``chat_id``: seconds from its last child's end to its reply."""
    before = len(channel.handed)
    gate.watch(chat_id)
    await channel.receive(channel.message(fan_text(children, chat_id, yields=True), chat_id))
    await channel.wait_sent(before + 1)
    await services.store.flush()
    (handed, message), *extra = channel.handed[before:]
    if extra or message.chat_id != chat_id or f"Stats: {children} sub-agents" not in message.text:
        raise SystemExit(f"bench.fanin: expected one follow-up reply, got {message.text!r}")
    runs = await services.db.runs.list(parent_session_key=chat_key(chat_id), limit=children)
    ended = [run.progress.ended_at for run in runs if run.progress.ended_at is not None]
    batch_ids = {run.delivery.batch_id for run in runs}
    if len(ended) != children or len(batch_ids) != 1 or None in batch_ids:
        raise SystemExit(f"bench.fanin: {len(runs)} runs in the batch, not {children}")
    return handed - max(ended)


async def _plain_turn(channel: CountingChannel, chat_id: str) -> float:
    """Seconds from a plain message (one model call, no tools) to its reply sent."""
    before = len(channel.handed)
    start = time.time()
    await channel.receive(channel.message(PLAIN_TEXT, chat_id))
    await channel.wait_sent(before + 1)
    (handed, message), *extra = channel.handed[before:]
    if extra or message.chat_id != chat_id or not message.text.startswith("done after"):
        raise SystemExit(f"bench.fanin: unexpected plain reply {message.text!r}")
    return handed - start


async def _bare_call(client: aiohttp.ClientSession, url: str, body: bytes) -> float:
    """Seconds of one call of ``body``, encoded and its answer decoded as a client must."""
    headers = {"Content-Type": "application/json", "Authorization": "Bearer sk-bench"}
    payload = orjson.loads(body)
    start = time.perf_counter()
    async with client.post(url, data=orjson.dumps(payload), headers=headers) as response:
        answer = orjson.loads(await response.read())
    elapsed = time.perf_counter() - start
    if not answer.get("choices"):
        raise SystemExit(f"bench.fanin: the fake gave no choices: {answer}")
    return elapsed


def _followup_body(bodies: list[bytes]) -> bytes:
    """The one recorded request whose last user message is a batch's follow-up."""
    found = []
    for body in bodies:
        users = [m for m in orjson.loads(body).get("messages") or [] if m.get("role") == "user"]
        if users and str(users[-1].get("content", "")).startswith(FOLLOWUP_PREFIX):
            found.append(body)
    if len(found) != 1:
        raise SystemExit(f"bench.fanin: {len(found)} follow-up calls in one batch")
    return found[0]


async def _measure(batches: int, children: int, width: int, long_chat: int) -> list[Row]:
    fresh: list[tuple[float, float, float]] = []
    aged: list[tuple[float, float, float]] = []
    with tempfile.TemporaryDirectory(prefix="herald-bench-") as tmp:
        async with fake_openai() as fake, aiohttp.ClientSession() as client:
            url = f"{fake.base_url}/chat/completions"
            settings = bench_settings(Path(tmp) / "state", fake.base_url, subagent_width=width)
            channel = CountingChannel()
            async with running_services(settings, Path(tmp), channel) as services:
                gate = YieldGate.install(services, fake)

                async def measured(chat_id: str, plain_chat: str) -> tuple[float, float, float]:
                    """(fan-in, plain turn, bare call) seconds, measured back to back."""
                    fake.record = []
                    gap = await _batch(services, channel, gate, chat_id, children)
                    body = _followup_body(fake.record)
                    fake.record = None
                    turn = await _plain_turn(channel, plain_chat)
                    return gap, turn, await _bare_call(client, url, body)

                for n in range(WARMUP_BATCHES + batches):
                    fresh.append(await measured(f"b-{n}", f"p-{n}"))
                for n in range(long_chat):
                    aged.append(await measured(LONG_CHAT, f"q-{n}"))
                key = chat_key(LONG_CHAT)
                path = services.store.transcript_path(await services.store.require(key))
                history_kib = path.stat().st_size / 1024
    # The first calls open connections and warm code paths and caches.
    fresh = fresh[WARMUP_BATCHES:]
    aged = aged[-max(1, long_chat // LONG_MEASURED_PART) :]

    def median_ms(sample: list[tuple[float, float, float]], column: int) -> float:
        return statistics.median(item[column] for item in sample) * 1000

    label = f"{batches} batches of {children}, width {width}"
    return [
        row(
            f"fan-in ms, last child's end to follow-up sent, vs one bare model call ({label})",
            median_ms(fresh, 0),
            median_ms(fresh, 2),
            f"ratio <= {RATIO_GOAL}",
        ),
        row(
            "  for scale: a plain chat turn's ms, message in to reply sent (one model call)",
            median_ms(fresh, 1),
            median_ms(fresh, 2),
            "(information)",
        ),
        row(
            f"  same fan-in, in one chat after {long_chat} batches ({history_kib:,.0f} KiB of"
            " transcript)",
            median_ms(aged, 0),
            median_ms(aged, 2),
            "(information)",
        ),
    ]


def run(
    *,
    batches: int = BATCHES,
    children: int = CHILDREN,
    width: int = WIDTH,
    long_chat: int = LONG_CHAT_BATCHES,
) -> list[Row]:
    """Measure the fan-in overhead beside one bare model call; one row, then a plain chat
    turn's for scale and the fan-in in a long conversation."""
    return asyncio.run(_measure(batches, children, width, long_chat))


def main() -> None:
    """Print the benchmark's rows as a small table."""
    print(format_table(run()))


if __name__ == "__main__":
    main()
