"""One huge server-sent event from a model (issue 35, finding 6), against the quadratic
reader Herald had before.

Run with ``python -m bench.sse``. A model fake in a child process (its CPU is no part of the
figures) answers a streamed Chat Completions request with a role chunk, ONE text event of
the asked size (written in 16 KiB slices, as TLS records deliver it), the finish, the usage
and ``[DONE]``. The gateway (``build_app`` on a loopback port) serves ``/healthz``; in its
event loop its own ``openai-completions`` provider makes the streamed call. Meanwhile a
second child process asks ``/healthz`` every :data:`PROBE_GAP` seconds, each request on its
own schedule (an open loop: a stalled event loop delays every request due during the stall,
as it would delay real ones), until the call has ended.

Figures, for the largest event Herald reads (:data:`~gateway.providers._sse.MAX_EVENT_BYTES`)
and a 32 MiB one (refused with ``StreamEventTooLargeError``): the ``/healthz`` p99 while the
calls stream, and the event loop's longest block in CPU time meanwhile (a 1 ms ticker's
gaps, :func:`_ticker`: the machine's other load stretches wall time, not this); and, with
no probe, a call's CPU time (the process's). The baseline reads the same stream in the
same loop with the reader Herald had before (kept below as :func:`quadratic_events`: each
chunk appended to a bytes buffer, and the whole buffer searched and split again). Also:
``/healthz`` p99 with no stream at all, and how a call's CPU grows from an event 8× smaller
(linear: 8; quadratic: 64).
Goal: ``/healthz`` p99 under 50 ms while a 32 MiB event streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from bench._common import (
    HOST,
    MODEL,
    PROVIDER,
    Row,
    bench_settings,
    format_table,
    row,
    running_app,
)
from gateway.llm import ChatMessage, ModelRequest
from gateway.providers import StreamEventTooLargeError
from gateway.providers._sse import MAX_EVENT_BYTES

MIB = 1024 * 1024
#: The event the issue measured at 22.7 s of frozen loop.
HUGE_BYTES = 32 * MIB
#: The small event of the linearity figure: the largest one is 8 times its size.
SMALL_BYTES = MAX_EVENT_BYTES // 8
#: The fake writes the event in slices of a TLS record's largest plaintext, as an HTTPS
#: provider's bytes arrive.
SLICE = 16 * 1024
#: Seconds between two ``/healthz`` requests of the probe (200 a second: a steady load
#: that leaves the machine's two cores to the stream).
PROBE_GAP = 0.005
#: Seconds of probing with no stream, for the idle baseline.
IDLE_SECONDS = 2.0
#: Each figure's calls go on for at least this long: 400 probes or more, so that one
#: moment the machine's other work takes the CPU is not the p99 by itself.
PROBE_SECONDS = 2.0
#: Calls per figure at least (the median CPU is kept; the probe spans them all).
CALLS = 3
#: Calls per CPU figure (the median is kept).
CPU_CALLS = 5
QUICK: dict[str, Any] = {"calls": 1, "huge": 2 * MAX_EVENT_BYTES}
HANG_GUARD = 600.0


# -- the model fake (child process) -------------------------------------------------------


def _event(data: bytes) -> bytes:
    return b"data: " + data + b"\n\n"


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return _event(orjson.dumps({"id": "c", "model": MODEL, "choices": [choice]}))


@functools.cache
def big_event(size: int) -> bytes:
    """A text delta event whose lines are ``size`` bytes (the blank line after them aside);
    made once per size, so the fake's CPU does not compete with the gateway's call by call."""
    overhead = len(_chunk({"content": ""})) - 2
    return _chunk({"content": "x" * (size - overhead)})


async def _complete(request: web.Request) -> web.StreamResponse:
    body = orjson.loads(await request.read())
    size = int(body["messages"][-1]["content"])  # the request says how large an event
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    with contextlib.suppress(ConnectionError):  # a refusing client hangs up mid-event
        await response.write(_chunk({"role": "assistant", "content": ""}))
        event = big_event(size)
        for start in range(0, len(event), SLICE):
            await response.write(event[start : start + SLICE])
        await response.write(_chunk({}, "stop"))
        usage = {"prompt_tokens": 10, "completion_tokens": 1}
        await response.write(_event(orjson.dumps({"choices": [], "usage": usage})))
        await response.write(_event(b"[DONE]"))
        await response.write_eof()
    return response


async def _model_main() -> None:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", _complete)
    runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    await web.TCPSite(runner, HOST, 0).start()
    port = runner.addresses[0][1]
    print(f"http://{HOST}:{port}", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await runner.cleanup()


# -- the /healthz probe (child process) ---------------------------------------------------


async def _probe_main(url: str) -> None:
    """GET ``url`` every PROBE_GAP s, each request timed from when it was due, until stdin
    closes; print the latencies (JSON)."""
    latencies: list[float] = []
    stop = asyncio.ensure_future(asyncio.get_running_loop().run_in_executor(None, sys.stdin.read))
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one(due: float) -> None:
            async with session.get(url) as answer:
                await answer.read()
            latencies.append(time.perf_counter() - due)

        pending: set[asyncio.Task[None]] = set()
        started = time.perf_counter()
        print("ready", flush=True)
        k = 0
        while not stop.done():
            due = started + k * PROBE_GAP
            k += 1
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            task = asyncio.ensure_future(one(due))
            pending.add(task)
            task.add_done_callback(pending.discard)
        await asyncio.gather(*pending)
    sys.stdout.buffer.write(orjson.dumps(latencies))


class Child:
    """A child process of this module (``model`` or ``probe``)."""

    def __init__(self, proc: asyncio.subprocess.Process, line: str) -> None:
        self.proc = proc
        self.line = line

    @classmethod
    async def start(cls, *args: str) -> Child:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bench.sse",
            *args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), HANG_GUARD)
        return cls(proc, line.decode().strip())

    async def stop(self) -> bytes:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.close()
        out = await asyncio.wait_for(self.proc.stdout.read(), HANG_GUARD)
        await asyncio.wait_for(self.proc.wait(), HANG_GUARD)
        return out


# -- the baseline: the reader Herald had before --------------------------------------------


async def quadratic_events(content: aiohttp.StreamReader) -> AsyncGenerator[bytes, None]:
    """The old ``read_events``: the buffer grows by concatenation and is searched and split
    whole at every chunk, so one event of n bytes costs O(n²). Yields each event's data."""
    buffer = b""
    async for chunk in content.iter_any():
        buffer += chunk + content.read_nowait()
        if b"\r" in buffer:
            buffer = buffer.replace(b"\r\n", b"\n")
        *blocks, buffer = buffer.split(b"\n\n")
        for block in blocks:
            lines = block.decode("utf-8", errors="replace").split("\n")
            data = [line.partition(":")[2].removeprefix(" ") for line in lines if line]
            if data:
                yield "\n".join(data).encode()


