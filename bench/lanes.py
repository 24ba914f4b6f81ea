"""Lane against a bare ``asyncio.Semaphore``: time for 100,000 no-op jobs, memory per queued job.

Run with ``python -m bench.lanes``. Both sides run in the same process; each timing is the
best of a few alternating rounds so that one noisy round does not decide the ratio.
Goals (foundation issue): time ratio ≤ 1.5×, memory per queued job ≤ 1 KiB.
"""

from __future__ import annotations

import asyncio
import gc
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from typing import Any

from bench._common import format_table, row
from lanes import Lane

JOBS = 100_000
WIDTH = 8
ROUNDS = 3
TIME_RATIO_GOAL = 1.5
BYTES_PER_QUEUED_JOB_GOAL = 1024
#: Sizes for ``python -m bench --quick``.
QUICK: dict[str, Any] = {"jobs": 10_000, "rounds": 1}


async def _noop() -> None:
    return None


async def _time_lane(jobs: int) -> float:
    lane = Lane("bench", WIDTH)
    start = time.perf_counter()
    handles = [lane.submit(_noop) for _ in range(jobs)]
    await lane.join()
    elapsed = time.perf_counter() - start
    if any(h.state != "done" for h in handles):
        raise SystemExit("bench.lanes: a lane job did not finish")
    return elapsed


async def _time_semaphore(jobs: int) -> float:
    sem = asyncio.Semaphore(WIDTH)

    async def job() -> None:
        async with sem:
            await _noop()

    start = time.perf_counter()
    tasks = [asyncio.create_task(job()) for _ in range(jobs)]
    await asyncio.gather(*tasks)
    return time.perf_counter() - start


Finish = Callable[[], Awaitable[Any]]
Fill = Callable[[asyncio.Event, int], Awaitable[Finish]]


async def _queued_bytes(fill: Fill, jobs: int) -> float:
    """Bytes traced per queued job while WIDTH gated jobs hold every place.

    Both sides keep a list of what they queued (handles, tasks), as a caller would.
    """
    gate = asyncio.Event()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        finish = await fill(gate, jobs)
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    gate.set()
    await finish()
    return (after - before) / jobs


async def _fill_lane(gate: asyncio.Event, jobs: int) -> Finish:
    lane = Lane("bench", WIDTH)
    for _ in range(WIDTH):
        lane.submit(gate.wait)
    handles = [lane.submit(_noop) for _ in range(jobs)]
    await asyncio.sleep(0)  # let the gated jobs start, as on the semaphore side
    if lane.queued != jobs:
        raise SystemExit(f"bench.lanes: expected {jobs} queued, got {lane.queued}")

    async def finish() -> None:
        await lane.join()
        if any(h.state != "done" for h in handles):
            raise SystemExit("bench.lanes: a queued lane job did not finish")

    return finish


async def _fill_semaphore(gate: asyncio.Event, jobs: int) -> Finish:
    sem = asyncio.Semaphore(WIDTH)

    async def job(gated: bool) -> None:
        async with sem:
            if gated:
                await gate.wait()

    gated = [asyncio.create_task(job(True)) for _ in range(WIDTH)]
    tasks = [asyncio.create_task(job(False)) for _ in range(jobs)]
    # Two turns: every task runs up to its semaphore wait and parks there.
    await asyncio.sleep(0)
    await asyncio.sleep(0)

    async def finish() -> None:
        await asyncio.gather(*gated, *tasks)

    return finish


async def _measure(jobs: int, rounds: int) -> list[dict[str, Any]]:
    lane_times: list[float] = []
    sem_times: list[float] = []
    for _ in range(rounds):
        lane_times.append(await _time_lane(jobs))
        sem_times.append(await _time_semaphore(jobs))
    lane_time, sem_time = min(lane_times), min(sem_times)
    lane_bytes = await _queued_bytes(_fill_lane, jobs)
    sem_bytes = await _queued_bytes(_fill_semaphore, jobs)
    return [
        row(
            f"seconds for {jobs:,} no-op jobs, width {WIDTH}",
            lane_time,
            sem_time,
            f"ratio <= {TIME_RATIO_GOAL}",
            digits=4,
        ),
        row(
            f"bytes per queued job ({jobs:,} queued)",
            lane_bytes,
            sem_bytes,
            f"herald <= {BYTES_PER_QUEUED_JOB_GOAL}",
            digits=1,
        ),
    ]


def run(jobs: int = JOBS, *, rounds: int = ROUNDS) -> list[dict[str, Any]]:
    """Run the lane benchmark and its semaphore baseline; return one row per figure.

    ``jobs`` no-op jobs go through each side; timings are the best of ``rounds``.
    """
    return asyncio.run(_measure(jobs, rounds))


def main() -> None:
    """Print the benchmark's rows as a small table."""
    print(format_table(run()))


if __name__ == "__main__":
    main()
