"""What the gateway benchmarks share: a zero-latency OpenAI-compatible fake, a gateway run
in-process on a temporary state directory, an HTTP load generator, and the results table.

Bench code never imports ``tests``: the fake here is deliberately tiny. It answers
``POST /v1/chat/completions`` from a fixed, stateless rule so that concurrent runs need no
coordination: while a request offers tools and fewer than ``tool_rounds`` tool results
follow its last user message, it answers with one call of ``tool``; otherwise with text.
A request whose last user message is :data:`HOLD_TASK` is held until :meth:`FakeOpenAI.release`
(how the benchmarks keep the ``subagent`` lane busy so later runs queue). A last user message
``fan N [yield] TAG`` (see :func:`fan_text`) that no tool result follows yet is answered
with ``N`` ``sessions_spawn`` calls of tasks ``child K of TAG``, then one ``sessions_yield``
call if asked: the orchestration benchmarks' chat turn. A child's request waits while its
``TAG`` is held (:meth:`FakeOpenAI.hold_children`), so no child can end before its yield.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import re
import statistics
import sys
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from channels import Channel, InboundMessage, OutboundMessage, SentMessage
from channels.memory import MemoryChannel
from gateway.app import AppParts, build_app
from gateway.reload import SettingsHolder
from gateway.settings import HeraldSettings

Row = dict[str, Any]

HOST = "127.0.0.1"
PROVIDER = "fake"
MODEL = "bench-model"
#: The first sub-agent task of a lane-blocking benchmark: the fake holds its model call.
HOLD_TASK = "hold the lane"
#: Guard against a hung benchmark (a lost reply); never a statement about speed.
HANG_GUARD_SECONDS = 600.0
COLUMNS = ("figure", "herald", "baseline", "ratio", "goal")
#: The chat message the fake answers with spawns (and a yield), and its children's tasks.
FAN = re.compile(r"^fan (\d+)( yield)? (\S+)$")
CHILD = re.compile(r"^child \d+ of (\S+)$")
#: Arguments the fake sends with its tool call (other tools get ``{}``).
TOOL_ARGUMENTS: dict[str, dict[str, Any]] = {
    "ls": {"path": "."},
    "read": {"path": "notes.md"},
    "time__get_current_time": {"timezone": "UTC"},
}


# -- the fake provider ------------------------------------------------------------------


class FakeOpenAI:
    """A zero-latency Chat Completions server on loopback (see the module docstring).

    ``record`` keeps every request body, in arrival order, so a baseline can replay the
    exact bytes Herald sent.
    """

    def __init__(
        self, *, tool_rounds: int = 0, tool: str = "ls", window: int | None = None
    ) -> None:
        self.tool_rounds = tool_rounds
        self.tool = tool
        #: A context window to enforce as a provider does: prompt tokens are counted as a
        #: quarter of the request's JSON (messages and tools), and a request whose prompt
        #: plus ``max_tokens`` exceeds it is refused (``refused`` counts them).
        self.window = window
        self.refused = 0
        self.arguments = orjson.dumps(TOOL_ARGUMENTS.get(tool, {})).decode()
        self.record: list[bytes] | None = None
        self.requests = 0
        self.held = asyncio.Event()
        self._released = asyncio.Event()
        self._held_children: dict[str, asyncio.Event] = {}
        self.base_url = ""

    def release(self) -> None:
        """Answer the held request (and any later one for :data:`HOLD_TASK`)."""
        self._released.set()

    def hold_children(self, tag: str) -> None:
        """Hold the model calls of ``tag``'s children until :meth:`release_children`."""
        self._held_children[tag] = asyncio.Event()

    def release_children(self, tag: str) -> None:
        """Answer ``tag``'s children, now and from now on."""
        gate = self._held_children.pop(tag, None)
        if gate is not None:
            gate.set()

    async def complete(self, request: web.Request) -> web.Response:
        raw = await request.read()
        self.requests += 1
        if self.record is not None:
            self.record.append(raw)
        body = orjson.loads(raw)
        messages = body.get("messages") or []
        prompt_tokens = 100 + 10 * len(messages)
        if self.window is not None:
            sent = len(orjson.dumps(messages)) + len(orjson.dumps(body.get("tools") or []))
            prompt_tokens = -(-sent // 4)
            if prompt_tokens + int(body.get("max_tokens") or 0) > self.window:
                self.refused += 1
                error = {
                    "message": f"This model's maximum context length is {self.window} tokens.",
                    "type": "invalid_request_error",
                    "code": "context_length_exceeded",
                }
                return web.json_response({"error": error}, status=400)
        users = since = 0
        last_user = ""
        for message in messages:
            if message.get("role") == "user":
                users, since, last_user = users + 1, 0, str(message.get("content"))
            elif message.get("role") == "tool":
                since += 1
        if last_user == HOLD_TASK:
            self.held.set()
            await self._released.wait()
        child = CHILD.match(last_user)
        gate = self._held_children.get(child[1]) if child else None
        if gate is not None:
            await gate.wait()
        reply: dict[str, Any]
        fan = FAN.match(last_user) if since == 0 and body.get("tools") else None
        if fan is not None:
            reply, finish = _fan_reply(users, int(fan[1]), bool(fan[2]), fan[3]), "tool_calls"
        elif body.get("tools") and since < self.tool_rounds:
            call = {
                "id": f"call_{users}_{since}",
                "type": "function",
                "function": {"name": self.tool, "arguments": self.arguments},
            }
            reply, finish = (
                {"role": "assistant", "content": None, "tool_calls": [call]},
                "tool_calls",
            )
        elif self.window is not None and not body.get("tools"):
            # A summary call (no tools offered): about half the tokens it may write.
            words = max(1, int(body.get("max_tokens") or 0) // 2)
            reply, finish = {"role": "assistant", "content": "gist " * words}, "stop"
        else:
            reply, finish = {"role": "assistant", "content": f"done after {since} tools"}, "stop"
        answer = {
            "id": f"chatcmpl-{self.requests}",
            "object": "chat.completion",
            "model": body.get("model", MODEL),
            "choices": [{"index": 0, "message": reply, "finish_reason": finish}],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": 12,
                "total_tokens": prompt_tokens + 12,
            },
        }
        return web.Response(body=orjson.dumps(answer), content_type="application/json")


def fan_text(children: int, tag: str, *, yields: bool) -> str:
    """The chat message the fake answers with ``children`` spawns, and a yield if asked;
    ``tag`` (no spaces) names the children's tasks."""
    return f"fan {children}{' yield' if yields else ''} {tag}"


def _fan_reply(users: int, children: int, yields: bool, tag: str) -> dict[str, Any]:
    calls = [
        _call(
            f"call_{users}_{n}", "sessions_spawn", {"task": f"child {n} of {tag}", "label": f"c{n}"}
        )
        for n in range(children)
    ]
    if yields:
        calls.append(_call(f"call_{users}_yield", "sessions_yield", {}))
    return {"role": "assistant", "content": None, "tool_calls": calls}


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": orjson.dumps(arguments).decode()},
    }


