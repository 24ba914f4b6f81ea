"""CPU per turn as a session grows (issue 16): 10, 100, 1,000 and 10,000 turns.

Run with ``python -m bench.sessions``. Each length is one chat session driven through the
production path of a chat message (the in-memory channel's handler: routing, the session
and ``main`` lanes, the conversation and its history cache, ``run_turn`` on the real
``openai-completions`` provider, the transcript writer, the state database, the reply back
to the channel) up to that many turns, one turn at a time; then ``measured`` more turns are
timed (process CPU: every thread counts). The model has a small context window (4,000
tokens; the fake reports a prompt that grows with the conversation), so the session is
compacted by a summary every ~165 turns, through the same fake: its cost is in the figure.

The baseline is the same measurement at 10 turns, so the ratio says how much a turn costs
more in a long session. Goal: ≤ 1.5 at 10,000 turns — nothing per turn may grow with the
history beyond the compacted request. For information, the same with ``compaction.mode:
"off"`` (the whole history sent every turn, as before compaction) at 1,000 turns.

Small window on defaults (issue 23): ``small_turns`` turns on a model of
``SMALL_WINDOW`` tokens with no ``maxTokens`` or ``reserveTokens`` set, against a fake
that counts prompts as providers do (system prompt and tool schemas included) and refuses
one that does not fit. Goals: at most 1.25 model calls per turn (compactions included), the
last ``keepRecentTurns`` turns whole in every chat request, no refusal.
"""

from __future__ import annotations

import asyncio
import gc
import re
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from bench._common import (
    CountingChannel,
    Row,
    bench_settings,
    fake_openai,
    format_table,
    row,
    running_services,
)

LENGTHS = (10, 100, 1_000, 10_000)
MEASURED = 500
OFF_LENGTH = 1_000
#: Small enough that a summary is due every ~165 turns: each measured window holds a few.
CONTEXT_WINDOW = 4_000
RATIO_GOAL = 1.5
QUICK: dict[str, Any] = {
    "lengths": (10, 50),
    "measured": 30,
    "off_length": 50,
    "small_turns": 40,
}
#: A small local model's window, configured with nothing else (defaults for the rest).
SMALL_WINDOW = 4_096
SMALL_TURNS = 150
CALLS_PER_TURN_GOAL = 1.25
#: ``agent.compaction.keepRecentTurns``'s default.
KEEP_RECENT_TURNS = 4
_TURN_TEXT = re.compile(r"^message (\d+)$")


async def _turns(channel: CountingChannel, chat: str, start: int, count: int) -> None:
    """``count`` turns in ``chat``, one at a time, numbered from ``start``."""
    for n in range(start, start + count):
        await channel.receive(channel.message(f"message {n}", chat))
        await channel.wait_sent(len(channel.sent) + 1)


async def _per_turn(lengths: tuple[int, ...], measured: int, mode: str) -> dict[int, float]:
    """CPU seconds per turn after each of ``lengths`` turns, one fresh session each."""
    seconds: dict[int, float] = {}
    with tempfile.TemporaryDirectory(prefix="herald-bench-") as tmp:
        async with fake_openai() as fake:
            settings = bench_settings(
                Path(tmp) / "state",
                fake.base_url,
                model={"maxTokens": 256, "contextWindow": CONTEXT_WINDOW},
                agent={"compaction": {"mode": mode, "reserveTokens": 500}},
            )
            channel = CountingChannel()
            async with running_services(settings, Path(tmp), channel) as services:
                for length in lengths:
                    chat = f"{mode}-{length}"
                    channel.sent.clear()  # the bench's own record, not Herald's memory
                    await _turns(channel, chat, 0, length)
                    await services.store.flush()
                    gc.collect()
                    cpu = time.process_time()
                    await _turns(channel, chat, length, measured)
                    await services.store.flush()
                    seconds[length] = (time.process_time() - cpu) / measured
                    wrong = [
                        m.text for m in channel.sent[-measured:] if not m.text.startswith("done")
                    ]
                    if wrong:
                        raise SystemExit(f"bench.sessions: unexpected reply {wrong[0]!r}")
    return seconds


