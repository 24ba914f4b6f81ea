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
"""

from __future__ import annotations

import asyncio
import gc
import tempfile
import time
from pathlib import Path
from typing import Any

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
QUICK: dict[str, Any] = {"lengths": (10, 50), "measured": 30, "off_length": 50}


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


def run(
    lengths: tuple[int, ...] = LENGTHS,
    *,
    measured: int = MEASURED,
    off_length: int = OFF_LENGTH,
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
    return rows


def main() -> None:
    """Print the benchmark's rows as a small table."""
    print(format_table(run()))


if __name__ == "__main__":
    main()
