"""Soak (issue 9, ``make soak``; not part of ``make test``): many sub-agent runs, paced over
minutes, through the real Slack channel; RSS and open file descriptors sampled throughout.

Run with ``python -m bench.soak [--runs 10000] [--minutes 10] [--quick]``.

The gateway is the daemon's own app (``build_app`` + ``prepare_app`` + ``resources_for``)
on a loopback port, with Slack in HTTP mode: the real ``SlackChannel`` (slack-bolt and
slack_sdk) against a minimal fake Slack Web API (``auth.test``, ``chat.postMessage``,
``reactions.*``), and the ``openai-completions`` provider against a zero-latency fake
Chat Completions server. Both fakes live in this module (bench code never imports
``tests``) and keep counters only, so their own memory does not grow.

Each run is one signed Slack event posted to ``/slack/events``: a top-level channel
message, so every run starts a thread and a session of its own (``replyInThread``). The
agent's first model call asks for ``sessions_spawn``; the reply ("spawned") is posted in
the thread; the sub-agent makes one model call, then its announce turn another, and the
announce goes through the outbox to ``chat.postMessage`` in that thread. Even runs use
``cleanup: "delete"`` (archived right after the announce), odd runs the scheduler
(``archiveAfterMinutes`` of a few seconds), so archiving runs throughout too. Events are
sent open-loop at a fixed pace (``runs`` spread evenly over ``minutes``).

Measured: RSS (``VmRSS``) and open descriptors (``/proc/self/fd``) every
``SAMPLE_SECONDS``; and at rest (every sent run announced, the writer flushed, a GC pass)
once after the warm-up (the first 25 % of runs, at least 300) and once at the end.
Figures, end against after warm-up: RSS at rest (goal: growth under 5 %); descriptors at
rest by kind: the database's, pipes and the like (goal: no growth), transcripts (the
writer's LRU: at most 256) and sockets (idle keep-alive connections vary by a few:
within ``SOCKET_SLACK``); the RSS peak under load, and RSS late in the run against
half-way (still growing, or a plateau of bounded caches?); runs announced and the pace
achieved. ``--trace`` adds the Python heap's net growth after the warm-up and where it
is (net: a bounded cache that replaces entries shows none). The fakes and the load
generator share the process, so their (constant) memory is in every sample.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import hmac
import itertools
import logging
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from bench._common import HOST, Gateway, Row, format_table, row, rss_bytes, running_app
from gateway.constants import TRANSCRIPT_SUFFIX
from gateway.sessions.writer import DEFAULT_MAX_OPEN_FILES
from gateway.settings import HeraldSettings

RUNS = 10_000
MINUTES = 10.0
QUICK: dict[str, Any] = {"runs": 600, "minutes": 1.0}
#: The share of runs before the baseline is taken: caches, pools and the allocator fill up.
#: Every run here starts a session of its own, and the gateway's bounded caches hold about
#: 2,000 of them (session rows 2,048; Slack's thread set 2,000): they are full after ~2,000
#: runs, so the warm-up is a quarter of 10,000. Growth after that would be a leak.
WARMUP_FRACTION = 0.25
#: At least this many warm-up runs: the transcript writer keeps up to 256 descriptors open
#: (an LRU) and each run opens two transcripts, so a shorter warm-up would count that
#: bounded cache filling up as descriptor growth.
MIN_WARMUP_RUNS = 300
#: Idle keep-alive connections in the HTTP pools (the provider's, the Slack client's, the
#: load client's and the servers' ends of them) number what recent concurrency left, so
#: the socket count at rest may differ by a few; a leak would grow with the runs.
SOCKET_SLACK = 16
#: Allocation sites shown by ``--trace``.
TRACE_TOP = 15
SAMPLE_SECONDS = 2.0
RSS_GROWTH_GOAL_PCT = 5.0
#: Scheduler-archived runs (odd ones) are archived this long after their spawn.
ARCHIVE_AFTER_MINUTES = 0.05
#: Guard against a lost announce; never a statement about speed.
SETTLE_GUARD_SECONDS = 300.0
PROGRESS_STEPS = 10

PROVIDER, MODEL = "soak", "soak-model"
BOT_TOKEN = "xoxb-soak-bot-token"
SIGNING_SECRET = "soak-signing-secret"
TEAM_ID, BOT_USER_ID, CHANNEL = "TSOAK", "USOAKBOT", "C0SOAK"
STATS_MARK = "Stats: runtime"

log = logging.getLogger("bench.soak")


# -- the fakes ----------------------------------------------------------------------------


@asynccontextmanager
async def _serve(routes: list[web.RouteDef]) -> AsyncIterator[str]:
    """Serve ``routes`` on a free loopback port; yields the root URL."""
    app = web.Application()
    app.add_routes(routes)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    try:
        await web.TCPSite(runner, HOST, 0).start()
        host, port = runner.addresses[0][:2]
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


def _completion(message: dict[str, Any], prompt_tokens: int) -> bytes:
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    return orjson.dumps(
        {
            "id": "chatcmpl-soak",
            "object": "chat.completion",
            "model": MODEL,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": 8,
                "total_tokens": prompt_tokens + 8,
            },
        }
    )


@dataclass
class FakeModel:
    """Chat Completions by rule: offered ``sessions_spawn`` and no tool result yet → call it;
    otherwise a short text. Stateless, so concurrent requests need no coordination."""

    calls: int = 0

    async def complete(self, request: web.Request) -> web.Response:
        body = orjson.loads(await request.read())
        self.calls += 1
        messages: list[dict[str, Any]] = body.get("messages") or []
        offered = {t["function"]["name"] for t in body.get("tools") or ()}
        last = messages[-1] if messages else {}
        message: dict[str, Any]
        if "sessions_spawn" in offered and last.get("role") == "user":
            n = int(str(last.get("content", "0")).rsplit(" ", 1)[-1])
            args = {"task": f"soak task {n}", "cleanup": "delete" if n % 2 == 0 else "keep"}
            call = {
                "id": f"call_{n}",
                "type": "function",
                "function": {"name": "sessions_spawn", "arguments": orjson.dumps(args).decode()},
            }
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
        elif last.get("role") == "tool":
            message = {"role": "assistant", "content": "spawned"}
        else:
            message = {"role": "assistant", "content": "the task is done"}
        body_out = _completion(message, 50 + 10 * len(messages))
        return web.Response(body=body_out, content_type="application/json")


@dataclass
class FakeSlackApi:
    """The Web API methods the Slack channel calls; counts posts, keeps nothing else."""

    posts: int = 0
    announces: int = 0
    other_calls: int = 0
    _ts: Callable[[], int] = field(default_factory=lambda: itertools.count(1).__next__)
    _announced: asyncio.Event = field(default_factory=asyncio.Event)
    _target: int = 0

    async def api(self, request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bearer {BOT_TOKEN}":
            return web.json_response({"ok": False, "error": "invalid_auth"})
        method = request.match_info["method"]
        if method == "auth.test":
            return web.json_response(
                {
                    "ok": True,
                    "url": "https://soak.slack.invalid/",
                    "team": "Soak",
                    "user": "herald",
                    "team_id": TEAM_ID,
                    "user_id": BOT_USER_ID,
                    "bot_id": "BSOAK",
                    "is_enterprise_install": False,
                }
            )
        if method != "chat.postMessage":
            self.other_calls += 1
            return web.json_response({"ok": True})
        if request.content_type == "application/json":
            args: dict[str, Any] = await request.json()
        else:
            args = dict(await request.post())
        self.posts += 1
        if STATS_MARK in str(args.get("text", "")):
            self.announces += 1
            if self.announces >= self._target:
                self._announced.set()
        n = self._ts()
        return web.json_response(
            {"ok": True, "channel": args.get("channel"), "ts": f"{1_800_000_000 + n}.{n:06d}"}
        )

    async def wait_announces(self, count: int) -> None:
        """Return once ``count`` announces in all have been posted."""
        while self.announces < count:
            self._target = count
            self._announced.clear()
            async with asyncio.timeout(SETTLE_GUARD_SECONDS):
                await self._announced.wait()


# -- the gateway and the load -----------------------------------------------------------


def soak_settings(state_dir: Path, model_url: str, slack_url: str) -> HeraldSettings:
    """One agent on the fake model; Slack in HTTP mode on the fake Web API."""
    return HeraldSettings.model_validate(
        {
            "gateway": {"host": HOST, "stateDir": str(state_dir), "shutdownDrainSeconds": 0},
            "agent": {
                "model": f"{PROVIDER}/{MODEL}",
                # Every run comes from one channel session, faster than they finish.
                "subagents": {
                    "maxConcurrent": 2,
                    "archiveAfterMinutes": ARCHIVE_AFTER_MINUTES,
                    "maxChildrenPerSession": 1_000_000,
                },
            },
            "models": {
                "providers": {
                    PROVIDER: {
                        "api": "openai-completions",
                        "baseUrl": f"{model_url}/v1",
                        "apiKey": "sk-soak",
                        "maxRetries": 0,
                        "models": [{"id": MODEL, "cost": {"input": 0.15, "output": 0.6}}],
                    }
                }
            },
            "routing": {"defaultAgent": "main", "agents": {"main": {"name": "Main"}}},
            "channels": {
                "webchat": {"enabled": False},
                "slack": {
                    "enabled": True,
                    "mode": "http",
                    "botToken": BOT_TOKEN,
                    "signingSecret": SIGNING_SECRET,
                    "apiBaseUrl": f"{slack_url}/api/",
                    "requireMention": False,
                    "replyInThread": True,
                },
            },
        }
    )


def signed_event(n: int) -> tuple[bytes, dict[str, str]]:
    """A Slack ``event_callback`` for run ``n`` and its signature headers."""
    ts = f"{1_700_000_000 + n}.{n % 1_000_000:06d}"
    event = {
        "type": "message",
        "channel": CHANNEL,
        "user": f"U{n % 50:04d}",
        "text": f"please spawn soak {n}",
        "ts": ts,
        "event_ts": ts,
        "channel_type": "channel",
        "team": TEAM_ID,
    }
    body = orjson.dumps(
        {
            "token": "soak",
            "team_id": TEAM_ID,
            "api_app_id": "ASOAK",
            "event": event,
            "type": "event_callback",
            "event_id": f"EvSOAK{n:08d}",
            "event_time": int(time.time()),
            "authorizations": [{"team_id": TEAM_ID, "user_id": BOT_USER_ID, "is_bot": True}],
        }
    )
    stamp = str(int(time.time()))
    digest = hmac.new(
        SIGNING_SECRET.encode(), b"v0:" + stamp.encode() + b":" + body, hashlib.sha256
    )
    headers = {
        "Content-Type": "application/json",
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": f"v0={digest.hexdigest()}",
    }
    return body, headers


def open_fds() -> int:
    """Open file descriptors of this process (Linux ``/proc/self/fd``)."""
    return len(os.listdir("/proc/self/fd"))


@dataclass(frozen=True)
class Descriptors:
    """Open descriptors by kind: sockets, transcripts (the writer's LRU, at most
    ``DEFAULT_MAX_OPEN_FILES``) and the rest (database, pipes, epoll, ...)."""

    sockets: int
    transcripts: int
    other: int

    @property
    def total(self) -> int:
        return self.sockets + self.transcripts + self.other


def descriptors() -> Descriptors:
    """This process's open descriptors, sorted by what they point at."""
    kinds = {"socket": 0, "transcript": 0, "other": 0}
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:  # closed meanwhile (the listing's own descriptor, say)
            continue
        if target.startswith("socket:"):
            kinds["socket"] += 1
        elif TRANSCRIPT_SUFFIX in target:
            kinds["transcript"] += 1
        else:
            kinds["other"] += 1
    return Descriptors(kinds["socket"], kinds["transcript"], kinds["other"])