@asynccontextmanager
async def fake_openai(
    *, tool_rounds: int = 0, tool: str = "ls", window: int | None = None
) -> AsyncIterator[FakeOpenAI]:
    """Serve a :class:`FakeOpenAI` on a free loopback port; ``fake.base_url`` ends in /v1."""
    fake = FakeOpenAI(tool_rounds=tool_rounds, tool=tool, window=window)
    app = web.Application()
    app.router.add_post("/v1/chat/completions", fake.complete)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    try:
        site = web.TCPSite(runner, HOST, 0)
        await site.start()
        fake.base_url = f"{_url_of(runner)}/v1"
        yield fake
    finally:
        fake.release()
        await runner.cleanup()


def _url_of(runner: web.AppRunner) -> str:
    host, port = runner.addresses[0][:2]
    return f"http://{host}:{port}"


# -- a gateway in-process -----------------------------------------------------------------


def bench_settings(
    state_dir: Path,
    base_url: str,
    *,
    main_width: int = 4,
    subagent_width: int = 1,
    model: dict[str, Any] | None = None,
    agent: dict[str, Any] | None = None,
    cluster: dict[str, Any] | None = None,
    mcp: dict[str, Any] | None = None,
    webchat: bool = False,
) -> HeraldSettings:
    """Settings of a benchmark gateway: one agent on the fake provider, no chat accounts
    (the web chat with ``webchat``); ``model`` and ``agent`` add keys to the model's and the
    ``agent`` section's config, ``cluster`` is the ``cluster`` section (a PostgreSQL state
    database), ``mcp`` the ``mcp`` section."""
    data: dict[str, Any] = {
        "gateway": {"host": HOST, "stateDir": str(state_dir), "shutdownDrainSeconds": 0},
        "agent": {
            "model": f"{PROVIDER}/{MODEL}",
            "maxConcurrent": main_width,
            # Benchmarks queue thousands of runs from one session.
            "subagents": {"maxConcurrent": subagent_width, "maxChildrenPerSession": 1_000_000},
            **(agent or {}),
        },
        "models": {
            "providers": {
                PROVIDER: {
                    "api": "openai-completions",
                    "baseUrl": base_url,
                    "apiKey": "sk-bench",
                    "maxRetries": 0,
                    # The held request must outlive the longest benchmark.
                    "timeoutSeconds": 86_400,
                    "models": [
                        {"id": MODEL, "cost": {"input": 0.15, "output": 0.6}, **(model or {})}
                    ],
                }
            }
        },
        "routing": {"defaultAgent": "main", "agents": {"main": {"name": "Main"}}},
        "channels": {"webchat": {"enabled": webchat}},
        **({"cluster": cluster} if cluster is not None else {}),
        **({"mcp": mcp} if mcp is not None else {}),
    }
    settings = HeraldSettings.model_validate(data)
    # The fs tools work inside the agent's workspace; give `ls` something to list.
    workspace = state_dir / "workspaces" / "main"
    workspace.mkdir(parents=True, exist_ok=True)
    for name in ("notes.md", "plan.md", "todo.txt"):
        (workspace / name).write_text(f"{name}\n" * 20, encoding="utf-8")
    return settings


