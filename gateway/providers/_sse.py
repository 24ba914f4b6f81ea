"""Server-sent events of a streamed model call: the reader, and what a vendor's stream
assembler is (:class:`StreamAssembler`: it hands text on as it arrives and builds the same
:class:`~gateway.llm.ModelReply` a plain call gives). The POST itself is
:func:`gateway.providers._http.post_stream`.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any, Final, Protocol

import aiohttp
import orjson

from gateway.llm import ModelReply
from gateway.providers.errors import ProviderResponseError, StreamEventTooLargeError

#: The content type of a server-sent event stream.
EVENT_STREAM = "text/event-stream"
#: The largest event (its lines, without the blank line ending it) a stream may carry. A
#: vendor's event is one delta of a few hundred bytes; a server sending a whole reply as one
#: event stays near 1 MiB (128k output tokens, JSON-escaped). An event's JSON is parsed in
#: one go when it ends, so this also bounds that one block of the event loop (about 8 ms of
#: CPU at 4 MiB); anything bigger is a broken or hostile server.
MAX_EVENT_BYTES: Final = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class SseEvent:
    """One server-sent event: its ``event:`` name ("message" when unnamed) and its data."""

    event: str
    data: str


class EventSplitter:
    """Cuts an SSE body, fed as it arrives, into its events, in time linear in its size.

    Line ends (CRLF, LF, or a lone CR, as the WHATWG rules allow) become LF chunk by chunk; a
    CR closing one chunk takes the LF opening the next as its own. An event begun in an
    earlier chunk is kept in a buffer, and only the bytes that arrived since the last look
    are searched for the blank line that ends it; what follows it is split like a fresh
    chunk. So each byte is copied and scanned a bounded number of times however large its
    event is (the reader before searched and split the whole buffer again at every chunk).
    An event over ``limit`` bytes is refused
    (:class:`~gateway.providers.errors.StreamEventTooLargeError`) as soon as that many have
    arrived without its end, never held whole.
    """

    def __init__(self, provider: str, model: str, limit: int = MAX_EVENT_BYTES) -> None:
        self.provider = provider
        self.model = model
        self.limit = limit
        #: The (LF-ended) bytes after the last finished event: the event being received.
        self._pending = bytearray()
        #: How much of ``_pending`` is known to hold no blank line.
        self._scanned = 0
        #: The last chunk ended in CR, so an LF opening the next one ends no further line.
        self._after_cr = False

    def feed(self, chunk: bytes) -> list[SseEvent]:
        """The events ``chunk`` completes, in order."""
        if not chunk:
            return []
        if self._after_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        self._after_cr = chunk.endswith(b"\r")
        if b"\r" in chunk:
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        pending = self._pending
        events: list[SseEvent] = []
        if pending:  # an event begun in an earlier chunk: search only the new bytes for its end
            pending += chunk
            # One byte back: a blank line's two LFs may straddle the previous chunk's end.
            end = pending.find(b"\n\n", max(self._scanned - 1, 0))
            if end == -1:
                self._check_unfinished()
                return events
            if end > self.limit:  # before the view: refusing lets go of the buffer
                raise self._too_large()
            with memoryview(pending) as view:  # decoded from the buffer, not copied first
                self._take(view[:end], events)
                chunk = bytes(view[end + 2 :])  # what followed it: bytes of this chunk only
            pending.clear()
        *blocks, rest = chunk.split(b"\n\n")
        for block in blocks:
            self._take(block, events)
        if rest:
            pending += rest
            self._check_unfinished()
        return events

    def _take(self, block: bytes | memoryview, events: list[SseEvent]) -> None:
        """Add the event of ``block`` (its lines) to ``events``."""
        if len(block) > self.limit:
            raise self._too_large()
        event = _event(str(block, "utf-8", "replace"))
        if event is not None:
            events.append(event)

    def _check_unfinished(self) -> None:
        """Refuse the unfinished event once it cannot fit: it is all of the buffer but an LF
        that may begin its blank line."""
        pending = self._pending
        self._scanned = len(pending)
        if len(pending) - pending.endswith(b"\n") > self.limit:
            raise self._too_large()

    def _too_large(self) -> StreamEventTooLargeError:
        self._pending.clear()  # nothing of it is used: let the memory go at once
        return StreamEventTooLargeError(self.provider, self.model, self.limit)


async def read_events(
    content: aiohttp.StreamReader, provider: str, model: str
) -> AsyncGenerator[SseEvent, None]:
    """The events of an SSE body, per the WHATWG rules Herald needs: ``field: value`` lines
    (CRLF, LF or CR), several ``data:`` lines joined by newlines, comments (``:``) skipped, a
    blank line ends an event. An event cut off by the end of the body is dropped, as the
    spec says; one over :data:`MAX_EVENT_BYTES` fails the call
    (:class:`EventSplitter`). Reads whatever has arrived at once: one await per network
    read rather than per line keeps a long stream cheap."""
    splitter = EventSplitter(provider, model)
    async for chunk in content.iter_any():
        # iter_any gives one HTTP chunk at a time (a server writes one per event): take
        # everything already received with it.
        for event in splitter.feed(chunk + content.read_nowait()):
            yield event


def _event(block: str) -> SseEvent | None:
    """The event of ``block``'s lines. A line is copied only to take its value (a one-line
    event, the usual one, is not split at all), so a huge data line costs one copy."""
    name = ""
    data: list[str] = []
    for line in block.split("\n") if "\n" in block else (block,):
        if not line or line.startswith(":"):
            continue
        colon = line.find(":")
        if colon == -1:  # a field without a value
            key, value = line, ""
        else:
            start = colon + 2 if line.startswith(" ", colon + 1) else colon + 1
            key, value = line[:colon], line[start:]
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