@dataclass
class Sample:
    at: float
    sent: int
    announced: int
    rss: int
    fds: int


@dataclass
class Soak:
    url: str
    services: Gateway
    slack: FakeSlackApi
    http: aiohttp.ClientSession
    samples: list[Sample] = field(default_factory=list)
    sent: int = 0

    async def send(self, n: int) -> None:
        body, headers = signed_event(n)
        async with self.http.post(f"{self.url}/slack/events", data=body, headers=headers) as r:
            await r.read()
            if r.status != 200:
                raise SystemExit(f"bench.soak: /slack/events answered {r.status} for run {n}")
        self.sent += 1

    async def pace(self, first: int, count: int, seconds: float, total: int) -> float:
        """Send runs ``first`` … ``first + count - 1`` evenly over ``seconds``; returns the
        wall time it took."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        interval = seconds / count if count else 0.0
        step = max(1, total // PROGRESS_STEPS)
        for i in range(count):
            delay = start + i * interval - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            await self.send(first + i)
            if (first + i + 1) % step == 0:
                self.progress()
        return loop.time() - start

    async def settle(self) -> tuple[int, Descriptors]:
        """Wait until every sent run is announced and written; RSS and the descriptors after
        a GC pass."""
        await self.slack.wait_announces(self.sent)
        async with asyncio.timeout(SETTLE_GUARD_SECONDS):
            await self.services.lanes.subagent.join()
        await self.services.store.flush()
        gc.collect()
        await asyncio.sleep(0.5)  # let connection pools and the writer go idle
        gc.collect()
        return rss_bytes(), descriptors()

    async def sample_forever(self) -> None:
        started = time.monotonic()
        while True:
            self.samples.append(
                Sample(
                    time.monotonic() - started,
                    self.sent,
                    self.slack.announces,
                    rss_bytes(),
                    open_fds(),
                )
            )
            await asyncio.sleep(SAMPLE_SECONDS)

    def progress(self) -> None:
        lanes = self.services.lanes
        print(
            f"  sent {self.sent:>6}  announced {self.slack.announces:>6}  "
            f"RSS {rss_bytes() / 2**20:7.1f} MiB  fds {open_fds():>4}  "
            f"queued main {lanes.main.queued} subagent {lanes.subagent.queued}",
            flush=True,
        )


@dataclass(frozen=True)
class SoakResult:
    runs: int
    seconds: float
    base_rss: int
    base: Descriptors
    end_rss: int
    end: Descriptors
    peak_rss: int
    peak_fds: int
    half_rss: int
    last_rss: int
    announced: int
    failed: int
    load_seconds: float

    @property
    def rss_growth_pct(self) -> float:
        return 100.0 * (self.end_rss - self.base_rss) / self.base_rss


async def _failed_runs(services: Gateway) -> int:
    bad = ("error", "timeout", "cancelled", "interrupted")
    return len(await services.db.runs.list(statuses=bad))


@dataclass
class _Measured:
    base_rss: int = 0
    base: Descriptors = Descriptors(0, 0, 0)
    end_rss: int = 0
    end: Descriptors = Descriptors(0, 0, 0)
    mark: int = 0
    load_seconds: float = 0.0


async def _drive(soaker: Soak, runs: int, seconds: float, *, trace: bool) -> _Measured:
    """Warm up, settle and take the baseline; run the rest, settle and measure again."""
    warm = min(runs // 2, max(MIN_WARMUP_RUNS, int(runs * WARMUP_FRACTION)))
    out = _Measured()
    sampler = asyncio.create_task(soaker.sample_forever())
    try:
        print(f"warm-up: {warm:,} runs", flush=True)
        out.load_seconds = await soaker.pace(0, warm, seconds * warm / runs, runs)
        out.base_rss, out.base = await soaker.settle()
        out.mark = len(soaker.samples)
        before = tracemalloc.take_snapshot() if trace else None
        print(f"measured: {runs - warm:,} runs", flush=True)
        rest = seconds * (runs - warm) / runs
        out.load_seconds += await soaker.pace(warm, runs - warm, rest, runs)
        out.end_rss, out.end = await soaker.settle()
        if before is not None:
            print_growth(before, tracemalloc.take_snapshot())
    finally:
        sampler.cancel()
        await asyncio.gather(sampler, return_exceptions=True)
    return out


def print_growth(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot) -> None:
    """Net growth of the Python heap between the baseline and the end, and the allocation
    sites that grew most (``--trace``). Net, so a bounded cache that replaces entries shows
    no growth; growth that RSS shows and this does not is outside Python's objects (SQLite,
    the allocator's fragmentation)."""
    grown = sum(stat.size for stat in after.statistics("filename"))
    base = sum(stat.size for stat in before.statistics("filename"))
    print(f"Python heap (traced): {base / 2**20:.2f} -> {grown / 2**20:.2f} MiB; top growth:")
    for stat in after.compare_to(before, "lineno")[:TRACE_TOP]:
        print(f"  {stat.size_diff / 1024:+9.1f} KiB {stat.count_diff:+7d} blocks  {stat.traceback}")


