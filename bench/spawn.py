"""Sub-agent spawning (issue 5): the accept path, memory per queued run, and end to end.

Run with ``python -m bench.spawn``. Three benchmarks, each beside a baseline in the same
process run:

**Accept latency.** The daemon's own app (``build_app`` + ``prepare_app``) serves on a free
loopback port. The ``subagent`` lane (width 1) is held by a first run whose model call the
fake provider never answers, so every spawn queues: what is measured is the accept path
(validate, create the child session, record the run, enqueue, answer). A load client in a
child process (so it does not share the server's loop and CPU) sends ``calls``
``POST /v1/tools/invoke`` ``sessions_spawn`` calls over ``clients`` concurrent connections,
and the same number of ``GET /healthz`` calls with the same concurrency: the HTTP stack's
floor under the same load. Figures: p50 and p99 latency. Goal: p99 ratio ≤ 1.5×.

**Memory per queued run.** With the lane held the same way, ``queued`` runs are spawned
through ``Spawner.spawn``. A queued run holds, in the process: its lane entry (a job
handle and the closure that will run it) and the manager's run-id → handle map entry; on
disk: its ``runs`` and ``sessions`` rows and a transcript with its header and ``spawned``
event (plus one event line in the parent's). Caches bounded by design (SQLite's page cache
per connection, the store's path cache, the writer's open descriptors) fill up during the
fill, so they are part of the figure. Figures: RSS growth per run (``VmRSS``) and Python
heap growth per run (``tracemalloc``, which does not see SQLite's own allocations). The
baseline is the naive queue: one asyncio task per request, parked on a semaphore, holding
its request and run id. Each side's RSS fill stays alive while the other is measured so
neither reuses memory the other freed. Goal: RSS ≤ 4 KiB per run.

**End to end.** ``subagents`` runs, ``maxConcurrent: width``, on the zero-latency fake: each
run is the child's model call, then the announce turn's, then delivery through the outbox
to the in-memory channel. Figures: runs per second and process CPU ms per run, from the
first spawn until every announce is delivered and every transcript line written. The
baseline makes the same provider calls (the very bodies Herald sent, recorded by the fake)
with a bare ``aiohttp`` loop of ``width`` workers. The fake runs in this process, so its
CPU is in both figures.
"""

from __future__ import annotations

import asyncio
import gc
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

from bench._common import (
    HOLD_TASK,
    CountingChannel,
    Gateway,
    Row,
    bench_settings,
    fake_openai,
    format_table,
    load_from_process,
    percentile,
    replay,
    row,
    rss_bytes,
    running_app,
    running_services,
)
from gateway.sessions import SessionKey
from gateway.state import Origin
from gateway.subagents import SpawnAccepted, Spawner, SpawnRequest
from gateway.tools import ToolContext

CALLS = 10_000
CLIENTS = 64
QUEUED = 10_000
SUBAGENTS = 1_000
WIDTH = 8
#: Calls before measuring: connections open, code paths and caches warm.
WARMUP_CALLS = 500
P99_RATIO_GOAL = 1.5
RSS_PER_RUN_GOAL = 4096
QUICK: dict[str, Any] = {"calls": 200, "clients": 8, "queued": 200, "subagents": 40}
ORIGIN = Origin(channel="memory", account="default", chat_id="c1", chat_type="channel")


async def _requester(services: Gateway) -> ToolContext:
    """The tool context of a chat session on the in-memory channel (announces go there)."""
    key = SessionKey.chat_channel("main", ORIGIN.channel, ORIGIN.chat_id, None)
    session = await services.store.ensure(key, origin=ORIGIN)
    return services.contexts.for_session(session)


def _manager(services: Gateway) -> Spawner:
    return services.spawner


async def _spawn(manager: Spawner, ctx: ToolContext, task: str) -> str:
    result = await manager.spawn(ctx, SpawnRequest(task=task, label="bench"))
    if not isinstance(result, SpawnAccepted):
        raise SystemExit(f"bench.spawn: spawn refused: {result}")
    return result.run_id


# -- accept latency --------------------------------------------------------------------


