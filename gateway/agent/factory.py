"""What one turn in a session runs with: its model, its tools, its context and its sink.

Chat turns and sub-agent runs (and their announce turns) differ only in which model, system
prompt, tool set and iteration bound they choose; :class:`TurnFactory` builds the rest the
same way for both (the model's context window and compaction policy included), from the
settings, providers and tool registry in force now.
"""

from __future__ import annotations

from collections.abc import Callable

from gateway.agent.context import ToolContexts
from gateway.agent.context_window import ContextPolicy
from gateway.agent.setup import TurnListener, TurnSetup
from gateway.agent.sink import StoreSink
from gateway.agent.turngate import TurnGate
from gateway.metrics import Metrics
from gateway.providers import ProviderRegistry
from gateway.reload import SettingsHolder
from gateway.sessions import SessionStore
from gateway.settings import HeraldSettings
from gateway.state import Origin, SessionRecord
from gateway.tools import ToolRegistry


class TurnFactory:
    """Builds a :class:`TurnSetup` and its :class:`StoreSink` for a turn in a session."""

    def __init__(
        self,
        *,
        holder: SettingsHolder,
        store: SessionStore,
        providers: ProviderRegistry,
        tools: Callable[[], ToolRegistry],
        contexts: ToolContexts,
        metrics: Metrics,
    ) -> None:
        self._holder = holder
        self.store = store
        self._providers = providers
        self._tools = tools
        self._contexts = contexts
        self._metrics = metrics
        #: The sessions with a turn running in this process (chat and sub-agent turns).
        self.turns = TurnGate()

    def __repr__(self) -> str:
        return f"<TurnFactory {self._providers!r}>"

    @property
    def settings(self) -> HeraldSettings:
        """The settings in force (reloads included)."""
        return self._holder.current

    @property
    def tools(self) -> ToolRegistry:
        """The tool registry in force (rebuilt on reload)."""
        return self._tools()

    def prepare(
        self,
        session: SessionRecord,
        *,
        model_ref: str,
        system: str,
        tools: frozenset[str],
        max_iterations: int,
        run_id: str | None = None,
        origin: Origin | None = None,
        depth: int = 0,
        listener: TurnListener | None = None,
    ) -> tuple[TurnSetup, StoreSink]:
        """The setup and sink of a turn in ``session`` on ``model_ref`` (raises the
        providers' ``UnknownModelError`` when the ref names nothing configured);
        ``listener`` hears the turn as it is written."""
        provider, model = self._providers.resolve(model_ref)
        context = ContextPolicy.of(self.settings, model_ref)
        setup = TurnSetup(
            provider=provider,
            model_id=model.id,
            max_tokens=context.reply_tokens(model.max_tokens),
            system=system,
            tools=tools,
            max_iterations=max_iterations,
            tool_context=self._contexts.for_session(
                session, run_id=run_id, origin=origin, depth=depth
            ),
            context=context,
            listener=listener,
        )
        sink = StoreSink(
            self.store,
            session,
            cost=model.cost,
            run_id=run_id,
            metrics=self._metrics,
            model_ref=model_ref,
        )
        return setup, sink