def _late_growth(samples: list[Sample]) -> tuple[int, int]:
    """Median RSS of the samples around the measured phase's half-way point and of its last
    samples: whether memory still grows late, once bounded caches had time to fill."""
    if not samples:
        return 0, 0
    middle = len(samples) // 2
    near_half = samples[max(0, middle - 2) : middle + 3]
    tail = samples[-5:]
    return (
        int(statistics.median(s.rss for s in near_half)),
        int(statistics.median(s.rss for s in tail)),
    )


async def soak(runs: int, minutes: float, *, trace: bool = False) -> SoakResult:
    """Run the soak; see the module docstring. ``trace`` prints the net growth of the Python
    heap after the warm-up and where it is (tracemalloc, which slows the gateway down and
    counts its own bookkeeping in RSS)."""
    if trace:
        tracemalloc.start()
    seconds = minutes * 60.0
    model, slack = FakeModel(), FakeSlackApi()
    with tempfile.TemporaryDirectory(prefix="herald-soak-") as tmp:
        async with (
            _serve([web.post("/v1/chat/completions", model.complete)]) as model_url,
            _serve([web.post("/api/{method}", slack.api)]) as slack_url,
        ):
            settings = soak_settings(Path(tmp) / "state", model_url, slack_url)
            async with (
                running_app(settings, Path(tmp)) as (url, services),
                aiohttp.ClientSession() as http,
            ):
                soaker = Soak(url, services, slack, http)
                measured = await _drive(soaker, runs, seconds, trace=trace)
                failed = await _failed_runs(services)
    after = soaker.samples[measured.mark :] or soaker.samples
    half, last = _late_growth(after)
    return SoakResult(
        runs=runs,
        seconds=seconds,
        base_rss=measured.base_rss,
        base=measured.base,
        end_rss=measured.end_rss,
        end=measured.end,
        peak_rss=max(s.rss for s in after),
        peak_fds=max(s.fds for s in after),
        half_rss=half,
        last_rss=last,
        announced=slack.announces,
        failed=failed,
        load_seconds=measured.load_seconds,
    )