async def accept_latencies(
    calls: int, clients: int, *, cluster: dict[str, Any] | None = None
) -> tuple[list[float], list[float]]:
    """Seconds per accepted ``sessions_spawn`` and per ``GET /healthz`` (see the module
    docstring), on SQLite, or on PostgreSQL with ``cluster`` as the ``cluster`` section."""
    spawn_body = {"tool": "sessions_spawn", "args": {"task": "queued work", "label": "bench"}}
    with tempfile.TemporaryDirectory(prefix="herald-bench-") as tmp:
        async with fake_openai() as fake:
            settings = bench_settings(Path(tmp) / "state", fake.base_url, cluster=cluster)
            async with running_app(settings, Path(tmp)) as (url, services):
                async with aiohttp.ClientSession() as client:
                    hold = {"tool": "sessions_spawn", "args": {"task": HOLD_TASK}}
                    async with client.post(f"{url}/v1/tools/invoke", json=hold) as response:
                        if response.status != 200:
                            raise SystemExit(f"bench.spawn: {await response.text()}")
                async with asyncio.timeout(30):
                    await fake.held.wait()
                warm = min(WARMUP_CALLS, calls)
                health_url, spawn_url = f"{url}/healthz", f"{url}/v1/tools/invoke"
                await load_from_process(health_url, method="GET", count=warm, clients=clients)
                await load_from_process(
                    spawn_url, method="POST", count=warm, clients=clients, body=spawn_body
                )
                health = await load_from_process(
                    health_url, method="GET", count=calls, clients=clients
                )
                spawns = await load_from_process(
                    spawn_url, method="POST", count=calls, clients=clients, body=spawn_body
                )
                await _check_queued(services, warm + calls)
    return spawns, health


async def _check_queued(services: Gateway, count: int) -> None:
    """Every accepted spawn is a run waiting its turn (behind the held one)."""
    queued = len(await services.db.runs.list(statuses=["queued"]))
    # One process: the lane holds them too (in a cluster, procrastinate's queue does).
    lane = services.lanes.subagent.queued if services.cluster is None else queued
    if queued != count or lane != count:
        raise SystemExit(f"bench.spawn: {queued} runs queued ({lane} in the lane), not {count}")


async def _accept(calls: int, clients: int) -> list[Row]:
    spawns, health = await accept_latencies(calls, clients)
    label = f"{calls:,} calls, {clients} clients"
    ms = 1000.0
    return [
        row(
            f"accept p50 ms vs /healthz ({label})",
            percentile(spawns, 50) * ms,
            percentile(health, 50) * ms,
            "report",
        ),
        row(
            f"accept p99 ms vs /healthz ({label})",
            percentile(spawns, 99) * ms,
            percentile(health, 99) * ms,
            f"ratio <= {P99_RATIO_GOAL}",
        ),
    ]


# -- memory per queued run -------------------------------------------------------------

Release = Callable[[], Awaitable[None]]


async def _baseline_fill(count: int) -> Release:
    """The naive queue: a task per request, parked on a semaphore that never opens."""
    gate = asyncio.Semaphore(0)

    async def job(request: SpawnRequest, run_id: str) -> str:
        async with gate:
            return f"{run_id}: {request.task}"

    tasks = [
        asyncio.create_task(job(SpawnRequest(task=f"queued {n}", label="bench"), str(uuid.uuid4())))
        for n in range(count)
    ]
    await asyncio.sleep(0)

    async def release() -> None:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    return release


async def _herald_fill(services: Gateway, ctx: ToolContext, count: int) -> Release:
    manager = _manager(services)
    before = services.lanes.subagent.queued
    for n in range(count):
        await _spawn(manager, ctx, f"queued {n}")
    await services.store.flush()
    if services.lanes.subagent.queued != before + count:
        raise SystemExit("bench.spawn: the lane did not queue every run")

    async def release() -> None:
        return None  # the gateway's shutdown leaves them queued, as a restart would find them

    return release


async def _rss_growth(fill: Callable[[], Awaitable[Release]], count: int) -> tuple[float, Release]:
    gc.collect()
    before = rss_bytes()
    release = await fill()
    gc.collect()
    return (rss_bytes() - before) / count, release