class CountingChannel(MemoryChannel):
    """The in-memory channel, plus a cheap wait for "``n`` messages sent so far" and the
    wall-clock time (as the runs' ``ended_at``) each message was handed to it (``handed``)."""

    def __init__(self, name: str = "memory") -> None:
        super().__init__(name)
        self.handed: list[tuple[float, OutboundMessage]] = []
        self._target = 0
        self._reached = asyncio.Event()

    async def send(self, message: OutboundMessage) -> SentMessage:
        handed = time.time()
        sent = await super().send(message)
        self.handed.append((handed, message))
        if len(self.sent) >= self._target:
            self._reached.set()
        return sent

    async def wait_sent(self, count: int) -> None:
        """Return once ``count`` messages in all have been sent."""
        if len(self.sent) >= count:
            return
        self._target = count
        self._reached.clear()
        async with asyncio.timeout(HANG_GUARD_SECONDS):
            await self._reached.wait()

    def message(self, text: str, chat_id: str) -> InboundMessage:
        return self.inbound(text, chat_id=chat_id)


#: A started gateway app's parts, as the benchmarks use them.
Gateway = AppParts


@asynccontextmanager
async def running_services(
    settings: HeraldSettings, config_dir: Path, channel: Channel
) -> AsyncIterator[Gateway]:
    """The gateway's app, started as the daemon starts it (no socket), ``channel`` the chat."""
    app = build_app(
        SettingsHolder(settings), config_dir=config_dir, channels={channel.name: channel}
    )
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    try:
        yield Gateway(app)
    finally:
        await runner.cleanup()


@asynccontextmanager
async def running_app(
    settings: HeraldSettings, config_dir: Path
) -> AsyncIterator[tuple[str, Gateway]]:
    """The daemon's aiohttp app (``build_app``) on a free loopback port."""
    app = build_app(SettingsHolder(settings), config_dir=config_dir)
    runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    try:
        site = web.TCPSite(runner, HOST, 0)
        await site.start()
        yield _url_of(runner), Gateway(app)
    finally:
        await runner.cleanup()


# -- replaying requests with a bare client ------------------------------------------------


