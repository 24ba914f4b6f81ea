"""Splitting replies into Discord-sized messages without breaking code blocks.

Discord rejects message content over 2,000 characters. Replies are split on line
boundaries; a fenced code block that spans a split is closed at the end of one message and
reopened (with its language) at the start of the next, so each message renders on its own.
A single line longer than a whole message is cut, at a space when there is one nearby.

Lengths are counted in UTF-16 code units, which is never less than the count of code points,
so a message that fits by this measure fits however the server counts characters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Discord's limit on a message's ``content``.
DISCORD_MESSAGE_LIMIT = 2000

# A fence line: up to three spaces, then ``` or ~~~ (three or more), then an info string.
_FENCE = re.compile(r"^ {0,3}(?P<marker>`{3,}|~{3,})(?P<info>.*)$")


@dataclass(frozen=True, slots=True)
class _Fence:
    """An open code fence: what reopens it in the next message and what closes it."""

    marker: str
    reopen: str

    def closed_by(self, line: str) -> bool:
        match = _FENCE.match(line)
        if match is None or match["info"].strip():
            return False
        marker = match["marker"]
        return marker[0] == self.marker[0] and len(marker) >= len(self.marker)


def _units(text: str) -> int:
    """Length in UTF-16 code units (astral characters such as most emoji count twice)."""
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


def _prefix_fitting(text: str, budget: int) -> int:
    """The largest index ``i`` such that ``text[:i]`` fits in ``budget`` code units."""
    used = 0
    for index, ch in enumerate(text):
        used += 2 if ord(ch) > 0xFFFF else 1
        if used > budget:
            return index
    return len(text)


def _cut_point(line: str, budget: int) -> int:
    """Where to cut an over-long line: after the last space in the second half, else hard."""
    end = max(1, _prefix_fitting(line, budget))
    space = line.rfind(" ", end // 2, end)
    return space + 1 if space > 0 else end


def _fence_after(fence: _Fence | None, line: str, limit: int) -> _Fence | None:
    """The fence state after ``line``."""
    if fence is not None:
        return None if fence.closed_by(line) else fence
    match = _FENCE.match(line)
    if match is None:
        return None
    marker = match["marker"]
    reopen = marker + match["info"].strip()
    # A pathological info string must not eat the message: reopen with the bare marker.
    if _units(reopen) + _units(marker) > limit // 4:
        reopen = marker
    return _Fence(marker=marker, reopen=reopen)


def chunk_message(text: str, limit: int = DISCORD_MESSAGE_LIMIT) -> list[str]:
    """Split ``text`` into messages of at most ``limit`` UTF-16 units, on line boundaries.

    Code fences stay balanced in every message: a block cut by a split is closed with its
    marker and reopened with its marker and language. Lines longer than a message are cut.
    Chunks that would hold only whitespace are dropped (Discord rejects empty messages).
    """
    if limit < 40:
        raise ValueError(f"limit {limit} is too small to hold a code fence and some text")
    chunks: list[str] = []
    lines: list[str] = []  # the lines of the message being built
    used = 0  # units of "\n".join(lines)
    fence: _Fence | None = None  # the fence open at the end of ``lines``
    fresh = True  # ``lines`` holds nothing but a reopened fence line

    def flush() -> None:
        nonlocal lines, used, fresh
        body = [*lines, fence.marker] if fence is not None else lines
        if not fresh:
            chunk = "\n".join(body)
            if chunk.strip():
                chunks.append(chunk)
        lines = [fence.reopen] if fence is not None else []
        used = _units(lines[0]) if lines else 0
        fresh = True

    pending = text.split("\n")
    pending.reverse()  # a stack: cut-off remainders of long lines go back on top
    while pending:
        line = pending.pop()
        after = _fence_after(fence, line, limit)
        closing = _units(after.marker) + 1 if after is not None else 0
        joined = used + (1 if lines else 0) + _units(line)
        if joined + closing <= limit:
            lines.append(line)
            used = joined
            fence = after
            fresh = False
            continue
        if not fresh:
            flush()
            pending.append(line)
            continue
        # The line alone does not fit in an empty message: cut it. The fence cannot change
        # mid-line, so the reservation for the currently open fence is what applies.
        reserve = _units(fence.marker) + 1 if fence is not None else 0
        budget = limit - used - (1 if lines else 0) - reserve
        cut = _cut_point(line, budget)
        lines.append(line[:cut])
        used += (1 if len(lines) > 1 else 0) + _units(line[:cut])
        fresh = False
        flush()
        if cut < len(line):
            pending.append(line[cut:])
    flush()
    return chunks
