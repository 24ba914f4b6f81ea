"""What the orchestration benchmarks (``fanin``, ``batches``) share: chat keys, and a gate that
keeps a chat's children from ending before its ``sessions_yield`` has formed the batch.

Why the gate: with a zero-latency model a child's whole run takes a few milliseconds, less
than the spawning turn needs for its remaining spawns, so most children would end before
the yield. Runs already final are, by design, not part of the batch (they announce on their
own), and the benchmark would no longer measure a batch of N. The gate wraps the gateway's
yield service — reached through the tool services the app publishes, the same lookup
``sessions_yield`` makes — and tells the fake to answer a chat's children once that chat's
yield returned. The time children wait there is before the interval the benchmarks measure
(fan-in) or inside both sides' totals as a few ms of lane occupancy (throughput).
"""

from __future__ import annotations

from typing import cast

from bench._common import FakeOpenAI, Gateway
from gateway.parts.agent import tool_services
from gateway.sessions import SessionKey
from gateway.state import BatchRecord, Origin
from gateway.subagents import YIELDS, YieldService

AGENT = "main"
CHANNEL = "memory"


def chat_key(chat_id: str) -> str:
    """The session key of chat ``chat_id`` on the benchmarks' in-memory channel."""
    return str(SessionKey.chat_channel(AGENT, CHANNEL, chat_id, None))


class YieldGate:
    """The gateway's yield service, wrapped to release a chat's held children after its
    batch is formed (see the module docstring)."""

    def __init__(self, inner: YieldService, fake: FakeOpenAI) -> None:
        self._inner = inner
        self._fake = fake
        self._tags: dict[str, str] = {}

    @classmethod
    def install(cls, services: Gateway, fake: FakeOpenAI) -> YieldGate:
        """Put a gate in front of ``services``' yield service; returns it."""
        published = tool_services(services.app)
        gate = cls(cast(YieldService, published[YIELDS]), fake)
        published[YIELDS] = gate
        return gate

    def watch(self, chat_id: str) -> None:
        """Hold ``chat_id``'s children (their tasks are tagged with it) until its yield."""
        self._fake.hold_children(chat_id)
        self._tags[chat_key(chat_id)] = chat_id

    async def form(
        self,
        session_key: str,
        *,
        message: str | None,
        timeout_seconds: float,
        origin: Origin | None,
        run_id: str | None = None,
    ) -> BatchRecord | None:
        batch = await self._inner.form(
            session_key,
            message=message,
            timeout_seconds=timeout_seconds,
            origin=origin,
            run_id=run_id,
        )
        tag = self._tags.pop(session_key, None)
        if tag is not None:
            self._fake.release_children(tag)
        return batch
