"""Issue 2: time from ``herald run`` to ``/healthz`` answering, against the time of
``python -c "import aiohttp"`` (goal: under 3× that).

Both are fresh processes of the same interpreter, timed from spawn to done (the gateway:
until ``GET /healthz`` first answers 200, polled every 2 ms). Medians of ``rounds`` runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

from bench._common import Row, format_table, row

QUICK = {"rounds": 2}
ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def _gateway_start(config: Path, port: int) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERALD_")}
    started = time.perf_counter()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway",
        "run",
        "--config",
        str(config),
        "--port",
        str(port),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        env=env,
        cwd=ROOT,
    )
    try:
        async with asyncio.timeout(60), aiohttp.ClientSession() as http:
            while True:
                with contextlib.suppress(aiohttp.ClientError):
                    async with http.get(f"http://127.0.0.1:{port}/healthz") as response:
                        if response.status == 200:
                            return time.perf_counter() - started
                await asyncio.sleep(0.002)
    finally:
        process.terminate()
        await process.wait()


async def _import_aiohttp() -> float:
    started = time.perf_counter()
    process = await asyncio.create_subprocess_exec(sys.executable, "-c", "import aiohttp")
    await process.wait()
    return time.perf_counter() - started


async def _measure(rounds: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "herald.json"
        config.write_text(json.dumps({"gateway": {"stateDir": f"{tmp}/state"}}), encoding="utf-8")
        herald, baseline = [], []
        for _ in range(rounds):
            herald.append(await _gateway_start(config, _free_port()))
            baseline.append(await _import_aiohttp())
    return statistics.median(herald), statistics.median(baseline)


def run(rounds: int = 5) -> list[Row]:
    """Start the gateway (embedded defaults: web chat and the demo model) ``rounds`` times."""
    herald, baseline = asyncio.run(_measure(rounds))
    rows = [row("startup to /healthz (s)", herald, baseline, "< 3x")]
    print(format_table(rows))
    return rows


if __name__ == "__main__":
    run()
