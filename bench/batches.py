"""Yielded batches against plain announces (issue 14): runs per second, CPU ms per run.

Run with ``python -m bench.batches``. Both sides are the production path on the real
``openai-completions`` provider pointed at the zero-latency fake, ``subagent`` lane width
``width``, ``batches`` chats of one message each, at most ``window`` of them in flight:

- Herald (yield): the chat turn spawns ``children`` sub-agents and calls ``sessions_yield``
  (one model call); each child's turn is one model call and posts nothing; when the batch's
  last child is final, one follow-up turn (one model call) answers with the stats line
  through the outbox. Per batch of 5: 7 model calls, 1 message to the chat.
- Baseline (v1, plain announces): the same chat turn without the yield (two model calls:
  the spawns, then a text reply); each child's turn, then its announce turn, then its
  announce through the outbox, each completion written into the chat's history between
  turns. Per batch of 5: 12 model calls, 6 messages to the chat.

Both measured in the same process, one gateway each on a fresh state directory, each after
a warm-up, from the first message until every message is delivered, the lanes are idle and
every transcript line is written; ``rounds`` alternating rounds, each side's best kept.
Figures: runs per second, and process CPU ms per run (every thread: the database and
transcript writers count; the fake runs in this process, so its CPU is inside both figures,
more of it on the baseline's side, which makes more calls).
The yield side's children wait at the fake for their batch's yield (see
``bench._orchestration``), so every child is in its batch. Goal: within 1.3× of the
baseline (runs per second at least 1/1.3 of it, CPU per run at most 1.3×).
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
    Gateway,
    Row,
    bench_settings,
    fake_openai,
    fan_text,
    format_table,
    row,
    running_services,
)
from bench._orchestration import YieldGate

BATCHES = 1_000
CHILDREN = 5
WIDTH = 8
#: Chats in flight at once: enough queued children to keep every lane slot busy.
WINDOW = 16
WARMUP_BATCHES = 10
ROUNDS = 2
RATIO_GOAL = 1.3
QUICK: dict[str, Any] = {"batches": 20, "rounds": 1}


async def _drive(
    services: Gateway,
    channel: CountingChannel,
    gate: YieldGate | None,
    *,
    tag: str,
    batches: int,
    children: int,
    window: int,
) -> None:
    """``batches`` chats each sending one ``fan`` message, at most ``window`` in flight;
    returns once everything they caused is delivered and written."""
    yields = gate is not None
    per_batch = 1 if yields else 1 + children
    first = len(channel.sent)
    for n in range(batches):
        if n >= window:
            await channel.wait_sent(first + per_batch * (n - window + 1))
        chat = f"{tag}-{n}"
        if gate is not None:
            gate.watch(chat)
        await channel.receive(channel.message(fan_text(children, chat, yields=yields), chat))
    await channel.wait_sent(first + per_batch * batches)
    for lane in (services.lanes.subagent, services.lanes.session):
        await lane.join()
    await services.store.flush()
    _check(channel, first, batches, children, yields=yields)


def _check(
    channel: CountingChannel, first: int, batches: int, children: int, *, yields: bool
) -> None:
    """Every chat got what its side promises, or the figures would measure something else."""
    sent = channel.sent[first:]
    if yields:
        good = [m for m in sent if f"Stats: {children} sub-agents ({children} done)" in m.text]
    else:
        good = [m for m in sent if m.kind == "announce" and "Stats: runtime" in m.text]
        good += [m for m in sent if m.kind == "reply" and m.text.startswith("done after")]
    expected = batches * (1 if yields else 1 + children)
    if len(sent) != expected or len(good) != expected:
        bad = [m.text for m in sent if m not in good][:1]
        raise SystemExit(f"bench.batches: {len(sent)} messages, {len(good)} as expected; {bad}")


async def _side(
    *, yields: bool, batches: int, children: int, width: int, window: int
) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one side on a gateway of its own."""
    with tempfile.TemporaryDirectory(prefix="herald-bench-") as tmp:
        async with fake_openai() as fake:
            settings = bench_settings(Path(tmp) / "state", fake.base_url, subagent_width=width)
            channel = CountingChannel()
            async with running_services(settings, Path(tmp), channel) as services:
                gate = YieldGate.install(services, fake) if yields else None
                sizes = {"children": children, "window": window}
                warm = min(WARMUP_BATCHES, batches)
                await _drive(services, channel, gate, tag="warm", batches=warm, **sizes)
                gc.collect()
                cpu, wall = time.process_time(), time.perf_counter()
                await _drive(services, channel, gate, tag="b", batches=batches, **sizes)
                return time.process_time() - cpu, time.perf_counter() - wall


async def _measure(batches: int, children: int, width: int, window: int, rounds: int) -> list[Row]:
    sizes = {"batches": batches, "children": children, "width": width, "window": window}
    herald: list[tuple[float, float]] = []
    baseline: list[tuple[float, float]] = []
    for _ in range(rounds):
        baseline.append(await _side(yields=False, **sizes))
        herald.append(await _side(yields=True, **sizes))
    runs = batches * children
    label = f"{batches:,} batches of {children}, width {width}"
    return [
        row(
            f"runs per second, yielded batches vs plain announces ({label})",
            runs / min(wall for _, wall in herald),
            runs / min(wall for _, wall in baseline),
            f"ratio >= {1 / RATIO_GOAL:.2f}",
        ),
        row(
            f"CPU ms per run, yielded batches vs plain announces ({label})",
            min(cpu for cpu, _ in herald) * 1000 / runs,
            min(cpu for cpu, _ in baseline) * 1000 / runs,
            f"ratio <= {RATIO_GOAL}",
        ),
    ]


def run(
    *,
    batches: int = BATCHES,
    children: int = CHILDREN,
    width: int = WIDTH,
    window: int = WINDOW,
    rounds: int = ROUNDS,
) -> list[Row]:
    """Measure both sides; one row per figure."""
    return asyncio.run(_measure(batches, children, width, window, rounds))


def main() -> None:
    """Print the benchmark's rows as a small table."""
    print(format_table(run()))


if __name__ == "__main__":
    main()