def rows_of(result: SoakResult, minutes: float) -> list[Row]:
    """The result as benchmark rows (the baseline is the value after the warm-up)."""
    label = f"{result.runs:,} runs over {minutes:g} min"
    mib = float(2**20)
    return [
        row(
            f"RSS MiB at rest, end vs after warm-up ({label})",
            result.end_rss / mib,
            result.base_rss / mib,
            f"growth < {RSS_GROWTH_GOAL_PCT:g}%",
        ),
        row(
            f"open fds but sockets/transcripts, end vs after warm-up ({label})",
            float(result.end.other),
            float(result.base.other),
            "no growth",
            digits=0,
        ),
        row(
            f"open transcript fds at rest, end vs after warm-up ({label})",
            float(result.end.transcripts),
            float(result.base.transcripts),
            f"<= {DEFAULT_MAX_OPEN_FILES} (the writer's cache)",
            digits=0,
        ),
        row(
            f"open sockets at rest, end vs after warm-up ({label})",
            float(result.end.sockets),
            float(result.base.sockets),
            f"<= baseline + {SOCKET_SLACK}",
            digits=0,
        ),
        row(
            f"RSS MiB peak under load vs after warm-up ({label})",
            result.peak_rss / mib,
            result.base_rss / mib,
            "report",
        ),
        row(
            f"RSS MiB under load, last samples vs half-way ({label})",
            result.last_rss / mib,
            result.half_rss / mib,
            "report",
        ),
        row(
            f"open fds peak under load vs after warm-up ({label})",
            float(result.peak_fds),
            float(result.base.total),
            "report",
            digits=0,
        ),
        row(
            f"runs announced vs sent ({label})",
            float(result.announced),
            float(result.runs),
            "all",
            digits=0,
        ),
        row(
            f"runs per second sent vs paced ({label})",
            result.runs / result.load_seconds,
            result.runs / result.seconds,
            "report",
        ),
    ]


