"""How much of a model's context window a conversation takes, and where it may be cut.

Pure functions over the messages of a request, shared by the turn loop (before each model
call) and :mod:`gateway.agent.compaction` (which does the cutting):

- **Size.** A prompt's size is the provider's own figure for the last call (input plus the
  reply, which is now part of the conversation) plus an estimate of what was added since
  (:class:`PromptMeter`). Without a figure (a fresh start, just after a compaction) the whole
  request is estimated: about four characters per token, as the scripted provider counts,
  the system prompt and every tool's schema as the provider is sent them (12 tools are
  ~2,000 tokens: half of a small model's window). Estimated messages are counted
  :data:`ESTIMATE_MARGIN` larger: compacting a turn early costs one summary, a refused
  prompt a retry and a harsher cut.
- **Cuts.** A cut keeps a suffix of the conversation. It is made where a *block* starts: any
  message but a tool result, so a tool call always keeps its results. A *turn* starts at a
  user message; the last ``keepRecentTurns`` turns are kept whole unless they alone would
  not fit (then the cut moves on, block by block; the last block always stays).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Literal

import orjson

from gateway.llm import ChatMessage, ModelRequest, Usage
from gateway.settings import HeraldSettings

CompactionMode = Literal["summary", "truncate", "off"]

#: The usual rule of thumb for GPT- and Claude-style tokenizers (the scripted provider's too).
CHARS_PER_TOKEN: Final = 4
#: What a message costs beyond its text (role, separators), as the vendors' guides count it.
MESSAGE_OVERHEAD_TOKENS: Final = 4
#: Estimated message tokens are multiplied by this: tokenizers differ from four characters a
#: token by a tenth or two either way, a message's framing varies by vendor, and only an
#: underestimate is costly. (The fixed part is counted from its wire JSON, which already
#: over-counts a real tokenizer's share of it.)
ESTIMATE_MARGIN: Final = 1.2
#: Messages a model of unknown context window is sent (the newest; as before compaction).
UNKNOWN_WINDOW_MESSAGES: Final = 200
#: ``reserveTokens`` when unset: this, or a quarter of a smaller model's window.
DEFAULT_RESERVE_TOKENS: Final = 4000
RESERVE_WINDOW_SHARE: Final = 4


@dataclass(frozen=True, slots=True)
class ContextPolicy:
    """What a turn's conversation must fit in, and what to do when it would not."""

    #: The model's context window in tokens; None when unknown.
    window: int | None = None
    mode: CompactionMode = "off"
    #: Tokens kept free for the reply; None: :data:`DEFAULT_RESERVE_TOKENS` or a quarter
    #: of the window, whichever is smaller.
    reserve_tokens: int | None = None
    keep_recent_turns: int = 4
    #: Tool results longer than this are cut in the conversation (never in the transcript).
    max_result_chars: int | None = None

    @classmethod
    def of(cls, settings: HeraldSettings, model_ref: str) -> ContextPolicy:
        """The policy of a turn on ``model_ref`` (``<provider>/<model id>``) under
        ``settings``; the window is None when the ref names no configured model."""
        provider_name, _, model_id = model_ref.partition("/")
        provider = settings.models.providers.get(provider_name)
        model = provider.model(model_id) if provider is not None else None
        compaction = settings.agent.compaction
        return cls(
            window=provider.context_window(model) if provider and model else None,
            mode=compaction.mode,
            reserve_tokens=compaction.reserve_tokens,
            keep_recent_turns=compaction.keep_recent_turns,
            max_result_chars=settings.agent.tools.max_result_chars,
        )

    def reserve(self) -> int:
        """Tokens kept free for the reply (``reserveTokens``, or its default)."""
        if self.reserve_tokens is not None:
            return self.reserve_tokens
        if self.window is None:
            return DEFAULT_RESERVE_TOKENS
        return min(DEFAULT_RESERVE_TOKENS, self.window // RESERVE_WINDOW_SHARE)

    def reply_tokens(self, max_tokens: int) -> int:
        """The output limit a call asks for: the model's ``maxTokens``, unless that and the
        reserve together would not fit the window (a 4,096-token local model keeps the
        default 4,096): then the reserve, so the prompt keeps the rest of the window."""
        reserve = self.reserve()
        if self.window is not None and max_tokens + reserve > self.window:
            return max(1, min(max_tokens, reserve))
        return max_tokens

    def budget(self, max_tokens: int) -> int | None:
        """The most prompt tokens a call may send: the window less room for the reply
        (the reserve, or the call's own output limit when that is larger, since both
        vendors refuse a prompt whose requested reply would overflow). None: unknown."""
        if self.window is None:
            return None
        return max(1, self.window - max(self.reserve(), max_tokens))


def text_tokens(text: str) -> int:
    """Estimated tokens of ``text``."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def message_tokens(message: ChatMessage) -> int:
    """Estimated tokens of one message of a request."""
    tokens = MESSAGE_OVERHEAD_TOKENS + text_tokens(message.content)
    for call in message.tool_calls:
        tokens += text_tokens(call.name)
        tokens += math.ceil(len(orjson.dumps(call.arguments)) / CHARS_PER_TOKEN)
    return tokens


def messages_tokens(messages: Sequence[ChatMessage]) -> int:
    return sum(message_tokens(m) for m in messages)


def fixed_tokens(request: ModelRequest) -> int:
    """Estimated tokens of what every call of a turn sends besides the messages: the system
    prompt and the offered tools."""
    tools = sum(
        math.ceil(
            len(orjson.dumps(_tool_wire(t.name, t.description, t.parameters))) / CHARS_PER_TOKEN
        )
        for t in request.tools
    )
    return MESSAGE_OVERHEAD_TOKENS + text_tokens(request.system) + tools


def _tool_wire(name: str, description: str, parameters: object) -> dict[str, object]:
    # How both vendors' APIs carry a tool (OpenAI's shape; Anthropic's is a little smaller).
    schema = {"name": name, "description": description, "parameters": parameters}
    return {"type": "function", "function": schema}


class PromptMeter:
    """The size of the next prompt of one conversation: the provider's figure for the last
    call, plus an estimate of the messages appended after that call's reply.

    Valid while the conversation only grows at its end; whoever cuts it calls :meth:`reset`.
    """

    __slots__ = ("covered", "tokens")

    def __init__(self) -> None:
        #: Prompt and reply tokens of the last call, as reported.
        self.tokens = 0
        #: How many messages (from the start) that figure covers; 0: no figure.
        self.covered = 0

    def __repr__(self) -> str:
        return f"<PromptMeter tokens={self.tokens} covered={self.covered}>"

    def observe(self, usage: Usage, length: int) -> None:
        """Record a call's usage; ``length`` is the conversation's length with its reply."""
        if usage.input <= 0:  # a server that reports no usage: estimate instead
            self.reset()
            return
        self.tokens, self.covered = usage.input + usage.output, length

    def reset(self) -> None:
        self.tokens = self.covered = 0

    def estimate(self, history: Sequence[ChatMessage], fixed: Callable[[], int]) -> int:
        """Estimated prompt tokens of a call sending ``history`` (``fixed()`` is called only
        when there is no reported figure to start from)."""
        if 0 < self.covered <= len(history):
            return self.tokens + _margin(messages_tokens(history[self.covered :]))
        return fixed() + _margin(messages_tokens(history))


def _margin(estimate: int) -> int:
    return math.ceil(estimate * ESTIMATE_MARGIN)


def estimated(messages: Sequence[ChatMessage]) -> int:
    """Estimated tokens of ``messages`` in a request, with the estimate's margin."""
    return _margin(messages_tokens(messages))


def block_starts(history: Sequence[ChatMessage]) -> list[int]:
    """Where a cut may be made: before any message that is not a tool result."""
    return [i for i, message in enumerate(history) if message.role != "tool"]


def recent_turns_start(history: Sequence[ChatMessage], turns: int) -> int:
    """Where the last ``turns`` turns begin: at the ``turns``-th last user message (0 when
    there are fewer). What comes before it is older, also the tail of a turn whose question
    an earlier compaction replaced."""
    users = [i for i, message in enumerate(history) if message.role == "user"]
    return users[-turns] if len(users) >= turns else 0


def plan_cut(
    history: Sequence[ChatMessage], *, keep_recent_turns: int, budget: int | None, overhead: int
) -> int:
    """Where a compaction cuts ``history``: the index of its first kept message, or 0 when
    nothing can be cut (a single block).

    The cut is where the last ``keep_recent_turns`` turns begin (past the first message in
    any case). When ``budget`` is given and ``overhead`` (the fixed part of the request plus
    what replaces the cut messages) plus the kept messages would exceed it, the cut moves to
    later block starts until they fit, at most to the last block.
    """
    first = max(1, recent_turns_start(history, keep_recent_turns))
    candidates = [i for i in block_starts(history) if i >= first]
    if not candidates:
        return 0
    if budget is None:
        return candidates[0]
    # Token sizes of every suffix, computed once from the end.
    suffix = [0] * (len(history) + 1)
    for index in range(len(history) - 1, first - 1, -1):
        suffix[index] = suffix[index + 1] + message_tokens(history[index])
    for cut in candidates:
        if overhead + _margin(suffix[cut]) <= budget:
            return cut
    return candidates[-1]


def cap_messages(history: Sequence[ChatMessage], limit: int = UNKNOWN_WINDOW_MESSAGES) -> int:
    """For a model of unknown window: where to cut so about ``limit`` messages remain. The
    kept part starts at a user message (some APIs refuse any other first message): the
    first one in reach, else the last one before it (keeping more); only a conversation
    without any is cut at a block start."""
    if len(history) <= limit:
        return 0
    floor = len(history) - limit
    starts = block_starts(history)
    users = [i for i in starts if history[i].role == "user"]
    if users:
        return next((i for i in users if i >= floor), users[-1])
    later = [i for i in starts if i >= floor]
    if later:
        return later[0]
    return starts[-1] if starts else 0