async def baseline_call(session: aiohttp.ClientSession, root: str, size: int) -> int:
    """Stream the same answer through the old reader, decoding each event's JSON as the
    provider does; the length of the text."""
    message = {"role": "user", "content": str(size)}
    body = {"model": MODEL, "stream": True, "messages": [message]}
    text = 0
    async with session.post(f"{root}/v1/chat/completions", json=body) as response:
        async for data in quadratic_events(response.content):
            if data == b"[DONE]":
                break
            for choice in orjson.loads(data).get("choices") or []:
                text += len(choice["delta"].get("content") or "")
    return text


# -- measuring ----------------------------------------------------------------------------

#: One call with an event of the given size.
Call = Callable[[int], Awaitable[None]]


def request_of(size: int) -> ModelRequest:
    """A model request asking the fake for an event of ``size`` bytes."""
    return ModelRequest(
        model=MODEL, system="", messages=(ChatMessage(role="user", content=str(size)),)
    )


@dataclass
class Probed:
    """What one figure's calls measured."""

    #: ``/healthz`` latencies meanwhile, seconds.
    healthz: list[float] = field(default_factory=list)
    #: The longest stretch of event-loop CPU between two ticks of a 1 ms ticker, seconds.
    block: float = 0.0

    @property
    def p99_ms(self) -> float:
        return statistics.quantiles(self.healthz, n=100, method="inclusive")[98] * 1000


async def _ticker(probed: Probed) -> None:
    """Note the event loop's longest block in the main thread's CPU time: unlike wall time,
    the machine's other load does not stretch it."""
    last = time.thread_time()
    while True:
        await asyncio.sleep(0.001)
        now = time.thread_time()
        probed.block = max(probed.block, now - last)
        last = now


async def _probed(healthz: str, call: Call, size: int, count: int) -> Probed:
    """``count`` calls of ``call(size)`` under the probe and the ticker, and more until
    :data:`PROBE_SECONDS` have passed."""
    probed = Probed()
    probe = await Child.start("probe", healthz)
    ticker = asyncio.ensure_future(_ticker(probed))
    began = time.perf_counter()
    made = 0
    try:
        while made < count or time.perf_counter() - began < PROBE_SECONDS:
            await call(size)
            made += 1
    finally:
        ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticker
        probed.healthz = orjson.loads(await probe.stop())
    return probed


async def _cpu(call: Call, size: int, count: int) -> float:
    """The median CPU seconds (the process's) of ``count`` calls of ``call(size)``, with no
    probe: serving it would count as the call's CPU, the more the longer the call."""
    spent = []
    for _ in range(count):
        start = time.process_time()
        await call(size)
        spent.append(time.process_time() - start)
    return statistics.median(spent)