def problems(result: SoakResult) -> list[str]:
    """The goals the soak missed, as sentences (empty when it passed)."""
    out: list[str] = []
    if result.rss_growth_pct >= RSS_GROWTH_GOAL_PCT:
        out.append(f"RSS grew {result.rss_growth_pct:.1f}% after warm-up")
    base, end = result.base, result.end
    if end.other > base.other:
        out.append(f"open descriptors grew from {base.other} to {end.other}")
    if end.transcripts > DEFAULT_MAX_OPEN_FILES:
        out.append(f"{end.transcripts} transcripts open, more than the writer's cache")
    if end.sockets > base.sockets + SOCKET_SLACK:
        out.append(f"open sockets grew from {base.sockets} to {end.sockets}")
    if result.announced != result.runs:
        out.append(f"{result.announced} of {result.runs} runs announced")
    if result.failed:
        out.append(f"{result.failed} runs did not end as done")
    return out


def run(*, runs: int = RUNS, minutes: float = MINUTES) -> list[Row]:
    """Run the soak; one row per figure (the collector's interface)."""
    return rows_of(asyncio.run(soak(runs, minutes)), minutes)


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.soak``: print the table; exit 1 when a goal was missed."""
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    parser.add_argument("--runs", type=int, default=RUNS, help="sub-agent runs in all")
    parser.add_argument("--minutes", type=float, default=MINUTES, help="pace them over this")
    parser.add_argument("--quick", action="store_true", help=f"a smoke run: {QUICK}")
    parser.add_argument(
        "--trace",
        action="store_true",
        help="tracemalloc: the Python heap's net growth after warm-up, by site (slower)",
    )
    ns = parser.parse_args(argv)
    runs, minutes = (QUICK["runs"], QUICK["minutes"]) if ns.quick else (ns.runs, ns.minutes)
    if runs < 10 or minutes <= 0:
        parser.error("--runs must be at least 10 and --minutes more than 0")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    print(f"soak: {runs:,} sub-agent runs over {minutes:g} min", flush=True)
    result = asyncio.run(soak(runs, minutes, trace=ns.trace))
    print(format_table(rows_of(result, minutes)))
    if ns.trace:
        print("(--trace: the RSS figures include tracemalloc's own bookkeeping)")
    print(
        f"\nRSS growth after warm-up: {result.rss_growth_pct:+.2f}%  "
        f"fds (other/transcripts/sockets): {result.base.other}/{result.base.transcripts}/"
        f"{result.base.sockets} -> {result.end.other}/{result.end.transcripts}/"
        f"{result.end.sockets}  failed runs: {result.failed}"
    )
    missed = problems(result)
    for problem in missed:
        print(f"GOAL MISSED: {problem}", file=sys.stderr)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
