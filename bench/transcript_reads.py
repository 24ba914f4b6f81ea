"""Issue 23, item 1: reading a large transcript over HTTP costs what the answer holds.

Run with ``python -m bench.transcript_reads``. The gateway runs in this process (the daemon's
app on a loopback port) with one session whose transcript is ``megabytes`` MiB of 8 KiB
messages. Load comes from child processes (their work is not the server's): four clients
asking ``GET …/transcript?limit=1`` and four asking ``GET …/history?limit=1``, ``reads``
requests each, while a fifth process polls ``GET /healthz``.

Rows: the server's peak RSS during the reads (Linux ``VmHWM``, reset just before) against
its RSS when idle (goal: at most 64 MiB above it); ``/healthz`` p99 latency during the reads
against ``/healthz`` alone (goal: unaffected, ≤ 1.5×); for information, the p50 time of one
``limit=1`` read against one ``/healthz``, and the first read (which indexes the file).
Before this issue the same reads parsed the whole file: four at once raised RSS by 1.4 GiB.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import orjson

from bench._common import (
    Row,
    bench_settings,
    format_table,
    load_from_process,
    percentile,
    row,
    rss_bytes,
    running_app,
    settle_memory,
)
from gateway.llm import ChatMessage
from gateway.sessions import message_record

QUICK = {"megabytes": 24, "reads": 10}
KEY = "agent:main:main"
MIB = 1024 * 1024
#: The most the reads may add to the server's resident memory.
RSS_ALLOWANCE_MIB = 64
HEALTHZ_CALLS = 3000
CLIENTS = 4


def _reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark (``VmHWM``) of this process; False if refused."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as refs:
            refs.write("5")
    except OSError:
        return False
    return True


def _peak_rss() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise SystemExit("bench: no VmHWM in /proc/self/status (Linux only)")


async def _write_transcript(path: Path, megabytes: int) -> int:
    """Append ``megabytes`` MiB of message lines to ``path``; returns the lines written."""
    lines = [
        orjson.dumps(message_record(ChatMessage(role="user", content=f"{n} " + "x" * 8000))) + b"\n"
        for n in range(64)
    ]
    written, count = 0, 0
    with path.open("ab") as file:
        while written < megabytes * MIB:
            line = lines[count % len(lines)]
            file.write(line)
            written += len(line)
            count += 1
    return count


async def _measure(megabytes: int, reads: int) -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="herald-bench-reads-") as tmp:
        root = Path(tmp)
        settings = bench_settings(root / "state", "http://127.0.0.1:9/v1")
        async with running_app(settings, root) as (url, gateway):
            record = await gateway.store.ensure(KEY)
            await gateway.store.flush()
            await _write_transcript(gateway.store.transcript_path(record), megabytes)
            transcript = f"{url}/v1/sessions/{KEY}/transcript?limit=1"
            history = f"{url}/v1/sessions/{KEY}/history?limit=1"
            async with aiohttp.ClientSession() as session:
                started = time.perf_counter()
                async with session.get(transcript) as response:
                    await response.read()
                first_read = time.perf_counter() - started
            healthz_alone = await load_from_process(
                f"{url}/healthz", method="GET", count=HEALTHZ_CALLS, clients=1
            )
            settle_memory()
            idle = rss_bytes()
            if not _reset_peak_rss():
                raise SystemExit("bench: /proc/self/clear_refs refused (peak RSS unmeasurable)")
            during, transcript_times, history_times = await asyncio.gather(
                load_from_process(f"{url}/healthz", method="GET", count=HEALTHZ_CALLS, clients=1),
                load_from_process(transcript, method="GET", count=reads * CLIENTS, clients=CLIENTS),
                load_from_process(history, method="GET", count=reads * CLIENTS, clients=CLIENTS),
            )
            peak = _peak_rss()
    label = f"{megabytes} MiB transcript, {CLIENTS}+{CLIENTS} clients"
    reads_p50 = statistics.median(transcript_times + history_times)
    return [
        row(
            f"transcript reads: peak RSS MiB during limit=1 reads vs idle ({label})",
            peak / MIB,
            idle / MIB,
            f"herald <= baseline + {RSS_ALLOWANCE_MIB}",
            digits=1,
        ),
        row(
            "transcript reads: /healthz p99 ms during those reads vs alone",
            percentile(during, 99) * 1000,
            percentile(healthz_alone, 99) * 1000,
            "ratio <= 1.5",
        ),
        row(
            "transcript reads:   p50 ms of one limit=1 read (transcript or history) vs /healthz",
            reads_p50 * 1000,
            statistics.median(healthz_alone) * 1000,
            "(information)",
        ),
        row(
            "transcript reads:   first read ms (indexes the file) vs /healthz",
            first_read * 1000,
            statistics.median(healthz_alone) * 1000,
            "(information)",
        ),
    ]


def run(megabytes: int = 120, reads: int = 25) -> list[Row]:
    """Rows for ``python -m bench``."""
    return asyncio.run(_measure(megabytes, reads))


if __name__ == "__main__":
    quick = "--quick" in sys.argv[1:]
    print(format_table(run(**QUICK) if quick else run()))