async def _measure(calls: int, huge: int) -> list[Row]:
    model = await Child.start("model")
    try:
        with tempfile.TemporaryDirectory(prefix="herald-bench-") as tmp:
            settings = bench_settings(Path(tmp), f"{model.line}/v1")
            async with (
                running_app(settings, Path(tmp)) as (url, gw),
                aiohttp.ClientSession() as session,
            ):
                healthz = f"{url}/healthz"
                provider = gw.providers.get(PROVIDER)

                async def herald(size: int) -> None:
                    try:
                        reply = await provider.complete(request_of(size), on_text=lambda _: None)
                    except StreamEventTooLargeError:
                        if size <= MAX_EVENT_BYTES:
                            raise SystemExit(f"bench: {size} bytes refused") from None
                    else:
                        if size > MAX_EVENT_BYTES or len(reply.text) < size // 2:
                            raise SystemExit(f"bench: {size} bytes not refused, or text lost")

                async def old_reader(size: int) -> None:
                    if await baseline_call(session, model.line, size) < size // 2:
                        raise SystemExit("bench: the old reader lost the text")

                async def nothing(size: int) -> None:
                    await asyncio.sleep(IDLE_SECONDS)

                idle = await _probed(healthz, nothing, 0, 1)  # one call: IDLE_SECONDS long
                big = await _probed(healthz, herald, MAX_EVENT_BYTES, calls)
                old_big = await _probed(healthz, old_reader, MAX_EVENT_BYTES, calls)
                refused = await _probed(healthz, herald, huge, calls)
                # The old reader is quadratic: one call of the huge event is plenty.
                old_huge = await _probed(healthz, old_reader, huge, 1)
                cpu = {
                    (name, size): await _cpu(call, size, 1 if size == huge else CPU_CALLS)
                    for name, call in (("herald", herald), ("old", old_reader))
                    for size in (SMALL_BYTES, MAX_EVENT_BYTES, huge)
                }
    finally:
        await model.stop()
    big_mib, huge_mib = MAX_EVENT_BYTES // MIB, huge // MIB
    herald_cpu = {size: cpu["herald", size] for size in (SMALL_BYTES, MAX_EVENT_BYTES, huge)}
    old_cpu = {size: cpu["old", size] for size in (SMALL_BYTES, MAX_EVENT_BYTES, huge)}
    small_mib = SMALL_BYTES / MIB
    return [
        row(
            f"{big_mib} MiB event, call CPU (s) vs old reader",
            herald_cpu[MAX_EVENT_BYTES],
            old_cpu[MAX_EVENT_BYTES],
            "< 1x",
        ),
        row(
            f"{big_mib} MiB event, longest loop block, CPU ms, vs old reader",
            big.block * 1000,
            old_big.block * 1000,
            "< 50 ms",
        ),
        row(
            f"{big_mib} MiB event, /healthz p99 (ms) vs old reader",
            big.p99_ms,
            old_big.p99_ms,
            "< 50 ms",
        ),
        row(
            f"{big_mib} MiB event, /healthz p99 (ms) vs no stream",
            big.p99_ms,
            idle.p99_ms,
            "report",
        ),
        row(
            f"CPU growth, {big_mib} MiB ÷ {small_mib:g} MiB event, vs old reader's",
            herald_cpu[MAX_EVENT_BYTES] / herald_cpu[SMALL_BYTES],
            old_cpu[MAX_EVENT_BYTES] / old_cpu[SMALL_BYTES],
            "≈ 8 (linear; quadratic 64)",
        ),
        row(
            f"{huge_mib} MiB event refused, call CPU (s) vs old reader",
            herald_cpu[huge],
            old_cpu[huge],
            "< 1x",
        ),
        row(
            f"{huge_mib} MiB event refused, longest loop block, CPU ms, vs old reader",
            refused.block * 1000,
            old_huge.block * 1000,
            "< 50 ms",
        ),
        row(
            f"{huge_mib} MiB event refused, /healthz p99 (ms) vs old reader",
            refused.p99_ms,
            old_huge.p99_ms,
            "< 50 ms",
        ),
    ]


def run(calls: int = CALLS, huge: int = HUGE_BYTES) -> list[Row]:
    """``calls`` calls per figure; the refused event is ``huge`` bytes."""
    rows = asyncio.run(_measure(calls, huge))
    print(format_table(rows))
    return rows


if __name__ == "__main__":
    if sys.argv[1:2] == ["model"]:
        asyncio.run(_model_main())
    elif sys.argv[1:2] == ["probe"]:
        asyncio.run(_probe_main(sys.argv[2]))
    else:
        run()
