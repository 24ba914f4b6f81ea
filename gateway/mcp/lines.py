"""A stdio MCP server's output as messages, in time linear in its length and in bounded
memory, however long a line it writes.

A message is one line of JSON. Each chunk read is searched for a newline once, and a line's
chunks are joined once, when it ends (joining the held text again for every chunk, as the
SDK's stdio client does, is quadratic: 33 s for a 40 MiB result).

What is held of a line is bounded twice:

- a line past :data:`LARGE_MESSAGE_BYTES` has each of its JSON strings cut to its first
  :data:`STRING_KEEP_BYTES` while it is read, the cut said inside the string
  (``[cut: 41,943,040 bytes, showing the first 262,144]``): a 40 MiB text result is never
  held whole, and the JSON parse that follows (which holds the event loop) stays short;
- a line whose kept bytes still pass :data:`MAX_MESSAGE_BYTES` (many short values) is
  dropped while it is read, only its first and last bytes held to tell which request it
  answered (:class:`DroppedLine`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

import pydantic_core

#: A line up to this size is passed on as it is; past it, its strings are cut.
LARGE_MESSAGE_BYTES: Final = 1024 * 1024
#: What a string of a large line keeps: more than ``agent.tools.maxResultChars`` takes at its
#: default (20,000) even in 4-byte characters, small enough that the parse stays short.
STRING_KEEP_BYTES: Final = 256 * 1024
#: The most a line may keep after its strings were cut: parsing 8 MiB holds the event loop
#: about 20 ms on a small machine; a line beyond it is dropped unparsed.
MAX_MESSAGE_BYTES: Final = 8 * 1024 * 1024
#: Bytes kept of a dropped line's start and end: where a response's ``id`` is.
EDGE_BYTES: Final = 512
#: A cut string is backed off this many bytes at most to end on a whole character or escape
#: (``\\uD83D\\uDE00`` is 12 bytes).
_MAX_BACKOFF: Final = 12

_QUOTE: Final = ord('"')
_BACKSLASH: Final = ord("\\")
#: The note a cut string ends with; :func:`reader_cuts` reads it back.
_NOTE: Final = "[cut: {total:,} bytes, showing the first {kept:,}]"
_NOTE_PATTERN: Final = re.compile(r"\[cut: ([\d,]+) bytes, showing the first ([\d,]+)\]")


def reader_cuts(text: str) -> list[tuple[int, int]]:
    """(bytes the server sent, bytes kept) of each string the reader cut in ``text``."""
    return [
        (int(total.replace(",", "")), int(kept.replace(",", "")))
        for total, kept in _NOTE_PATTERN.findall(text)
    ]


def uncut_length(text: str) -> int:
    """How long ``text`` was before the reader cut its strings, the bytes it dropped counted
    as characters (and its notes not counted)."""
    length = len(text)
    for note in _NOTE_PATTERN.finditer(text):
        total, kept = (int(n.replace(",", "")) for n in note.groups())
        length += total - kept - len(note.group()) - 1  # the note and the newline before it
    return length


@dataclass(frozen=True, slots=True)
class DroppedLine:
    """A line longer than the limit: its size and its edges, the rest not kept."""

    size: int
    head: bytes
    tail: bytes


class StringCutter:
    """Cuts each JSON string of a stream to ``keep`` bytes, fed in chunks of any size.

    Only quotes and the backslashes before them are looked at (``bytes.find`` does the
    scanning), so a chunk costs time linear in its length. Input that is not JSON passes
    through unharmed in shape: its parse fails as it would have.
    """

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self._in_string = False
        self._escaped = False  # the last byte fed was a backslash escaping the next one
        self._kept: list[bytes] = []
        self._kept_size = 0
        self._total = 0

    def feed(self, data: bytes) -> bytes:
        """The kept part of ``data``."""
        out: list[bytes] = []
        pos, end = 0, len(data)
        while pos < end:
            if not self._in_string:
                quote = data.find(b'"', pos)
                if quote < 0:
                    out.append(data[pos:])
                    break
                out.append(data[pos : quote + 1])
                pos = quote + 1
                self._in_string, self._kept, self._kept_size, self._total = True, [], 0, 0
                continue
            close = self._closing_quote(data, pos)
            stop = end if close < 0 else close
            self._hold(data[pos:stop] if self._kept_size < self.keep else b"", stop - pos)
            if close < 0:
                break
            out.append(self._finish_string())
            pos = close + 1
        return b"".join(out)

    def _closing_quote(self, data: bytes, pos: int) -> int:
        """Where the string that is open at ``pos`` ends in ``data``, or -1 (then the escape
        state at the end of ``data`` is remembered)."""
        start = pos
        if self._escaped:
            self._escaped = False
            start += 1  # the byte after a chunk's trailing backslash is escaped
        while True:
            quote = data.find(b'"', start)
            segment_end = len(data) if quote < 0 else quote
            run = _backslash_run(data, start, segment_end)
            if quote < 0:
                self._escaped = run % 2 == 1
                return -1
            if run % 2 == 0:
                return quote
            start = quote + 1

    def _hold(self, piece: bytes, size: int) -> None:
        self._total += size
        room = self.keep - self._kept_size
        if room > 0 and piece:
            piece = piece[:room]
            self._kept.append(piece)
            self._kept_size += len(piece)

    def _finish_string(self) -> bytes:
        """The kept string's bytes and its closing quote, with the note if it was cut."""
        kept = b"".join(self._kept)
        self._in_string, self._kept, self._kept_size = False, [], 0
        if self._total <= len(kept):
            return kept + b'"'
        kept = _whole_prefix(kept)
        note = _NOTE.format(total=self._total, kept=len(kept))
        return kept + b"\\n" + note.encode() + b'"'


