"""Provider-neutral types of a model conversation: messages, tool calls, usage, replies.

Providers translate these to and from their wire formats; the runtime, transcripts and
tools only ever see these.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol

from channels.probe import ProbeResult

Role = Literal["user", "assistant", "tool"]

#: Seconds a provider's probe waits for its one answer by default: a model list is cheap,
#: so a provider slower than this is worth reporting (``herald doctor`` passes less).
PROBE_TIMEOUT_SECONDS: Final = 10.0

#: Hears a streamed model call's text as it arrives, piece by piece. Synchronous, so a slow
#: chat never holds the model's stream back: a listener buffers and sends in its own time.
TextListener = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call the model asked for.

    ``arguments`` is the parsed JSON object; when the model sent something that is not a
    JSON object, ``arguments`` is empty and ``arguments_error`` says why (the raw text is
    kept in ``raw_arguments``) so the runtime can answer with a tool error.
    """

    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    raw_arguments: str | None = None
    arguments_error: str | None = None


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One message of the conversation sent to the model (system prompt travels apart)."""

    role: Role
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    #: For ``role == "tool"``: the call this answers, and the tool's name.
    tool_call_id: str | None = None
    tool_name: str | None = None
    is_error: bool = False


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage of one or more model calls, normalised across providers.

    ``input`` counts every prompt token, cache reads and writes included (OpenAI reports
    cached tokens as a subset of prompt tokens; Anthropic reports them beside input).
    """

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0

    @property
    def total(self) -> int:
        return self.input + self.output

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input=self.input + other.input,
            output=self.output + other.output,
            cache_read=self.cache_read + other.cache_read,
            cache_write=self.cache_write + other.cache_write,
        )

    def to_json(self) -> dict[str, int]:
        return {
            "input": self.input,
            "output": self.output,
            "cacheRead": self.cache_read,
            "cacheWrite": self.cache_write,
            "total": self.total,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Usage:
        if not data:
            return cls()
        return cls(
            input=int(data.get("input", 0)),
            output=int(data.get("output", 0)),
            cache_read=int(data.get("cacheRead", 0)),
            cache_write=int(data.get("cacheWrite", 0)),
        )


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool offered to the model: name, description and JSON-Schema parameters."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """Everything one model call needs."""

    model: str
    system: str
    messages: tuple[ChatMessage, ...]
    tools: tuple[ToolSpec, ...] = ()
    max_tokens: int = 4096


@dataclass(frozen=True, slots=True)
class ModelReply:
    """What one model call answered."""

    text: str
    tool_calls: tuple[ToolCall, ...]
    usage: Usage
    model: str
    stop_reason: str | None = None


@dataclass(frozen=True, slots=True)
class ProviderProbe(ProbeResult):
    """What a provider's :meth:`Provider.probe` found: the verdict every probe gives, and
    the model ids the provider serves when its listing can settle whether a configured id
    is among them (None when it cannot: no listing, or one that leaves ids out)."""

    models: tuple[str, ...] | None = None


class Provider(Protocol):
    """A model provider. ``complete`` raises :class:`gateway.providers.ProviderError`;
    with ``on_text`` it streams the call and hands each piece of text to it as it arrives
    (the reply is the same as without). ``probe`` checks reachability and the key with the
    cheapest request the provider's API has, and never raises for network or HTTP failures."""

    name: str

    async def complete(
        self, request: ModelRequest, *, on_text: TextListener | None = None
    ) -> ModelReply: ...

    async def probe(self, *, timeout_seconds: float = PROBE_TIMEOUT_SECONDS) -> ProviderProbe: ...

    async def close(self) -> None: ...
