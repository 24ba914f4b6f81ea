"""Server-sent events of a streamed model call: the reader, and what a vendor's stream
assembler is (:class:`StreamAssembler`: it hands text on as it arrives and builds the same
:class:`~gateway.llm.ModelReply` a plain call gives). The POST itself is
:func:`gateway.providers._http.post_stream`.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
import orjson

from gateway.llm import ModelReply
from gateway.providers.errors import ProviderResponseError

#: The content type of a server-sent event stream.
EVENT_STREAM = "text/event-stream"


@dataclass(frozen=True, slots=True)
class SseEvent:
    """One server-sent event: its ``event:`` name ("message" when unnamed) and its data."""

    event: str
    data: str


async def read_events(content: aiohttp.StreamReader) -> AsyncGenerator[SseEvent, None]:
    """The events of an SSE body, per the WHATWG rules Herald needs: ``field: value`` lines
    (CRLF or LF), several ``data:`` lines joined by newlines, comments (``:``) skipped, a
    blank line ends an event. An event cut off by the end of the body is dropped, as the
    spec says. Reads whatever has arrived at once and splits it here: one await per network
    read rather than per line keeps a long stream cheap."""
    buffer = b""
    async for chunk in content.iter_any():
        # iter_any gives one HTTP chunk at a time (a server writes one per event): take
        # everything already received with it.
        buffer += chunk + content.read_nowait()
        if b"\r" in buffer:
            buffer = buffer.replace(b"\r\n", b"\n")
        *blocks, buffer = buffer.split(b"\n\n")
        for block in blocks:
            event = _event(block.decode("utf-8", errors="replace"))
            if event is not None:
                yield event


def _event(block: str) -> SseEvent | None:
    name = ""
    data: list[str] = []
    for line in block.split("\n"):
        if not line or line.startswith(":"):
            continue
        key, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if key == "event":
            name = value
        elif key == "data":
            data.append(value)
    return SseEvent(name or "message", "\n".join(data)) if data else None


def event_json(event: SseEvent, provider: str, model: str) -> dict[str, Any]:
    """The JSON object an event carries; anything else is a ProviderResponseError."""
    try:
        data = orjson.loads(event.data)
    except orjson.JSONDecodeError:
        raise ProviderResponseError(
            provider, model, f"stream event is not JSON: {event.data[:200]!r}"
        ) from None
    if not isinstance(data, dict):
        raise ProviderResponseError(provider, model, "stream event is not a JSON object")
    return data


class StreamAssembler(Protocol):
    """Builds one reply from a vendor's stream; a fresh one per attempt."""

    #: The text handed to the listener so far ("" until the first piece).
    shown: str

    def feed(self, event: SseEvent) -> None:
        """Take one event; raises :class:`ProviderError` for an error event."""
        ...

    def ended(self) -> None:
        """The body ended without the stream's own end mark (some servers leave it out)."""
        ...

    @property
    def complete(self) -> bool:
        """Whether the stream said it is finished (a stream cut before that is broken)."""
        ...

    def reply(self) -> ModelReply:
        """The reply the events built."""
        ...

    def whole(self, data: dict[str, Any]) -> ModelReply:
        """The reply of a plain JSON answer (a server that ignored ``stream``), its text
        handed to the listener at once."""
        ...
