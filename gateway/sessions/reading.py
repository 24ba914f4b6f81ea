"""Reading parts of transcripts: a window of records, or the last messages, at the cost of
what they return.

A transcript may grow to hundreds of megabytes over months; the API asks for its last few
hundred records. :class:`TranscriptReader` reads a window through the file's line index
(:mod:`gateway.sessions.lines`): from the mark before the window to the window's end, in
batches of about :data:`BATCH_BYTES`, each parsed and encoded in a worker thread and handed
on before the next is read, so a response can be streamed and memory holds one batch. The
last messages of a session (``/history``) are read backwards from the end until enough are
found. At most :data:`CONCURRENT_READS` batches are read at once, whatever the number of
requests: the others wait for a slot, and the event loop (``/healthz``) never waits on a
read.

Records are numbered by line, 0-based: the header is record 0. A line that does not parse
(an outside edit) keeps its number, is handed on as None and reported among ``bad_lines``
(1-based, as an editor shows them); a torn last line (a crash mid-write) is left out and
its size reported; a last line that only lacks its newline is a record.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Final, Generic, TypeVar

import orjson

from gateway.sessions.lines import (
    LineIndexes,
    last_newline_end,
    lines_backwards,
    lines_from,
    read_range,
)
from gateway.sessions.transcript import is_compaction_record

#: Source bytes of one batch: a window is read, parsed and sent this much at a time.
BATCH_BYTES: Final = 1024 * 1024
#: Batches read at once in the process (two cores): requests beyond wait for a slot, so
#: reads cannot crowd out the transcript writer's thread or multiply memory.
CONCURRENT_READS: Final = 2

Record = dict[str, Any]
E = TypeVar("E")
T = TypeVar("T")


@dataclass
class WindowSpan:
    """Where a window lies: records ``start`` … ``end - 1`` of ``total``; ``torn_bytes``
    is the size of a torn last line left out, ``bad_lines`` (1-based) the window's lines
    that did not parse, complete once the window has been read."""

    start: int
    end: int
    total: int
    torn_bytes: int = 0
    bad_lines: list[int] = field(default_factory=list)


@dataclass
class _Cursor:
    """Where reading a window resumes: a line number and its offset; ``size`` is where the
    newline-terminated lines end, ``last`` the unterminated last record (if any)."""

    line: int
    offset: int
    size: int
    last: Record | None
    last_raw: bytes = b""


class WindowStream(Generic[E]):
    """An open window: its :class:`WindowSpan`, then its records in batches."""

    def __init__(
        self,
        reader: TranscriptReader,
        file: BinaryIO | None,
        span: WindowSpan,
        cursor: _Cursor,
        encode: Callable[[Record | None, bytes], E],
    ) -> None:
        self.span = span
        self._reader = reader
        self._file = file
        self._cursor = cursor
        self._encode = encode

    async def batches(self) -> AsyncIterator[list[E]]:
        """The window's records, encoded, about :data:`BATCH_BYTES` of source at a time."""
        file = self._file
        while file is not None and self._cursor.line < self.span.end:
            yield await self._reader.run(
                lambda: _batch(file, self.span, self._cursor, self._encode)
            )


