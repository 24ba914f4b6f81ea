"""A running gateway in the test's own loop: real services on a temp state directory, the
scripted provider (or a wire-level fake), and the in-memory channel as the chat."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from channels import OutboundMessage
from channels.memory import MemoryChannel
from gateway.components import close_services, open_services
from gateway.reload import SettingsHolder
from gateway.runtime.chat import context_for_session
from gateway.services import Services
from gateway.settings import HeraldSettings
from gateway.state import OutboxRecord, RunRecord
from gateway.subagents.manager import SubagentManager
from gateway.subagents.outbox import Outbox
from gateway.tools import ToolContext

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


@dataclass
class Harness:
    services: Services
    channel: MemoryChannel
    settled: dict[str, OutboxRecord]
    changed: asyncio.Condition

    async def delivery(self, run_id: str) -> OutboxRecord:
        """Wait until the run's announce is delivered or failed for good."""
        async with asyncio.timeout(HANG_GUARD_SECONDS), self.changed:
            await self.changed.wait_for(lambda: run_id in self.settled)
            return self.settled[run_id]

    @property
    def manager(self) -> SubagentManager:
        assert self.services.subagents is not None
        return self.services.subagents

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

    async def finished(self, run_id: str) -> RunRecord:
        async with asyncio.timeout(HANG_GUARD_SECONDS):
            return await self.manager.wait(run_id)

    async def context(self, key: str | None = None) -> ToolContext:
        store = self.services.store
        session = await store.ensure(key or "agent:main:main")
        return context_for_session(self.services, session)


@asynccontextmanager
async def running_gateway(
    tmp_path: Path,
    *,
    config: dict[str, Any] | None = None,
    script: dict[str, Any] | None = None,
    channel_name: str = "memory",
    state_dir: Path | None = None,
) -> AsyncIterator[Harness]:
    """A gateway whose chat is an in-memory channel; closes everything on exit."""
    script_path = tmp_path / "script.json5"
    script_path.write_bytes(orjson.dumps(script or TEST_SCRIPT))
    state = state_dir or tmp_path / "state"
    data = merge(base_config(state, script_path), config or {})
    holder = SettingsHolder(HeraldSettings.model_validate(data))
    services = await open_services(holder, tmp_path)
    # Fast retries: the backoff policy itself is unit-tested; here only its outcome matters.
    services.outbox = Outbox(services.db, services.channels, base_delay=0.01)
    settled: dict[str, OutboxRecord] = {}
    changed = asyncio.Condition()

    def on_settled(item: OutboxRecord) -> None:
        async def note() -> None:
            async with changed:
                settled[item.run_id or ""] = item
                changed.notify_all()

        notes.add(asyncio.ensure_future(note()))

    notes: set[asyncio.Future[None]] = set()
    services.outbox.subscribe(on_settled)
    services.outbox.subscribe(services.metrics.outbox_listener)
    channel = MemoryChannel(channel_name)
    services.channels[channel_name] = channel
    await channel.start(services.require_chat().handle_inbound)
    await services.outbox.start()
    await services.archive.start()
    assert services.subagents is not None
    await services.subagents.recover()
    try:
        yield Harness(services, channel, settled, changed)
    finally:
        await channel.stop()
        await close_services(services, drain_seconds=0)
        await asyncio.gather(*notes)
