"""Records a turn's messages in the session transcript and its usage in the state database."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from gateway.llm import ChatMessage, Usage
from gateway.metrics import Metrics
from gateway.sessions import SessionStore
from gateway.settings import ModelCost
from gateway.state import DiskFullError, SessionRecord, Spent
from gateway.usage import cost_usd

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class StoreSink:
    """A :class:`gateway.agent.turn.TranscriptSink` over the session store.

    Lines are queued as they happen (the writer thread writes them within microseconds);
    :meth:`save_usage` adds the turn's usage to the session (and to the sub-agent run) in
    one write, and :meth:`sync` waits for the turn's lines and raises a failed write. Every
    message line also carries its model call's usage, so the transcript alone can rebuild
    the totals if the process dies mid-turn.
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
    _unsaved: Usage = field(default_factory=Usage)
    _unsaved_cost: float | None = None

    async def message(
        self,
        message: ChatMessage,
        *,
        model: str | None = None,
        usage: Usage | None = None,
        meta: dict[str, Any] | None = None,
    ) -> None:
        await self.store.append_message(self.session, message, model=model, usage=usage, meta=meta)
        if usage is None:
            return
        call_cost = cost_usd(usage, self.cost)
        self.usage = self.usage + usage
        self._unsaved = self._unsaved + usage
        if call_cost is not None:
            self.cost_usd = (self.cost_usd or 0.0) + call_cost
            self._unsaved_cost = (self._unsaved_cost or 0.0) + call_cost
        if self.metrics is not None:
            self.metrics.model_usage(self.model_ref or model or "unknown", usage, call_cost)

    async def event(self, name: str, data: dict[str, Any]) -> None:
        await self.store.append_event(self.session, name, data)

    def unsaved_usage(self) -> Spent:
        """The usage (and cost) not yet saved; still this sink's until :meth:`take_usage`."""
        return Spent(self._unsaved, self._unsaved_cost)

    def take_usage(self) -> Spent:
        """The usage (and cost) not yet saved, now the caller's to save with a write of its
        own (a run's final write takes its announce turn's, its ``announcing`` write its own
        turn's)."""
        taken = Spent(self._unsaved, self._unsaved_cost)
        self._unsaved, self._unsaved_cost = Usage(), None
        return taken

    async def save_usage(self) -> None:
        """Add the usage not yet saved to the session's and the run's totals. Never raises:
        it runs on every way out of a turn, errors included."""
        usage, cost = self._unsaved, self._unsaved_cost
        if usage == Usage() and cost is None:
            return
        self._unsaved, self._unsaved_cost = Usage(), None
        try:
            # The run's totals in the same write as its session's.
            await self.store.add_usage(self.session.key, usage, cost, run_id=self.run_id)
        except DiskFullError:  # logged once by the disk-full state; the transcript has it
            logger.debug("usage not saved: disk full", extra={"session": self.session.key})
        except Exception:
            logger.exception("usage not saved", extra={"session": self.session.key})

    async def sync(self) -> None:
        """Wait for this turn's transcript lines; raise the ``OSError`` of a failed one."""
        await self.store.sync(self.session)
