"""Compaction: a conversation that outgrew its model's context window is made to fit again.

Chat turns and sub-agent runs alike call :func:`fit` before each model call and
:func:`compact_after_refusal` when the provider refuses a prompt as too long (then the call
is retried once); ``/compact`` calls :func:`compact` itself. A compaction replaces the
oldest messages of the conversation (where :func:`~gateway.agent.context_window.plan_cut`
says) by one user-role message at its start:

- ``summary``: a summary written by the turn's own model (prompt:
  ``templates/compaction.md``), one call per part that fits the window, each call given the
  summary so far;
- ``truncate``: a note that earlier messages were left out.

The transcript keeps every line. A compaction appends a ``compaction`` event and then the
replacing message with ``meta: {"kind": "compaction", "keep": N, …}``: the conversation
rebuilt from the transcript (:func:`gateway.sessions.chat_messages_from_records`) is that
message followed by the last N messages before its line — the list the turn went on with.

Tool results longer than ``agent.tools.maxResultChars`` are cut here too
(:func:`bound_tool_results`), in the conversation only; their transcript lines stay whole.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any, Final, Literal

import orjson

from gateway.agent.context_window import (
    PromptMeter,
    cap_messages,
    estimated,
    fixed_tokens,
    messages_tokens,
    plan_cut,
    recent_turns_start,
    text_tokens,
)
from gateway.agent.setup import TranscriptSink, TurnSetup, build_request
from gateway.llm import ChatMessage, ModelRequest, Usage
from gateway.providers import ContextWindowExceededError
from gateway.sessions import COMPACTION_KIND
from gateway.tools import ToolRegistry

logger = logging.getLogger(__name__)

Reason = Literal["window", "refused", "command"]

#: Output limit of a summary call: dense enough for months of chat, small beside big windows;
#: a small window gets a quarter of its budget (at least :data:`MIN_SUMMARY_TOKENS`).
SUMMARY_MAX_TOKENS: Final = 1024
MIN_SUMMARY_TOKENS: Final = 128
#: Each message is cut to this many characters in what the summariser reads: the gist of a
#: long tool output is in its start, and one message must never fill a summary call.
SUMMARY_MESSAGE_CHARS: Final = 4000
#: Part size of a summary call when the window is unknown: what small local models accept.
UNKNOWN_WINDOW_CHUNK_TOKENS: Final = 6000
#: Below this a summary call has too little room to say anything; a refusal then stands.
MIN_CHUNK_TOKENS: Final = 256
#: After a refusal, aim this far below the budget: the estimate was evidently low.
REFUSED_MARGIN: Final = 0.75


@dataclass(frozen=True, slots=True)
class Compaction:
    """What one compaction did; its JSON is the ``compaction`` event's data."""

    mode: Literal["summary", "truncate"]
    reason: Reason
    #: Messages replaced (a previous summary among them), and messages kept after the new one.
    replaced: int
    kept: int
    tokens_before: int
    tokens_after: int

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "reason": self.reason,
            "replaced": self.replaced,
            "keep": self.kept,
            "tokensBefore": self.tokens_before,
            "tokensAfter": self.tokens_after,
        }


@functools.cache
def _template(name: str) -> str:
    return resources.files("gateway.templates").joinpath(name).read_text("utf-8").strip()


def summary_message(summary: str) -> ChatMessage:
    """The message that stands for the summarised turns."""
    text = summary.strip() or "(the model wrote no summary)"
    return ChatMessage(role="user", content=_template("compaction-summary.md").format(summary=text))


def truncation_message() -> ChatMessage:
    """The message that stands for dropped turns."""
    return ChatMessage(role="user", content=_template("compaction-truncated.md"))