def _backslash_run(data: bytes, start: int, end: int) -> int:
    """How many backslashes end ``data[start:end]``."""
    segment = data[start:end]
    return len(segment) - len(segment.rstrip(b"\\"))


def _whole_prefix(kept: bytes) -> bytes:
    """``kept`` backed off to end on a whole character and a whole escape (a cut may fall
    inside a UTF-8 sequence, an escape or a surrogate pair): checked by parsing."""
    for back in range(min(_MAX_BACKOFF, len(kept)) + 1):
        candidate = kept[: len(kept) - back]
        try:
            pydantic_core.from_json(b'"' + candidate + b'"')
        except ValueError:
            continue
        return candidate
    return b""


class LineReader:
    """Splits a byte stream into lines (see the module doc); feed it chunks as they come."""

    def __init__(
        self,
        *,
        max_line_bytes: int = MAX_MESSAGE_BYTES,
        large_line_bytes: int = LARGE_MESSAGE_BYTES,
        string_keep_bytes: int = STRING_KEEP_BYTES,
    ) -> None:
        self.max_line_bytes = max_line_bytes
        # A line is cut before it can be dropped: what is left may be small enough.
        self.large_line_bytes = min(large_line_bytes, max_line_bytes)
        self.string_keep_bytes = string_keep_bytes
        self._reset()

    def _reset(self) -> None:
        self._parts: list[bytes] = []
        self._held = 0
        self._seen = 0
        self._cutter: StringCutter | None = None
        self._dropping = False
        self._head = b""
        self._tail = b""

    def feed(self, chunk: bytes) -> list[bytes | DroppedLine]:
        """The lines ``chunk`` completes, without their newline; empty lines are skipped."""
        lines: list[bytes | DroppedLine] = []
        start = 0
        while True:
            newline = chunk.find(b"\n", start)
            self._add(chunk[start:] if newline < 0 else chunk[start:newline])
            if newline < 0:
                return lines
            line = self._finish()
            if line:
                lines.append(line)
            start = newline + 1

    def _add(self, piece: bytes) -> None:
        if not piece:
            return
        self._seen += len(piece)
        if self._dropping:
            self._tail = (self._tail + piece[-EDGE_BYTES:])[-EDGE_BYTES:]
            return
        if self._cutter is not None:
            piece = self._cutter.feed(piece)
        self._parts.append(piece)
        self._held += len(piece)
        if self._cutter is None and self._held > self.large_line_bytes:
            # Cut from the line's start: the strings already held are cut as well.
            self._cutter = StringCutter(self.string_keep_bytes)
            self._parts = [self._cutter.feed(b"".join(self._parts))]
            self._held = len(self._parts[0])
        if self._held > self.max_line_bytes:
            held = b"".join(self._parts)
            self._head, self._tail = held[:EDGE_BYTES], held[-EDGE_BYTES:]
            self._parts, self._held, self._dropping = [], 0, True

    def _finish(self) -> bytes | DroppedLine:
        if self._dropping:
            dropped = DroppedLine(size=self._seen, head=self._head, tail=self._tail)
            self._reset()
            return dropped
        line = b"".join(self._parts)
        self._reset()
        return line
