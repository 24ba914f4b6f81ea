"""Where a transcript's lines are: a sparse index of line offsets, and readers that start
from it, so a window of a large file costs what the window holds.

:class:`LineIndex` knows how many complete lines a file has and, every
:data:`BLOCK_BYTES` or so, where one line begins (a *mark*: line number and byte offset).
Building it reads the file once in blocks, counting newlines (no parsing, constant memory);
afterwards a file that only grew is indexed from where the index ended, and a file replaced
(another inode, see :mod:`~gateway.sessions.filecache`) or cut short (a torn tail repaired)
is indexed again. Finding line *n* is a binary search among the marks and a scan of at most
one block.

:func:`lines_from` yields the lines from a marked offset; :func:`lines_backwards` yields a
file's complete lines from the last one back. Both hold at most one block and one line,
however large the file. Everything here blocks: callers run it in a worker thread.
"""

from __future__ import annotations

import bisect
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Final

from gateway.sessions.filecache import FileCache

#: Bytes read at a time, and about the distance between two marks: a window's first line
#: is found by scanning at most this much.
BLOCK_BYTES: Final = 256 * 1024
#: Files whose index is kept: more than are read at once; one that falls out is indexed
#: again (one read of the file) at its next window.
INDEXES_KEPT: Final = 64


@dataclass
class LineIndex:
    """The complete lines of one file (identified by device and inode) up to ``size``.

    ``marks`` pairs a line number with the offset where that line begins, in order; the
    first is always ``(0, 0)``. ``size`` is the offset just past the last newline indexed,
    ``seen`` the file's size when it was last indexed (what lies between is an
    unterminated last line).
    """

    device: int
    inode: int
    size: int = 0
    seen: int = 0
    lines: int = 0
    marks_lines: list[int] = field(default_factory=lambda: [0])
    marks_offsets: list[int] = field(default_factory=lambda: [0])
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def extend(self, file: BinaryIO, end: int) -> None:
        """Index the lines between ``size`` and ``end`` (the file's size now)."""
        file.seek(self.size)
        offset = self.size
        while offset < end:
            block = file.read(min(BLOCK_BYTES, end - offset))
            if not block:
                break
            last = block.rfind(b"\n")
            if last >= 0:
                self.lines += block.count(b"\n")
                self.size = offset + last + 1
                self.marks_lines.append(self.lines)
                self.marks_offsets.append(self.size)
            offset += len(block)

    def seek_line(self, number: int) -> tuple[int, int]:
        """A mark at or before line ``number``: (its line number, its offset)."""
        at = bisect.bisect_right(self.marks_lines, number) - 1
        return self.marks_lines[at], self.marks_offsets[at]


class LineIndexes:
    """The indexes of recently read files, bounded (:data:`INDEXES_KEPT`), thread-safe."""

    def __init__(self, kept: int = INDEXES_KEPT) -> None:
        self._indexes = FileCache(LineIndex, kept)

    def __repr__(self) -> str:
        return f"<LineIndexes files={len(self._indexes)}>"

    def current(self, path: Path, file: BinaryIO) -> LineIndex:
        """The index of the open ``file`` (at ``path``), brought up to its size now.

        The caller holds the returned index's ``lock`` while it uses the marks.
        """
        stat = os.fstat(file.fileno())
        index = self._indexes.entry(path, stat)
        with index.lock:
            if stat.st_size < index.size:  # cut short (a torn tail repaired): start over
                index.size, index.lines = 0, 0
                index.marks_lines[:], index.marks_offsets[:] = [0], [0]
            if stat.st_size > index.size:
                index.extend(file, stat.st_size)
            index.seen = stat.st_size
        return index


def lines_from(file: BinaryIO, offset: int, end: int) -> Iterator[bytes]:
    """The lines of ``file`` from ``offset`` up to ``end`` (a line boundary), without
    their newlines, read a block at a time."""
    file.seek(offset)
    carry = b""
    while offset < end:
        block = file.read(min(BLOCK_BYTES, end - offset))
        if not block:
            break
        offset += len(block)
        parts = (carry + block).split(b"\n")
        carry = parts.pop()
        yield from parts
    if carry:
        yield carry


def read_range(file: BinaryIO, start: int, end: int) -> bytes:
    """The bytes of ``file`` from ``start`` to ``end``."""
    file.seek(start)
    return file.read(max(0, end - start))


def last_newline_end(file: BinaryIO, size: int) -> int:
    """Offset just after the last newline before ``size`` (0 if there is none)."""
    end = size
    while end > 0:
        start = max(0, end - BLOCK_BYTES)
        file.seek(start)
        index = file.read(end - start).rfind(b"\n")
        if index >= 0:
            return start + index + 1
        end = start
    return 0


def lines_backwards(file: BinaryIO, end: int) -> Iterator[bytes]:
    """The complete lines of ``file`` before ``end`` (a line boundary), last first,
    without their newlines, read a block at a time from the end."""
    position = end
    carry = b""  # the end part of a line that began before ``position``
    first = True
    while position > 0:
        start = max(0, position - BLOCK_BYTES)
        file.seek(start)
        parts = (file.read(position - start) + carry).split(b"\n")
        position = start
        if first:  # the empty text after the newline at ``end``
            parts.pop()
            first = False
        carry = parts.pop(0) if position > 0 else b""
        yield from reversed(parts)
