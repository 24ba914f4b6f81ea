"""Streamed replies in the web chat (issue 27), against a bare aiohttp relay.

Run with ``python -m bench.streaming``. A model fake on loopback, in a child process (its
CPU is no part of the figures), streams a reply of :data:`PIECES` pieces as Chat
Completions SSE (and answers plain JSON when not asked to stream); it notes the moment it
writes each answer's first piece of text (``perf_counter``, CLOCK_MONOTONIC on Linux: the
same clock in every process). A WebSocket client plays the person in the web chat.

Latency: from the model's first piece of text to the first ``delta`` frame at the page.
Herald's side is the whole production path (``build_app`` on a loopback port: the chat
turn on its lanes, the streaming ``openai-completions`` provider, the turn's stream, the
web chat's frames); the baseline is a bare aiohttp app that relays the same SSE to a
WebSocket as delta frames (read the stream, parse each event, send each piece). Both run
in this process, so the clock is one clock. p50 and p99 over ``turns`` turns each.
Goal: Herald ≤ 1.5× the relay.

CPU: process CPU time (every thread) of ``turns`` whole chat turns with ``agent.streaming``
on, beside the same turns with it off (the model answers the same text, whole); the best of
``rounds`` alternating rounds each. Goal:
streamed ≤ 1.3× unstreamed. Also reported: delta frames per streamed reply (the web chat's
"chat API calls"; Discord makes one post and at most one edit a second instead).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from bench._common import (
    HOST,
    MODEL,
    Row,
    bench_settings,
    format_table,
    percentile,
    row,
    running_app,
)

TURNS = 200
PIECES = 60
#: CPU rounds per side; each side's figure is its best round.
ROUNDS = 3
QUICK: dict[str, Any] = {"turns": 20, "rounds": 1}
LATENCY_GOAL = 1.5
CPU_GOAL = 1.3
HANG_GUARD = 60.0
WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "tea",
    "steeps",
]
#: Seconds between the model's pieces: faster than any real model (tens of ms), but a gap,
#: as on a real network, so the reader sees pieces arrive one after another.
PIECE_GAP = 0.001


_RUNS = itertools.count()


def _pieces() -> list[str]:
    return [f"{WORDS[i % len(WORDS)]} " for i in range(PIECES)]


REPLY = "".join(_pieces())


class StreamingModel:
    """The model fake (see the module docstring); ``first_text`` holds, per streamed
    answer, the ``perf_counter`` just before its first piece of text was written."""

    def __init__(self) -> None:
        self.first_text: list[float] = []
        self.base_url = ""

    async def complete(self, request: web.Request) -> web.StreamResponse:
        gap = int(request.match_info["gap_us"]) / 1e6  # the base URL says how fast to write
        body = orjson.loads(await request.read())
        if not body.get("stream"):
            message = {"role": "assistant", "content": REPLY}
            return web.json_response(
                {
                    "id": "c",
                    "model": MODEL,
                    "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": PIECES},
                },
                dumps=lambda data: orjson.dumps(data).decode(),
            )
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            return (
                b"data: " + orjson.dumps({"id": "c", "model": MODEL, "choices": [choice]}) + b"\n\n"
            )

        await response.write(chunk({"role": "assistant", "content": ""}))
        for index, piece in enumerate(_pieces()):
            if index == 0:
                self.first_text.append(time.perf_counter())
            await response.write(chunk({"content": piece}))
            if gap:
                await asyncio.sleep(gap)
        await response.write(chunk({}, "stop"))
        usage = {"prompt_tokens": 10, "completion_tokens": PIECES}
        await response.write(b"data: " + orjson.dumps({"choices": [], "usage": usage}) + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        with contextlib.suppress(ConnectionError):  # a client may close once it has [DONE]
            await response.write_eof()
        return response

    async def first_text_times(self, request: web.Request) -> web.Response:
        return web.Response(body=orjson.dumps(self.first_text), content_type="application/json")


async def _model_main() -> None:
    """The child process: serve the model fake, print its URL, run until stdin closes."""
    model = StreamingModel()
    app = web.Application()
    app.router.add_post("/gap/{gap_us}/v1/chat/completions", model.complete)
    app.router.add_get("/first-text", model.first_text_times)
    runner, url = await _serve(app)
    print(url, flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await runner.cleanup()


class ModelProcess:
    """The model fake in its child process."""

    def __init__(self, proc: asyncio.subprocess.Process, url: str) -> None:
        self.proc = proc
        self.url = url

    def base_url(self, gap: float) -> str:
        """The OpenAI ``/v1`` root at which the model writes its pieces ``gap`` s apart."""
        return f"{self.url}/gap/{round(gap * 1e6)}/v1"

    @classmethod
    async def start(cls) -> ModelProcess:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bench.streaming",
            "model",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), HANG_GUARD)
        return cls(proc, line.decode().strip())

    async def first_text(self, session: aiohttp.ClientSession) -> list[float]:
        async with session.get(f"{self.url}/first-text") as answer:
            times: list[float] = orjson.loads(await answer.read())
        return times

    async def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        await asyncio.wait_for(self.proc.wait(), HANG_GUARD)


async def _serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, HOST, 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://{HOST}:{port}"


def _relay_app(model_url: str) -> web.Application:
    """The baseline: a bare aiohttp relay from the model's SSE to WebSocket delta frames."""
    app = web.Application()

    async def socket(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async with aiohttp.ClientSession() as session:
            async for msg in ws:
                text = orjson.loads(msg.data)["text"]
                payload = {
                    "model": MODEL,
                    "stream": True,
                    "messages": [{"role": "user", "content": text}],
                }
                async with session.post(model_url, data=orjson.dumps(payload)) as answer:
                    async for line in answer.content:
                        if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
                            continue
                        choices = orjson.loads(line[6:]).get("choices") or []
                        piece = choices[0]["delta"].get("content") if choices else None
                        if piece:
                            await ws.send_str(
                                orjson.dumps(
                                    {"type": "delta", "turnId": "t", "text": piece}
                                ).decode()
                            )
                await ws.send_str(orjson.dumps({"type": "message", "kind": "reply"}).decode())
        return ws

    app.router.add_get("/webchat/ws", socket)
    return app


async def _turns(
    url: str, model: ModelProcess, turns: int, *, client: str | None
) -> tuple[list[float], float, int]:
    """(first-text → first-delta latencies, CPU seconds, delta frames) of ``turns`` turns
    over one page's socket."""
    firsts: list[float] = []
    frames = 0
    async with aiohttp.ClientSession() as session, session.ws_connect(f"{url}/webchat/ws") as ws:
        if client is not None:  # a new client each time: no replay of earlier turns
            await ws.send_str(orjson.dumps({"type": "hello", "clientId": client}).decode())
            await ws.receive()
        before = len(await model.first_text(session))
        gc.collect()
        cpu = time.process_time()
        for n in range(turns):
            await ws.send_str(orjson.dumps({"type": "message", "text": f"turn {n}"}).decode())
            first: float | None = None
            async with asyncio.timeout(HANG_GUARD):
                while True:
                    frame = orjson.loads((await ws.receive()).data)
                    if frame["type"] == "delta" and frame["text"]:
                        frames += 1
                        if first is None:
                            first = time.perf_counter()
                    if frame["type"] == "message" and frame["kind"] == "reply":
                        break
            if first is not None:
                firsts.append(first)
        cpu = time.process_time() - cpu
        written = (await model.first_text(session))[before:]
    if firsts and len(written) != len(firsts):
        raise SystemExit(
            f"bench.streaming: {len(written)} streams for {len(firsts)} turns of {turns} at {url}"
        )
    return [f - w for f, w in zip(firsts, written, strict=False)], cpu, frames


async def _herald(
    model: ModelProcess, tmp: Path, turns: int, *, streaming: bool, gap: float
) -> tuple[list[float], float, int]:
    tag = f"{streaming}-{gap}-{next(_RUNS)}"  # a fresh state and client each time
    settings = bench_settings(
        tmp / f"state-{tag}", model.base_url(gap), agent={"streaming": streaming}, webchat=True
    )
    async with running_app(settings, tmp) as (url, _):
        await _turns(url, model, min(10, turns), client=f"warm-{tag}".replace(".", "_"))
        return await _turns(url, model, turns, client=f"bench-{tag}".replace(".", "_"))


async def _measure(turns: int, rounds: int) -> list[Row]:
    model = await ModelProcess.start()
    try:
        relay = _relay_app(f"{model.base_url(PIECE_GAP)}/chat/completions")
        relay_runner, relay_url = await _serve(relay)
        try:
            await _turns(relay_url, model, min(10, turns), client=None)  # warm up
            relayed, _, _ = await _turns(relay_url, model, turns, client=None)
        finally:
            await relay_runner.cleanup()
        with tempfile.TemporaryDirectory(prefix="herald-bench-") as tmp:
            root = Path(tmp)
            paced = await _herald(model, root, turns, streaming=True, gap=PIECE_GAP)
            streamed, cpu_paced, frames = paced
            bursts: list[float] = []
            wholes: list[float] = []
            for _ in range(rounds):  # alternating rounds, the best of each: a shared machine
                bursts.append((await _herald(model, root, turns, streaming=True, gap=0))[1])
                wholes.append((await _herald(model, root, turns, streaming=False, gap=0))[1])
            cpu_burst, cpu_whole = min(bursts), min(wholes)
    finally:
        await model.stop()
    ms = 1000.0
    return [
        row(
            f"first text → first delta frame ms p50 ({turns} turns)",
            percentile(streamed, 50) * ms,
            percentile(relayed, 50) * ms,
            f"ratio <= {LATENCY_GOAL}",
        ),
        row(
            "first text → first delta frame ms p99",
            percentile(streamed, 99) * ms,
            percentile(relayed, 99) * ms,
            f"ratio <= {LATENCY_GOAL}",
        ),
        row(
            f"CPU ms per turn, streamed vs whole ({PIECES} pieces at once)",
            cpu_burst / turns * ms,
            cpu_whole / turns * ms,
            f"ratio <= {CPU_GOAL}",
        ),
        row(
            f"CPU ms per turn, pieces {PIECE_GAP * 1000:g} ms apart vs whole (report)",
            cpu_paced / turns * ms,
            cpu_whole / turns * ms,
            "report",
        ),
        row("delta frames per streamed reply (report)", frames / turns, float(PIECES), "report"),
    ]


def run(turns: int = TURNS, rounds: int = ROUNDS) -> list[Row]:
    """Run the streaming benchmark and its baselines; one row per figure."""
    return asyncio.run(_measure(turns, rounds))


def main() -> None:
    """Print the benchmark's rows as a small table (``model``: be the model fake)."""
    if sys.argv[1:] == ["model"]:
        asyncio.run(_model_main())
        return
    print(format_table(run()))


if __name__ == "__main__":
    main()
