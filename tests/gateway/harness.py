"""A running gateway in the test's own loop: the real app (every resource of
:func:`gateway.app.build_app`, started and stopped by aiohttp's runner, no socket) on a temp
state directory, the scripted provider (or a wire-level fake), and the in-memory channel as
the chat."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from channels import Channel, OutboundMessage
from channels.memory import MemoryChannel
from gateway.api.routes import route_defs
from gateway.app import AppParts, build_app
from gateway.cluster import QueueTiming
from gateway.parts.agent import TOOL_INVOKER
from gateway.parts.channels import TARGET_SESSIONS
from gateway.parts.state import RUN_RECORDS, SESSION_STORE
from gateway.parts.timing import Timing
from gateway.providers import RetryPolicy
from gateway.reload import SettingsHolder
from gateway.settings import HeraldSettings
from gateway.state import OutboxRecord, RunRecord
from gateway.subagents import SpawnRequest
from gateway.subagents.setup import RUN_CONTROL
from gateway.tools import ToolContext
from tests.fakes.openai import FakeOpenAI

#: Guard against a hung test; never an assertion about speed.
HANG_GUARD_SECONDS = 30

TEST_SCRIPT: dict[str, Any] = {
    "rules": [
        {"match": r"^\[announce\][\s\S]*SKIPME", "reply": "ANNOUNCE_SKIP"},
        {"match": r"^\[announce\]", "reply": "ANNOUNCE: {lastAssistant}"},
        {"match": r"^hello", "reply": "hi there"},
        {
            "match": r"^bg (?P<task>.+)$",
            "reply": "",
            "toolCalls": [
                {"name": "sessions_spawn", "arguments": {"task": "${task}", "label": "bg"}}
            ],
            "afterTool": "accepted {result.runId}",
            "afterToolError": "refused {result}",
        },
        {
            "match": r"^many$",
            "reply": "",
            "toolCalls": [
                {"name": "sessions_spawn", "arguments": {"task": f"task: n{i}"}} for i in range(12)
            ],
            "afterTool": "spawned many",
        },
        {
            "match": r"^task-submit: (.+)$",
            "reply": "",
            "toolCalls": [{"name": "submit_result", "arguments": {"result": "submitted $1"}}],
        },
        {
            "match": r"^task-fail: (.+)$",
            "reply": "",
            "toolCalls": [{"name": "submit_error", "arguments": {"error": "cannot $1"}}],
        },
        {"match": r"^task-slow: (.+)$", "reply": "slow $1", "delaySeconds": 30},
        {"match": r"^task: (?P<t>.+)$", "reply": "done: ${t}"},
    ],
    "default": {"reply": "default reply"},
}


def base_config(state_dir: Path, script: Path, **agent: Any) -> dict[str, Any]:
    return {
        "gateway": {"stateDir": str(state_dir)},
        "agent": {"model": "test/m1", **agent},
        "models": {
            "providers": {
                "test": {
                    "api": "scripted",
                    "script": str(script),
                    "models": [
                        {"id": "m1", "cost": {"input": 1.0, "output": 2.0}},
                        {"id": "m2"},
                    ],
                }
            }
        },
        "routing": {
            "defaultAgent": "main",
            "agents": {
                "main": {"name": "Main", "subagents": {"allowAgents": ["helper"]}},
                "helper": {"name": "Helper", "systemPrompt": "You are the helper."},
                "other": {"name": "Other"},
            },
        },
        "channels": {"webchat": {"enabled": False}},
    }


def merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


MODEL_REF = "fake/gpt-4o-mini"


def fake_model_config(fake: FakeOpenAI, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Gateway settings whose agents talk to ``fake`` (priced, no retries)."""
    config = {
        "agent": {"model": MODEL_REF},
        "models": {
            "providers": {
                "fake": {
                    "api": "openai-completions",
                    "baseUrl": fake.base_url,
                    "apiKey": fake.api_key,
                    "maxRetries": 0,
                    "models": [{"id": "gpt-4o-mini", "cost": {"input": 1.0, "output": 2.0}}],
                }
            }
        },
    }
    return merge(config, extra or {})


@dataclass
class Harness(AppParts):
    """A started gateway (its parts: :class:`gateway.AppParts`) and its memory chat."""

    app: web.Application
    channel: MemoryChannel
    settled: dict[str, OutboxRecord]
    changed: asyncio.Condition
    #: ``http://127.0.0.1:<port>`` when the gateway listens (``running_gateway(listen=True)``).
    base_url: str = ""

    # -- acting and waiting -----------------------------------------------------------------

    async def spawn(self, ctx: ToolContext, request: SpawnRequest) -> dict[str, Any]:
        """Spawn as ``sessions_spawn`` would; the tool's JSON result."""
        return (await self.spawner.spawn(ctx, request)).to_json()

    async def delivery(self, run_id: str) -> OutboxRecord:
        """Wait until the run's announce is delivered or failed for good."""
        async with asyncio.timeout(HANG_GUARD_SECONDS), self.changed:
            await self.changed.wait_for(lambda: run_id in self.settled)
            return self.settled[run_id]

    async def say(
        self, text: str, *, chat_id: str = "c1", thread_id: str | None = None, dm: bool = False
    ) -> None:
        message = self.channel.inbound(
            text, chat_id=chat_id, thread_id=thread_id, chat_type="dm" if dm else "channel"
        )
        await self.channel.receive(message)

    async def wait_sent(
        self, predicate: Callable[[OutboundMessage], bool], count: int = 1
    ) -> list[OutboundMessage]:
        async with asyncio.timeout(HANG_GUARD_SECONDS):
            return await self.channel.wait_for(predicate, count=count)

    async def reply(self, chat_id: str = "c1", count: int = 1) -> OutboundMessage:
        sent = await self.wait_sent(lambda m: m.kind == "reply" and m.chat_id == chat_id, count)
        return sent[count - 1]

    async def announce(self, count: int = 1) -> list[OutboundMessage]:
        return await self.wait_sent(lambda m: m.kind == "announce", count)

    async def status(self, run_id: str, status: str) -> None:
        """Wait until the run is reported with ``status`` to its origin chat."""
        async with asyncio.timeout(HANG_GUARD_SECONDS):
            await self.channel.wait_update(run_id, status)

    async def runs_idle(self) -> None:
        """Wait until no run, no completion write and no chat turn is queued or running."""
        async with asyncio.timeout(HANG_GUARD_SECONDS):
            for _ in range(3):  # each lane's work can queue work on the other
                await self.lanes.subagent.join()
                await self.lanes.session.join()
                # Announces outside the lanes: stopped runs', and those that waited for
                # their requester's turn to end.
                await self.runs.side_tasks_done()

    async def finished(self, run_id: str) -> RunRecord:
        async with asyncio.timeout(HANG_GUARD_SECONDS):
            return await self.runs.wait(run_id)

    async def context(self, key: str | None = None) -> ToolContext:
        session = await self.store.ensure(key or "agent:main:main")
        return self.contexts.for_session(session)