class TranscriptReader:
    """Windows and last messages of transcript files, with bounded concurrent reads."""

    def __init__(self, *, concurrent: int = CONCURRENT_READS) -> None:
        self._slots = asyncio.Semaphore(concurrent)
        self._indexes = LineIndexes()

    def __repr__(self) -> str:
        return f"<TranscriptReader {self._indexes!r}>"

    async def run(self, call: Callable[[], T]) -> T:
        """Run a blocking read in a worker thread once a slot is free."""
        async with self._slots:
            return await asyncio.to_thread(call)

    @asynccontextmanager
    async def open_window(
        self,
        path: Path,
        *,
        limit: int,
        before: int | None = None,
        encode: Callable[[Record | None, bytes], E],
    ) -> AsyncIterator[WindowStream[E]]:
        """The last ``limit`` records before record ``before`` (default: the end), each
        passed through ``encode`` (with the line's bytes as written) in the worker thread. A
        missing file is an empty window."""
        try:
            file: BinaryIO | None = await asyncio.to_thread(open, path, "rb")
        except FileNotFoundError:
            file = None
        try:
            if file is None:
                span, cursor = WindowSpan(0, 0, 0), _Cursor(0, 0, 0, None)
            else:
                opened = file
                span, cursor = await self.run(lambda: self._locate(path, opened, limit, before))
            yield WindowStream(self, file, span, cursor, encode)
        finally:
            if file is not None:
                await asyncio.to_thread(file.close)

    async def window(
        self, path: Path, *, limit: int, before: int | None = None
    ) -> tuple[WindowSpan, list[Record | None]]:
        """:meth:`open_window` read whole, records parsed (None: a line that did not parse)."""
        records: list[Record | None] = []
        async with self.open_window(path, limit=limit, before=before, encode=_same) as stream:
            async for batch in stream.batches():
                records += batch
        return stream.span, records

    def _locate(
        self, path: Path, file: BinaryIO, limit: int, before: int | None
    ) -> tuple[WindowSpan, _Cursor]:
        index = self._indexes.current(path, file)
        with index.lock:
            lines, size, seen = index.lines, index.size, index.seen
        tail = read_range(file, size, seen)
        last = _loads(tail) if tail.strip() else None
        total = lines + (last is not None)
        end = total if before is None else min(before, total)
        start = max(0, end - limit)
        with index.lock:  # marks only ever grow: those up to ``lines`` are as they were
            line, offset = index.seek_line(min(start, lines))
        torn = len(tail) if tail.strip() and last is None else 0
        return WindowSpan(start, end, total, torn), _Cursor(line, offset, size, last, tail)

    async def last_messages(self, path: Path, *, limit: int, include_tools: bool) -> list[Record]:
        """The last ``limit`` messages of the transcript at ``path``, oldest first, as
        ``/history`` shows them (see :meth:`SessionStore.history`). A missing file has none."""
        return await self.run(lambda: _last_messages(path, limit, include_tools))


def _same(record: Record | None, _: bytes) -> Record | None:
    return record


def _loads(line: bytes) -> Record | None:
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _batch(
    file: BinaryIO, span: WindowSpan, cursor: _Cursor, encode: Callable[[Record | None, bytes], E]
) -> list[E]:
    """The next records of the window (about :data:`BATCH_BYTES`), advancing ``cursor``."""
    out: list[E] = []
    read = 0
    if cursor.offset < cursor.size:
        for raw in lines_from(file, cursor.offset, cursor.size):
            number = cursor.line
            cursor.line += 1
            cursor.offset += len(raw) + 1
            if number >= span.start:
                record = _loads(raw) if raw.strip() else None
                if record is None:
                    span.bad_lines.append(number + 1)
                out.append(encode(record, raw))
                read += len(raw) + 1
            if cursor.line >= span.end or read >= BATCH_BYTES:
                return out
    if cursor.line < span.end:  # the last record, written without its newline
        out.append(encode(cursor.last, cursor.last_raw))
        cursor.line = span.end
    return out


def _last_messages(path: Path, limit: int, include_tools: bool) -> list[Record]:
    try:
        file = open(path, "rb")  # noqa: SIM115 - the with below closes it
    except FileNotFoundError:
        return []
    found: list[Record] = []
    with file:
        size = os.fstat(file.fileno()).st_size
        end = last_newline_end(file, size)
        for raw in _newest_first(file, end, size):
            line = _loads(raw) if raw.strip() else None
            item = _history_item(line, include_tools) if line is not None else None
            if item is not None:
                found.append(item)
                if len(found) >= limit:
                    break
    found.reverse()
    return found


def _newest_first(file: BinaryIO, end: int, size: int) -> Iterator[bytes]:
    if end < size:  # an unterminated last line: a record if it parses
        yield read_range(file, end, size)
    yield from lines_backwards(file, end)


def _history_item(line: Mapping[str, Any], include_tools: bool) -> Record | None:
    """A message line as ``/history`` shows it, or None for a line it leaves out: not a
    message, a compaction's summary, or (without ``include_tools``) tool traffic."""
    if line.get("type") != "message":
        return None
    body = line.get("message")
    if not isinstance(body, dict) or is_compaction_record(line):
        return None
    item = {"id": line.get("id"), "timestamp": line.get("timestamp"), **body}
    if not include_tools:
        if item.get("role") == "tool":
            return None
        if item.pop("toolCalls", None) and not item.get("content"):
            return None
    return item