def _recent_turns_whole(body: dict[str, Any]) -> bool | None:
    """Whether a chat request holds its last :data:`KEEP_RECENT_TURNS` turns whole (each
    earlier user message followed by its reply); None for a summary call (no tools)."""
    if not body.get("tools"):
        return None
    messages = body["messages"]
    numbered = [
        (i, int(m[1]))
        for i, msg in enumerate(messages)
        if msg.get("role") == "user" and (m := _TURN_TEXT.match(str(msg.get("content"))))
    ]
    current = numbered[-1][1]
    wanted = range(max(0, current - KEEP_RECENT_TURNS + 1), current + 1)
    at = {n: i for i, n in numbered}
    for n in wanted:
        if n not in at:
            return False
        following = messages[at[n] + 1] if at[n] + 1 < len(messages) else None
        if n != current and (following is None or following.get("role") != "assistant"):
            return False
    return True


async def _small_window(turns: int) -> tuple[int, int, int, int]:
    """(model calls, chat requests missing a recent turn, chat requests, refusals) over
    ``turns`` turns of one chat on a small window with default settings."""
    with tempfile.TemporaryDirectory(prefix="herald-bench-") as tmp:
        async with fake_openai(window=SMALL_WINDOW) as fake:
            fake.record = []
            settings = bench_settings(
                Path(tmp) / "state", fake.base_url, model={"contextWindow": SMALL_WINDOW}
            )
            channel = CountingChannel()
            async with running_services(settings, Path(tmp), channel) as services:
                await _turns(channel, "small", 0, turns)
                await services.store.flush()
            wrong = [m.text for m in channel.sent if not m.text.startswith("done")]
            if wrong:
                raise SystemExit(f"bench.sessions: unexpected reply {wrong[0]!r}")
            checks = [_recent_turns_whole(orjson.loads(raw)) for raw in fake.record]
    chats = [c for c in checks if c is not None]
    return fake.requests, chats.count(False), len(chats), fake.refused


def run(
    lengths: tuple[int, ...] = LENGTHS,
    *,
    measured: int = MEASURED,
    off_length: int = OFF_LENGTH,
    small_turns: int = SMALL_TURNS,
) -> list[Row]:
    """CPU ms per turn at each session length, against the shortest; one row per length,
    and one for a session as long as ``off_length`` without compaction."""
    summary = asyncio.run(_per_turn(lengths, measured, "summary"))
    first = lengths[0]
    rows: list[Row] = []
    for length in lengths[1:]:
        goal = f"ratio <= {RATIO_GOAL}" if length == lengths[-1] else "report"
        rows.append(
            row(
                f"CPU ms per turn at {length:,} turns vs {first:,} ({measured} turns timed)",
                summary[length] * 1000,
                summary[first] * 1000,
                goal,
            )
        )
    off = asyncio.run(_per_turn((first, off_length), measured, "off"))
    rows.append(
        row(
            f"  same without compaction (mode off), {off_length:,} turns vs {first:,}",
            off[off_length] * 1000,
            off[first] * 1000,
            "(information)",
        )
    )
    calls, missing, chats, refused = asyncio.run(_small_window(small_turns))
    label = f"{small_turns} turns, {SMALL_WINDOW:,}-token window, defaults"
    rows += [
        row(
            f"model calls per turn vs one ({label})",
            calls / small_turns,
            1.0,
            f"herald <= {CALLS_PER_TURN_GOAL}",
        ),
        row(
            f"  chat requests without their last {KEEP_RECENT_TURNS} turns whole, of all",
            float(missing),
            float(chats),
            "herald = 0",
        ),
        row("  requests refused as too long, of all", float(refused), float(calls), "herald = 0"),
    ]
    return rows


def main() -> None:
    """Print the benchmark's rows as a small table."""
    print(format_table(run()))


if __name__ == "__main__":
    main()