async def replay(url: str, bodies: Sequence[bytes], *, concurrency: int = 1) -> None:
    """POST each recorded body, decode the answer as a client must; ``concurrency`` workers.

    The bodies are decoded first and re-encoded per call: a bare client also builds its JSON.
    """
    payloads = [orjson.loads(body) for body in bodies]
    headers = {"Content-Type": "application/json", "Authorization": "Bearer sk-bench"}
    queue = iter(payloads)
    async with aiohttp.ClientSession() as session:

        async def worker() -> None:
            for payload in queue:
                async with session.post(url, data=orjson.dumps(payload), headers=headers) as r:
                    answer = orjson.loads(await r.read())
                if not answer.get("choices"):
                    raise SystemExit(f"bench: the fake gave no choices: {answer}")

        await asyncio.gather(*(worker() for _ in range(concurrency)))


# -- an HTTP load generator in its own process --------------------------------------------


async def _load(url: str, method: str, body: bytes | None, count: int, clients: int) -> list[float]:
    latencies: list[float] = []
    remaining = count
    connector = aiohttp.TCPConnector(limit=clients)
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                start = time.perf_counter()
                async with session.request(method, url, data=body, headers=headers) as r:
                    await r.read()
                    if r.status != 200:
                        raise SystemExit(f"bench load: {method} {url} answered {r.status}")
                latencies.append(time.perf_counter() - start)

        await asyncio.gather(*(worker() for _ in range(clients)))
    return latencies


async def load_from_process(
    url: str, *, method: str, count: int, clients: int, body: Any = None
) -> list[float]:
    """Latencies (seconds) of ``count`` requests from ``clients`` concurrent connections.

    The client runs in a child process: sharing the server's event loop, it would take
    the server's CPU and its own work would show up as server latency.
    """
    args = [sys.executable, "-m", "bench._common", "load", url, method, str(count), str(clients)]
    if body is not None:
        args.append(orjson.dumps(body).decode())
    proc = await asyncio.create_subprocess_exec(
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"bench load client failed: {err.decode(errors='replace')[-2000:]}")
    latencies: list[float] = orjson.loads(out)
    return latencies


def _load_main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench._common load")
    parser.add_argument("url")
    parser.add_argument("method")
    parser.add_argument("count", type=int)
    parser.add_argument("clients", type=int)
    parser.add_argument("body", nargs="?")
    ns = parser.parse_args(argv)
    body = ns.body.encode() if ns.body is not None else None
    latencies = asyncio.run(_load(ns.url, ns.method, body, ns.count, ns.clients))
    sys.stdout.buffer.write(orjson.dumps(latencies))


# -- measuring ----------------------------------------------------------------------------


def percentile(values: Sequence[float], pct: int) -> float:
    """The ``pct``-th percentile (1–99) of ``values``."""
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[pct - 1]


def rss_bytes() -> int:
    """The process's resident set size now (Linux ``/proc/self/status``)."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise SystemExit("bench: no VmRSS in /proc/self/status (Linux only)")


def settle_memory() -> None:
    gc.collect()


def row(figure: str, herald: float, baseline: float, goal: str, *, digits: int = 3) -> Row:
    """One result row; the ratio is Herald over the baseline."""
    ratio = herald / baseline if baseline else float("inf")
    return {
        "figure": figure,
        "herald": round(herald, digits),
        "baseline": round(baseline, digits),
        "ratio": round(ratio, 3),
        "goal": goal,
    }


def format_table(rows: Iterable[Row]) -> str:
    """The rows as aligned plain text."""
    rows = list(rows)
    width = max([len("figure"), *(len(str(r["figure"])) for r in rows)])
    lines = [f"{'figure':<{width}} {'herald':>12} {'baseline':>12} {'ratio':>8}  goal"]
    for r in rows:
        lines.append(
            f"{r['figure']:<{width}} {r['herald']!s:>12} {r['baseline']!s:>12} "
            f"{r['ratio']!s:>8}  {r['goal']}"
        )
    return "\n".join(lines)


def format_markdown(rows: Iterable[Row]) -> str:
    """The rows as a Markdown table."""
    lines = ["| figure | Herald | baseline | ratio | goal |", "|---|---:|---:|---:|---|"]
    for r in rows:
        cells = [str(r.get(column, "")).replace("|", "\\|") for column in COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1:2] != ["load"]:
        raise SystemExit("usage: python -m bench._common load URL METHOD COUNT CLIENTS [BODY]")
    _load_main(sys.argv[2:])
