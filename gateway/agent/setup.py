"""What a turn runs with, where it records what happens, and the model request it builds.

Shared by the turn loop (:mod:`gateway.agent.turn`) and compaction
(:mod:`gateway.agent.compaction`), which both call the turn's model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from gateway.agent.context_window import ContextPolicy
from gateway.llm import ChatMessage, ModelRequest, Provider, Usage
from gateway.tools import ToolContext, ToolRegistry


class TranscriptSink(Protocol):
    """Where a turn records what happens, as it happens."""

    async def message(
        self,
        message: ChatMessage,
        *,
        model: str | None = None,
        usage: Usage | None = None,
        meta: dict[str, Any] | None = None,
    ) -> None: ...

    async def event(self, name: str, data: dict[str, Any]) -> None: ...


class TurnListener(Protocol):
    """Hears a chat turn as it is written: each model call's text piece by piece, and the
    tools a call ended in. Never blocks and never raises (see
    :class:`gateway.delivery.TurnReply`)."""

    def text(self, piece: str) -> None: ...

    def tools(self, names: Sequence[str]) -> None: ...


@dataclass(frozen=True, slots=True)
class TurnSetup:
    """What a turn runs with: resolved once, when the run starts."""

    provider: Provider
    model_id: str
    max_tokens: int
    system: str
    tools: frozenset[str]
    max_iterations: int
    tool_context: ToolContext
    #: The model's context window and what to do when the conversation outgrows it.
    context: ContextPolicy = field(default_factory=ContextPolicy)
    #: Hears the turn as it is written (a chat showing its reply as it grows): its model
    #: calls stream. None: they do not (sub-agent runs, announces, chats that do not show).
    listener: TurnListener | None = None


def build_request(
    setup: TurnSetup, registry: ToolRegistry, history: list[ChatMessage]
) -> ModelRequest:
    """The model request for the conversation so far."""
    return ModelRequest(
        model=setup.model_id,
        system=setup.system,
        messages=tuple(history),
        tools=tuple(registry.specs(sorted(setup.tools))),
        max_tokens=setup.max_tokens,
    )
