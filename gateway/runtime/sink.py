"""Records a turn's messages in the session transcript and its usage in the state database."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.llm import ChatMessage, Usage
from gateway.metrics import Metrics
from gateway.sessions import SessionStore
from gateway.settings import ModelCost
from gateway.state import SessionRecord
from gateway.usage import cost_usd


@dataclass(slots=True)
class StoreSink:
    """A :class:`gateway.runtime.turn.TranscriptSink` over the session store.

    Usage is added to the session (and to the sub-agent run, when ``run_id`` is set) after
    every model call, so totals survive a crash mid-turn.
    """

    store: SessionStore
    session: SessionRecord
    cost: ModelCost | None = None
    run_id: str | None = None
    metrics: Metrics | None = None
    #: The configured ``<provider>/<model id>``: the metrics' model label.
    model_ref: str | None = None
    usage: Usage = field(default_factory=Usage)
    cost_usd: float | None = None

    async def message(
        self, message: ChatMessage, *, model: str | None = None, usage: Usage | None = None
    ) -> None:
        # Waiting for the write makes a full disk fail this turn, not pass unnoticed.
        await self.store.append_message(self.session, message, model=model, usage=usage, wait=True)
        if usage is None:
            return
        call_cost = cost_usd(usage, self.cost)
        self.usage = self.usage + usage
        if call_cost is not None:
            self.cost_usd = (self.cost_usd or 0.0) + call_cost
        if self.metrics is not None:
            self.metrics.model_usage(self.model_ref or model or "unknown", usage, call_cost)
        await self.store.add_usage(self.session.key, usage, call_cost)
        if self.run_id is not None:
            await self.store.db.runs.add_usage(self.run_id, usage, call_cost)

    async def event(self, name: str, data: dict[str, Any]) -> None:
        await self.store.append_event(self.session, name, data)
