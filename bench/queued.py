"""Queued sub-agent runs: what each one costs while it waits, at 1,000, 10,000 and 100,000.

Run with ``python -m bench.queued``. For each size a fresh gateway (the daemon's app,
started as the daemon starts it) has its ``subagent`` lane (width 1) held by a first run
whose model call the fake provider never answers, so every later spawn queues. ``size``
runs are then spawned through ``Spawner.spawn`` from one chat session, :data:`IN_FLIGHT` at
a time (as many HTTP clients would), each recorded (its session and run rows, one
transaction shared with the spawns committing beside it) and queued on the lane.

Figures per size: wall time per spawn (from the first spawn until every one is recorded and
queued) and RSS growth per queued run (``VmRSS``, after a collection). A queued run holds, in
the process, its lane entry and the manager's handle; its rows are on disk and its
transcript is not begun until it runs. Bounded caches (SQLite's page cache, the session and
transcript-path caches, the store's set of adopted sessions) fill during the first
thousands, so they weigh on the small sizes most.

The baseline is the naive queue beside it, at the same size: one asyncio task per request,
parked on a semaphore, holding its request and run id (no record anywhere). Its tasks stay
alive while Herald's runs are measured, so neither reuses memory the other freed.

Goal: a flat per-run cost — the cost per run at 100,000 queued within 1.5× of the cost at
1,000 (the last two rows compare Herald at the largest size with Herald at the smallest).
"""

from __future__ import annotations

import asyncio
import gc
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from bench._common import (
    HOLD_TASK,
    CountingChannel,
    Gateway,
    Row,
    bench_settings,
    fake_openai,
    format_table,
    row,
    rss_bytes,
    running_services,
)
from gateway.sessions import SessionKey
from gateway.state import Origin
from gateway.subagents import SpawnAccepted, SpawnRequest
from gateway.tools import ToolContext

SIZES = (1_000, 10_000, 100_000)
#: Spawns in flight at once during a fill, as from that many concurrent clients.
IN_FLIGHT = 64
#: Runs queued before measuring: code paths and the bounded caches warm.
WARMUP = 200
FLAT_GOAL = 1.5
QUICK: dict[str, Any] = {"sizes": (100, 400)}
ORIGIN = Origin(channel="memory", account="default", chat_id="c1", chat_type="channel")

Release = Callable[[], Awaitable[None]]


async def _requester(services: Gateway) -> ToolContext:
    key = SessionKey.chat_channel("main", ORIGIN.channel, ORIGIN.chat_id, None)
    session = await services.store.ensure(key, origin=ORIGIN)
    return services.contexts.for_session(session)


async def _spawn(services: Gateway, ctx: ToolContext, task: str) -> None:
    result = await services.spawner.spawn(ctx, SpawnRequest(task=task, label="bench"))
    if not isinstance(result, SpawnAccepted):
        raise SystemExit(f"bench.queued: spawn refused: {result}")


async def _fill(services: Gateway, ctx: ToolContext, count: int) -> float:
    """Spawn ``count`` runs, :data:`IN_FLIGHT` at a time; the wall seconds it took."""
    before = services.lanes.subagent.queued
    numbers = iter(range(count))

    async def client() -> None:
        for n in numbers:
            await _spawn(services, ctx, f"queued {n}")

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(min(IN_FLIGHT, count))))
    seconds = time.perf_counter() - started
    await services.store.flush()
    if services.lanes.subagent.queued != before + count:
        raise SystemExit("bench.queued: the lane did not queue every run")
    return seconds


async def _baseline_fill(count: int) -> tuple[float, Release]:
    """The naive queue: a task per request, parked on a semaphore that never opens."""
    gate = asyncio.Semaphore(0)

    async def job(request: SpawnRequest, run_id: str) -> str:
        async with gate:
            return f"{run_id}: {request.task}"

    started = time.perf_counter()
    tasks = [
        asyncio.create_task(job(SpawnRequest(task=f"queued {n}", label="bench"), str(uuid.uuid4())))
        for n in range(count)
    ]
    await asyncio.sleep(0)  # every task started and parked
    seconds = time.perf_counter() - started

    async def release() -> None:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    return seconds, release


async def _one_size(count: int) -> tuple[tuple[float, float], tuple[float, float]]:
    """(Herald, baseline) × (seconds per run, RSS bytes per run) at ``count`` queued."""
    with tempfile.TemporaryDirectory(prefix="herald-bench-") as tmp:
        async with fake_openai() as fake:
            settings = bench_settings(Path(tmp) / "state", fake.base_url)
            async with running_services(settings, Path(tmp), CountingChannel()) as services:
                ctx = await _requester(services)
                await _spawn(services, ctx, HOLD_TASK)
                async with asyncio.timeout(60):
                    await fake.held.wait()
                await _fill(services, ctx, WARMUP)
                await (await _baseline_fill(WARMUP))[1]()
                gc.collect()
                before = rss_bytes()
                base_seconds, base_release = await _baseline_fill(count)
                gc.collect()
                base_rss = rss_bytes() - before
                before = rss_bytes()
                herald_seconds = await _fill(services, ctx, count)
                gc.collect()
                herald_rss = rss_bytes() - before
                await base_release()
    return (herald_seconds / count, herald_rss / count), (base_seconds / count, base_rss / count)


async def _measure(sizes: Sequence[int]) -> list[Row]:
    rows: list[Row] = []
    per_size: list[tuple[int, tuple[float, float]]] = []
    for count in sizes:
        (h_time, h_rss), (b_time, b_rss) = await _one_size(count)
        per_size.append((count, (h_time, h_rss)))
        label = f"{count:,} queued"
        rows.append(row(f"enqueue µs per run ({label})", h_time * 1e6, b_time * 1e6, "report"))
        rows.append(row(f"bytes RSS per queued run ({label})", h_rss, b_rss, "report", digits=1))
    (small, (s_time, s_rss)), (large, (l_time, l_rss)) = per_size[0], per_size[-1]
    versus = f"{large:,} queued vs {small:,}"
    rows.append(row(f"enqueue µs per run, {versus}", l_time * 1e6, s_time * 1e6, _flat()))
    rows.append(row(f"bytes RSS per run, {versus}", l_rss, s_rss, _flat(), digits=1))
    return rows


def _flat() -> str:
    return f"ratio <= {FLAT_GOAL}"


def run(*, sizes: Sequence[int] = SIZES) -> list[Row]:
    """Queue runs at each size beside the naive queue; one row per figure, then the two
    flatness rows (largest size against the smallest)."""
    if len(sizes) < 2:
        raise ValueError("bench.queued needs at least two sizes to compare")
    return asyncio.run(_measure(sizes))


def main() -> None:
    """Print the benchmark's rows as a small table."""
    print(format_table(run()))


if __name__ == "__main__":
    main()