def summary_tokens(budget: int | None) -> int:
    """The longest summary a compaction to ``budget`` asks for (and makes room for)."""
    if budget is None:
        return SUMMARY_MAX_TOKENS
    return min(SUMMARY_MAX_TOKENS, max(MIN_SUMMARY_TOKENS, budget // 4))


def is_compaction_message(message: ChatMessage) -> bool:
    """Whether ``message`` is a summary or note a compaction put at the conversation's start."""
    if message.role != "user":
        return False
    head = _template("compaction-summary.md").partition("{summary}")[0]
    return message.content.startswith(head) or message.content == _template(
        "compaction-truncated.md"
    )


# -- tool results ---------------------------------------------------------------------------


def cut_result(message: ChatMessage, limit: int | None) -> ChatMessage:
    """``message`` (a tool result) cut to ``limit`` characters plus a marker, if longer."""
    if limit is None or message.role != "tool" or len(message.content) <= limit:
        return message
    total = len(message.content)
    marker = (
        f"\n\n[… cut: the result has {total:,} characters, the first {limit:,} are shown. "
        "The full output is kept in the session transcript.]"
    )
    return dataclasses.replace(message, content=message.content[:limit] + marker)


def bound_tool_results(history: list[ChatMessage], limit: int | None) -> bool:
    """Cut, in place, every tool result of ``history`` longer than ``limit``; whether any was."""
    if limit is None:
        return False
    changed = False
    for index, message in enumerate(history):
        if message.role == "tool" and len(message.content) > limit:
            history[index] = cut_result(message, limit)
            changed = True
    return changed


# -- when to compact ------------------------------------------------------------------------


def _fixed(setup: TurnSetup, registry: ToolRegistry) -> Callable[[], int]:
    return functools.cache(lambda: fixed_tokens(build_request(setup, registry, [])))


async def fit(
    setup: TurnSetup,
    registry: ToolRegistry,
    history: list[ChatMessage],
    sink: TranscriptSink,
    meter: PromptMeter,
) -> Compaction | None:
    """Before a model call: compact ``history`` if its prompt would exceed the budget.

    A model of unknown window is sent the newest messages only (at most
    :data:`~gateway.agent.context_window.UNKNOWN_WINDOW_MESSAGES`, unrecorded, as before
    compaction existed); mode ``off`` sends everything.
    """
    policy = setup.context
    if policy.mode == "off":
        return None
    budget = policy.budget(setup.max_tokens)
    if budget is None:
        if cut := cap_messages(history):
            del history[:cut]
            meter.reset()
        return None
    fixed = _fixed(setup, registry)
    if meter.estimate(history, fixed) <= budget:
        return None
    return await compact(setup, registry, history, sink, meter, reason="window", budget=budget)


async def compact_after_refusal(
    setup: TurnSetup,
    registry: ToolRegistry,
    history: list[ChatMessage],
    sink: TranscriptSink,
    meter: PromptMeter,
    error: ContextWindowExceededError,
) -> Compaction | None:
    """After the provider refused ``history`` as too long: compact it below both the window
    (the one the provider stated, else the configured one) and the estimate that proved too
    low, so the call can be retried. None when nothing could be cut (or mode is ``off``)."""
    policy = setup.context
    if policy.mode == "off":
        return None
    estimate = meter.estimate(history, _fixed(setup, registry))
    target = int(estimate * REFUSED_MARGIN)
    window = error.limit or policy.window
    if window is not None:
        room = max(1, window - max(policy.reserve(), setup.max_tokens))
        target = min(target, int(room * REFUSED_MARGIN))
    logger.warning(
        "model refused a prompt as too long; compacting",
        extra={"model": setup.model_id, "estimate": estimate, "target": target},
    )
    return await compact(setup, registry, history, sink, meter, reason="refused", budget=target)


# -- compacting -----------------------------------------------------------------------------


async def compact(
    setup: TurnSetup,
    registry: ToolRegistry,
    history: list[ChatMessage],
    sink: TranscriptSink,
    meter: PromptMeter,
    *,
    reason: Reason,
    budget: int | None,
) -> Compaction | None:
    """Replace the oldest messages of ``history`` (in place) by one summary or note, and
    record it; None when there is nothing to replace.

    Everything before the last ``keepRecentTurns`` turns is replaced, and more when what
    remains would still exceed ``budget`` (the last block always stays). Mode ``off`` (an
    explicit ``/compact``) summarises.
    """
    policy = setup.context
    mode: Literal["summary", "truncate"] = "truncate" if policy.mode == "truncate" else "summary"
    fixed = _fixed(setup, registry)
    before = meter.estimate(history, fixed)
    # A summary or note already at the start is folded into the new one, never kept alone.
    head = 1 if history and is_compaction_message(history[0]) else 0
    body = history[head:]
    if reason == "command":
        if recent_turns_start(body, policy.keep_recent_turns) == 0:
            return None  # no turn is older than the ones kept whole
    elif budget is not None and before <= budget:
        return None
    replacement = summary_message("") if mode == "summary" else truncation_message()
    # Estimated as the next call's estimate will count it (with the margin), so a cut
    # planned to fit does fit that estimate and does not set off another compaction.
    overhead = fixed() + estimated([replacement])
    # The recent turns come first: the summary is planned at its least, then given what
    # the kept turns leave (up to its usual length). On a small window a long summary
    # would otherwise crowd out the turns kept whole.
    least = MIN_SUMMARY_TOKENS if mode == "summary" else 0
    cut = plan_cut(
        body, keep_recent_turns=policy.keep_recent_turns, budget=budget, overhead=overhead + least
    )
    if cut == 0:
        return None
    cut += head
    replaced = history[:cut]
    model: str | None = None
    usage: Usage | None = None
    if mode == "summary":
        longest = summary_tokens(budget)
        if budget is not None:
            left = budget - overhead - estimated(history[cut:])
            longest = max(MIN_SUMMARY_TOKENS, min(longest, left))
        summary, usage, model = await summarise(setup, replaced, budget=budget, longest=longest)
        message = summary_message(summary)
    else:
        message = truncation_message()
    kept = len(history) - cut
    history[:cut] = [message]
    meter.reset()
    result = Compaction(
        mode=mode,
        reason=reason,
        replaced=cut,
        kept=kept,
        tokens_before=before,
        tokens_after=fixed() + messages_tokens(history),
    )
    await sink.event("compaction", result.to_json())
    meta = {"kind": COMPACTION_KIND, "mode": mode, "keep": kept}
    await sink.message(message, model=model, usage=usage, meta=meta)
    logger.info("conversation compacted", extra={"model": setup.model_id, **result.to_json()})
    return result


def render(message: ChatMessage) -> str:
    """One message as a line of the text the summariser reads."""
    if message.role == "tool":
        failed = ", error" if message.is_error else ""
        label = f"tool result ({message.tool_name or 'tool'}{failed})"
        text = message.content
    else:
        label = message.role
        calls = " ".join(
            f"[called {c.name} {orjson.dumps(c.arguments).decode()}]" for c in message.tool_calls
        )
        text = f"{message.content} {calls}".strip()
    if len(text) > SUMMARY_MESSAGE_CHARS:
        text = text[:SUMMARY_MESSAGE_CHARS] + " …"
    return f"{label}: {text}"


async def summarise(
    setup: TurnSetup,
    messages: list[ChatMessage],
    *,
    budget: int | None,
    longest: int | None = None,
) -> tuple[str, Usage, str]:
    """(summary, usage, model) of ``messages``, written by the turn's model in as many calls
    as parts of them fit its window; each call is given the summary so far. A refused part
    is split in half and tried again."""
    prompt = _template("compaction.md")
    room = budget if budget is not None else UNKNOWN_WINDOW_CHUNK_TOKENS
    if longest is None:
        longest = summary_tokens(budget)
    # Each call carries the summary so far and asks for a new one: room for both.
    chunk = room - 2 * longest - text_tokens(prompt) - text_tokens(setup.system)
    chunk = max(MIN_CHUNK_TOKENS, chunk)
    lines = [render(m) for m in messages]
    summary, usage, model = "", Usage(), setup.model_id
    start = 0
    while start < len(lines):
        end, size = start, 0
        while end < len(lines) and (end == start or size + text_tokens(lines[end]) <= chunk):
            size += text_tokens(lines[end])
            end += 1
        request = ModelRequest(
            model=setup.model_id,
            system=setup.system,
            messages=(
                ChatMessage(
                    role="user",
                    content=prompt.format(
                        previous=summary or "(none)", conversation="\n".join(lines[start:end])
                    ),
                ),
            ),
            max_tokens=min(setup.max_tokens, longest),
        )
        try:
            reply = await setup.provider.complete(request)
        except ContextWindowExceededError:
            if chunk <= MIN_CHUNK_TOKENS:
                raise
            chunk = max(MIN_CHUNK_TOKENS, chunk // 2)
            continue
        summary = reply.text.strip() or summary
        usage, model = usage + reply.usage, reply.model
        start = end
    return summary, usage, model