def api_app(gw: Harness) -> web.Application:
    """A second app serving the API routes over ``gw``'s services (the narrow keys the
    handlers read), for tests that talk HTTP to a gateway started in the test's loop."""
    app = web.Application()
    app.add_routes(route_defs("/v1/"))
    app[SESSION_STORE] = gw.app[SESSION_STORE]
    app[RUN_RECORDS] = gw.app[RUN_RECORDS]
    app[RUN_CONTROL] = gw.app[RUN_CONTROL]
    app[TOOL_INVOKER] = gw.app[TOOL_INVOKER]
    app[TARGET_SESSIONS] = gw.app[TARGET_SESSIONS]
    return app


#: A cluster's queue at test speed: a silent replica is dead after 3 s (6 heartbeats).
FAST_QUEUE = QueueTiming(
    heartbeat_seconds=0.5,
    stalled_seconds=3.0,
    stalled_check_seconds=0.5,
    sweep_seconds=0.5,
    poll_seconds=0.5,
)

#: Test timing: retries are quick (their policy is unit-tested; here only outcomes matter).
FAST_TIMING = Timing(
    outbox_base_delay=0.01,
    provider_retry=RetryPolicy(base_delay=0.005, max_delay=0.02, jitter=0.5),
    # A cluster's replicas beat and take over quickly, but count as dead only after a
    # silence no loaded test machine makes by accident (tests stop a replica's heartbeat).
    outbox_poll_seconds=0.05,
    replica_heartbeat_seconds=0.1,
    replica_dead_seconds=10.0,
    queue=FAST_QUEUE,
)


@asynccontextmanager
async def hang_guard(what: str) -> AsyncIterator[None]:
    """Fail, naming ``what``, when the block hangs (a guard, never a speed assertion)."""
    try:
        async with asyncio.timeout(HANG_GUARD_SECONDS):
            yield
    except TimeoutError:
        raise AssertionError(f"hung: {what}") from None


@asynccontextmanager
async def running_gateway(
    tmp_path: Path,
    *,
    config: dict[str, Any] | None = None,
    script: dict[str, Any] | None = None,
    channel_name: str = "memory",
    state_dir: Path | None = None,
    channels: dict[str, Channel] | None = None,
    database_url: str | None = None,
    replica_id: str | None = None,
    timing: Timing = FAST_TIMING,
    listen: bool = False,
) -> AsyncIterator[Harness]:
    """A gateway whose chat is an in-memory channel (plus ``channels``, started with it);
    with ``listen``, on a loopback port too (:attr:`Harness.base_url`); stops and closes
    everything on exit, as a SIGTERM would. With ``database_url`` its state
    is in that PostgreSQL database (a replica, named ``replica_id``), else SQLite in the
    state directory."""
    script_path = tmp_path / "script.json5"
    script_path.write_bytes(orjson.dumps(script or TEST_SCRIPT))
    state = state_dir or tmp_path / "state"
    # No drain by default (as a test's gateway stops with work still blocked on purpose).
    quick_stop = {"gateway": {"shutdownDrainSeconds": 0}}
    data = merge(merge(base_config(state, script_path), quick_stop), config or {})
    if database_url is not None:
        cluster: dict[str, Any] = {"databaseUrl": database_url}
        if replica_id is not None:  # else the config's, or the default
            cluster["replicaId"] = replica_id
        data = merge(data, {"cluster": cluster})
    holder = SettingsHolder(HeraldSettings.model_validate(data))
    settled: dict[str, OutboxRecord] = {}
    changed = asyncio.Condition()
    notes: set[asyncio.Future[None]] = set()

    def on_settled(item: OutboxRecord) -> None:
        async def note() -> None:
            async with changed:
                settled[item.run_id or ""] = item
                changed.notify_all()

        notes.add(asyncio.ensure_future(note()))

    channel = MemoryChannel(channel_name)
    app = build_app(
        holder,
        config_dir=tmp_path,
        channels={channel_name: channel, **(channels or {})},
        timing=timing,
        delivery_listeners=[on_settled],
    )
    runner = web.AppRunner(app, handle_signals=False)
    base_url = ""
    async with hang_guard("the gateway's start"):
        await runner.setup()
        if listen:  # a real socket on loopback, for clients that speak HTTP
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            base_url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield Harness(app, channel, settled, changed, base_url)
    finally:
        async with hang_guard("the gateway's stop"):
            await runner.cleanup()
            await asyncio.gather(*notes)
