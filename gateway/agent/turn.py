"""One agent turn: model call → tool calls → model call … until a reply or ``maxIterations``.

Stages are small functions: build the request, call the model, persist, run the tools.
Every message goes to the transcript (through a :class:`TranscriptSink`) as it happens, so a
crash leaves a transcript a later run can resume from. Before each model call the
conversation is fitted to the model's context window (:mod:`gateway.agent.compaction`); a
call the provider refuses as too long is compacted and retried once. Other provider errors
propagate to the caller, which knows whether the turn belongs to a chat or a sub-agent run.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from gateway.agent.compaction import bound_tool_results, compact_after_refusal, cut_result, fit
from gateway.agent.context_window import PromptMeter
from gateway.agent.setup import TranscriptSink, TurnSetup, build_request
from gateway.constants import MAX_SPAWNS_PER_TURN
from gateway.llm import ChatMessage, ModelReply, ToolCall, Usage
from gateway.providers import ContextWindowExceededError
from gateway.tools import ToolOutput, ToolRegistry

logger = logging.getLogger(__name__)

EndedBy = Literal["reply", "submit_result", "submit_error", "max_iterations", "yield"]
SPAWN_TOOL = "sessions_spawn"


@dataclass(frozen=True, slots=True)
class Injected:
    """A message given to a running turn from outside (a steer, a nested completion)."""

    message: ChatMessage
    meta: dict[str, Any]


class Inbox(Protocol):
    """Messages for a running turn, taken before each model call (so never between a tool
    call and its result): :meth:`take` returns what arrived since the last call."""

    async def take(self) -> list[Injected]: ...


@dataclass(slots=True)
class TurnOutcome:
    text: str
    ended_by: EndedBy
    usage: Usage = field(default_factory=Usage)
    iterations: int = 0
    #: The data of ``submit_result``/``submit_error`` when the run ended through one.
    submitted: dict[str, Any] | None = None


async def run_tools(
    calls: tuple[ToolCall, ...],
    setup: TurnSetup,
    registry: ToolRegistry,
    history: list[ChatMessage],
    sink: TranscriptSink,
) -> ToolOutput | None:
    """Run a reply's tool calls in order; returns the output that ends the run, if any.

    Seed 000: spawns beyond :data:`MAX_SPAWNS_PER_TURN` in one model turn get an error
    result instead of running. A result longer than ``agent.tools.maxResultChars`` joins
    ``history`` cut (with a marker saying so); the transcript gets it whole.
    """
    spawns = 0
    ending: ToolOutput | None = None
    for call in calls:
        if call.name == SPAWN_TOOL:
            spawns += 1
        if call.name == SPAWN_TOOL and spawns > MAX_SPAWNS_PER_TURN:
            output = ToolOutput.error(
                f"{SPAWN_TOOL}: at most {MAX_SPAWNS_PER_TURN} calls are honoured per model "
                "turn; this one was not run"
            )
        elif ending is not None:
            output = ToolOutput.error(f"{call.name}: not run, the run already ended")
        else:
            output = await registry.invoke(call, setup.tool_context, setup.tools)
        result = ChatMessage(
            role="tool",
            content=output.content,
            tool_call_id=call.id,
            tool_name=call.name,
            is_error=output.is_error,
        )
        history.append(cut_result(result, setup.context.max_result_chars))
        await sink.message(result)
        if output.ends_run and ending is None:
            ending = output
    return ending


async def call_model(
    setup: TurnSetup,
    registry: ToolRegistry,
    history: list[ChatMessage],
    sink: TranscriptSink,
    meter: PromptMeter | None = None,
) -> ModelReply:
    """One model call on ``history`` fitted to the context window; a refusal for length is
    compacted and retried once. The assistant message is recorded before any tool runs;
    with the setup's ``listener`` the call streams and its text goes there as it arrives."""
    meter = meter if meter is not None else PromptMeter()
    on_text = setup.listener.text if setup.listener is not None else None
    await fit(setup, registry, history, sink, meter)
    try:
        reply = await setup.provider.complete(
            build_request(setup, registry, history), on_text=on_text
        )
    except ContextWindowExceededError as refused:
        if await compact_after_refusal(setup, registry, history, sink, meter, refused) is None:
            raise
        reply = await setup.provider.complete(
            build_request(setup, registry, history), on_text=on_text
        )
    message = ChatMessage(role="assistant", content=reply.text, tool_calls=reply.tool_calls)
    history.append(message)
    meter.observe(reply.usage, len(history))
    await sink.message(message, model=reply.model, usage=reply.usage)
    return reply


async def run_turn(
    setup: TurnSetup,
    registry: ToolRegistry,
    history: list[ChatMessage],
    sink: TranscriptSink,
    inbox: Inbox | None = None,
    meter: PromptMeter | None = None,
) -> TurnOutcome:
    """Loop model and tools on ``history`` (which ends with the new input) until done.

    ``history`` is changed in place: extended with every assistant and tool message and
    with what ``inbox`` gives before each model call, its long tool results cut, and
    compacted when it outgrows the context window. ``meter`` carries the last call's
    reported prompt size over from the conversation's previous turn. The setup's
    ``listener`` hears the turn as it is written (a chat showing the reply as it grows).
    """
    meter = meter if meter is not None else PromptMeter()
    if bound_tool_results(history, setup.context.max_result_chars):
        meter.reset()
    outcome = TurnOutcome(text="", ended_by="max_iterations")
    last_text = ""
    for _ in range(setup.max_iterations):
        if inbox is not None:
            for item in await inbox.take():
                history.append(item.message)
                await sink.message(item.message, meta=item.meta)
        reply = await call_model(setup, registry, history, sink, meter)
        outcome.iterations += 1
        outcome.usage = outcome.usage + reply.usage
        if reply.text.strip():
            last_text = reply.text
        if not reply.tool_calls:
            if not reply.text.strip():
                await sink.event("empty_reply", {"model": reply.model})
            outcome.text = reply.text
            outcome.ended_by = "reply"
            return outcome
        if setup.listener is not None:
            setup.listener.tools([call.name for call in reply.tool_calls])
        ending = await run_tools(reply.tool_calls, setup, registry, history, sink)
        if ending is not None:
            outcome.submitted = ending.data
            if ending.data is not None and ending.data.get("status") == "yielded":
                outcome.ended_by = "yield"
                outcome.text = str(ending.data.get("message") or "")
            elif ending.data is not None and "error" in ending.data:
                outcome.ended_by = "submit_error"
                outcome.text = str(ending.data["error"])
            else:
                outcome.ended_by = "submit_result"
                outcome.text = str((ending.data or {}).get("result", ending.content))
            return outcome
    outcome.text = last_text
    await sink.event("max_iterations", {"maxIterations": setup.max_iterations})
    return outcome