async def _traced_growth(fill: Callable[[], Awaitable[Release]], count: int) -> float:
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        release = await fill()
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    await release()
    return (after - before) / count


async def _memory(queued: int) -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="herald-bench-") as tmp:
        async with fake_openai() as fake:
            settings = bench_settings(Path(tmp) / "state", fake.base_url)
            async with running_services(settings, Path(tmp), CountingChannel()) as services:
                ctx = await _requester(services)
                await _spawn(_manager(services), ctx, HOLD_TASK)
                async with asyncio.timeout(30):
                    await fake.held.wait()
                await _herald_fill(services, ctx, min(WARMUP_CALLS, queued))
                await (await _baseline_fill(min(WARMUP_CALLS, queued)))()

                def herald() -> Awaitable[Release]:
                    return _herald_fill(services, ctx, queued)

                def baseline() -> Awaitable[Release]:
                    return _baseline_fill(queued)

                base_rss, base_release = await _rss_growth(baseline, queued)
                herald_rss, _ = await _rss_growth(herald, queued)
                await base_release()
                base_traced = await _traced_growth(baseline, queued)
                herald_traced = await _traced_growth(herald, queued)
    label = f"{queued:,} queued"
    return [
        row(
            f"bytes RSS per queued run ({label})",
            herald_rss,
            base_rss,
            f"herald <= {RSS_PER_RUN_GOAL}",
            digits=1,
        ),
        row(
            f"bytes traced (tracemalloc) per queued run ({label})",
            herald_traced,
            base_traced,
            "report",
            digits=1,
        ),
    ]


# -- end to end ------------------------------------------------------------------------


async def _end_to_end(subagents: int, width: int) -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="herald-bench-") as tmp:
        async with fake_openai() as fake:
            settings = bench_settings(Path(tmp) / "state", fake.base_url, subagent_width=width)
            channel = CountingChannel()
            async with running_services(settings, Path(tmp), channel) as services:
                manager = _manager(services)
                ctx = await _requester(services)
                warm = min(2 * width, subagents)
                for n in range(warm):
                    await _spawn(manager, ctx, f"warm-up {n}")
                await services.lanes.subagent.join()
                await channel.wait_sent(warm)
                fake.record = []
                gc.collect()
                cpu, wall = time.process_time(), time.perf_counter()
                for n in range(subagents):
                    await _spawn(manager, ctx, f"task {n}")
                await services.lanes.subagent.join()
                await channel.wait_sent(warm + subagents)
                await services.store.flush()
                h_cpu, h_wall = time.process_time() - cpu, time.perf_counter() - wall
                bodies, fake.record = fake.record, None
                bad = [m.text for m in channel.sent if "Stats: runtime" not in m.text]
                if bad or len(bodies) != 2 * subagents:
                    raise SystemExit(f"bench.spawn: {len(bodies)} calls; announce {bad[:1]}")
                gc.collect()
                cpu, wall = time.process_time(), time.perf_counter()
                await replay(f"{fake.base_url}/chat/completions", bodies, concurrency=width)
                b_cpu, b_wall = time.process_time() - cpu, time.perf_counter() - wall
    label = f"{subagents:,} runs, width {width}"
    per = 1000 / subagents
    return [
        row(f"e2e runs per second ({label})", subagents / h_wall, subagents / b_wall, "report"),
        row(f"e2e CPU ms per run ({label})", h_cpu * per, b_cpu * per, "report"),
    ]


async def _measure(calls: int, clients: int, queued: int, subagents: int, width: int) -> list[Row]:
    rows = await _accept(calls, clients)
    rows += await _memory(queued)
    rows += await _end_to_end(subagents, width)
    return rows


def run(
    *,
    calls: int = CALLS,
    clients: int = CLIENTS,
    queued: int = QUEUED,
    subagents: int = SUBAGENTS,
    width: int = WIDTH,
) -> list[Row]:
    """Run the three spawn benchmarks beside their baselines; one row per figure."""
    return asyncio.run(_measure(calls, clients, queued, subagents, width))


def main() -> None:
    """Print the benchmark's rows as a small table."""
    print(format_table(run()))


if __name__ == "__main__":
    main()
