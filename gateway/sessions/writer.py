"""The transcript writer: one thread that appends whole lines for every transcript.

Why a thread and batches: awaiting one ``aiofiles`` write per line costs a thread hop per
line, several times the write itself. Here :meth:`TranscriptWriter.append` puts the line on
a queue, in order, and returns; the writer thread takes everything queued, writes each
file's pending lines with a single ``write()`` on an ``O_APPEND`` descriptor, and settles
any waiting futures of a batch with one ``call_soon_threadsafe`` per event loop. Under load
a batch holds many lines per file, so the per-line cost falls as the load rises.

Guarantees: lines never interleave (one writer thread, whole lines per ``write()``, a short
write is completed before anything else touches that file) and each file's lines are
written in the order they were appended. ``append`` returns once the line is queued;
``append(..., wait=True)`` and :meth:`flush` return once the bytes reached the operating
system. There is no ``fsync`` per line: a power cut may lose the last lines, a process
crash loses only what was still queued (microseconds' worth), and a torn last line is
tolerated by every reader. When the writer first opens a file it cuts any torn tail (see
:func:`gateway.sessions.transcript.repair_transcript`) so a new line never lands glued to
a fragment. Files are created ``0600`` in directories created ``0700``.

A failed write is logged; a caller that waited (``wait=True``) gets the ``OSError``, and the
next :meth:`flush` raises :class:`TranscriptWriteError` listing the failures since the last
flush. The queue is bounded: past ``max_pending_bytes`` every append waits for its own
write. Descriptors are cached (LRU, ``max_open_files``); :meth:`release` closes them before
a transcript is renamed, in order after the lines queued before it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

from gateway.sessions.errors import TranscriptWriteError, TranscriptWriterClosedError
from gateway.sessions.paths import FILE_MODE, ensure_dir
from gateway.sessions.transcript import encode_line, repair_transcript

log = logging.getLogger(__name__)

#: Enough for every busy session of a large gateway; each costs one descriptor.
DEFAULT_MAX_OPEN_FILES: Final = 256
#: Bytes queued before appends start waiting for their own write (backpressure).
DEFAULT_MAX_PENDING_BYTES: Final = 16 * 1024 * 1024
_OPEN_FLAGS: Final = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
_REPORT: Final = b"report"
_QUIET: Final = b""

_Future = asyncio.Future[None]
# (path, data, future): a write when data is set, a release of the path when data is None,
# a flush barrier when path is None (data then says whether it reports failures). The
# future, when set, is settled once the item is done.
_Item = tuple[Path | None, bytes | None, _Future | None]
_Outcome = tuple[_Future, BaseException | None]


class TranscriptWriter:
    """Appends whole lines to transcript files from one writer thread (started lazily)."""

    def __init__(
        self,
        *,
        max_open_files: int = DEFAULT_MAX_OPEN_FILES,
        max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES,
    ) -> None:
        if max_open_files < 1 or max_pending_bytes < 1:
            raise ValueError("max_open_files and max_pending_bytes must be at least 1")
        self._cond = threading.Condition(threading.Lock())
        self._queue: list[_Item] = []
        self._pending_bytes = 0
        self._max_pending = max_pending_bytes
        self._idle = False
        self._closed = False
        self._thread: threading.Thread | None = None
        self._max_open = max_open_files
        self._fds: OrderedDict[Path, int] = OrderedDict()  # owned by the writer thread
        self._failures: list[tuple[Path, OSError]] = []  # since the last flush
        self.lines_written = 0
        self.batches = 0

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return (
            f"<TranscriptWriter {state} pending={len(self._queue)} "
            f"pending_bytes={self._pending_bytes} files={len(self._fds)}>"
        )

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def pending(self) -> int:
        """Items queued and not yet taken by the writer thread."""
        return len(self._queue)

    async def append(self, path: Path, record: Mapping[str, Any], *, wait: bool = False) -> None:
        """Queue ``record`` as one JSON line for ``path`` (created 0600 if missing).

        Returns once queued, or with ``wait`` once written (raising the write's ``OSError``).
        Raises :class:`TranscriptWriterClosedError` after :meth:`aclose`.
        """
        data = encode_line(record)
        if not wait and self._pending_bytes + len(data) <= self._max_pending:
            self._put([(path, data, None)], len(data))
            return
        future: _Future = asyncio.get_running_loop().create_future()
        self._put([(path, data, future)], len(data))
        await future

    async def write(self, path: Path, data: bytes, *, wait: bool = False) -> None:
        """Queue ``data`` — one or more whole lines, ending in ``\\n`` — for ``path``."""
        if not data.endswith(b"\n"):
            raise ValueError("transcript data must be whole lines ending in a newline")
        if not wait and self._pending_bytes + len(data) <= self._max_pending:
            self._put([(path, data, None)], len(data))
            return
        future: _Future = asyncio.get_running_loop().create_future()
        self._put([(path, data, future)], len(data))
        await future

    async def flush(self, *, report: bool = True) -> None:
        """Wait until every line queued before this call reached the OS.

        With ``report``, raises :class:`TranscriptWriteError` naming the writes that failed
        since the previous reporting flush; without, only waits (for readers that want to
        see their own writes).
        """
        future: _Future = asyncio.get_running_loop().create_future()
        self._put([(None, _REPORT if report else _QUIET, future)], 0)
        await future

    async def release(self, paths: Iterable[Path]) -> None:
        """Close the cached descriptors of ``paths`` once the lines queued for them are written."""
        names = list(paths)
        if not names:
            return
        future: _Future = asyncio.get_running_loop().create_future()
        items: list[_Item] = [(name, None, None) for name in names[:-1]]
        items.append((names[-1], None, future))
        self._put(items, 0)
        await future

    async def aclose(self) -> None:
        """Refuse new lines, write everything queued, close the files. Idempotent."""
        with self._cond:
            self._closed = True
            self._cond.notify()
            thread = self._thread
        if thread is not None:
            await asyncio.to_thread(thread.join)

    def _put(self, items: list[_Item], size: int) -> None:
        with self._cond:
            if self._closed:
                raise TranscriptWriterClosedError("the transcript writer is closed")
            self._queue.extend(items)
            self._pending_bytes += size
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="herald-transcripts", daemon=True
                )
                self._thread.start()
            elif self._idle:
                self._idle = False
                self._cond.notify()

    # -- the writer thread ------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._idle = True
                    self._cond.wait()
                self._idle = False
                batch, self._queue = self._queue, []
                self._pending_bytes = 0
            if not batch:
                break  # closed and drained
            try:
                self._process(batch)
            except BaseException:  # never leave callers waiting forever
                log.exception("transcript writer failed on a batch")
                _settle_threadsafe(
                    [(f, TranscriptWriteError([])) for _, _, f in batch if f is not None]
                )
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def _process(self, batch: list[_Item]) -> None:
        outcomes: list[_Outcome] = []
        barriers: list[_Future] = []
        quiet: list[_Future] = []
        pending: dict[Path, list[bytes]] = {}
        waiters: dict[Path, list[_Future]] = {}
        for path, data, future in batch:
            if path is None:
                if future is not None:
                    (barriers if data == _REPORT else quiet).append(future)
            elif data is None:
                if path in pending:
                    self._flush(path, pending.pop(path), waiters.pop(path, []), outcomes)
                self._close(path)
                if future is not None:
                    outcomes.append((future, None))
            else:
                chunks = pending.get(path)
                if chunks is None:
                    pending[path] = chunks = []
                chunks.append(data)
                if future is not None:
                    waiters.setdefault(path, []).append(future)
        for path, chunks in pending.items():
            self._flush(path, chunks, waiters.get(path, []), outcomes)
        if barriers:
            # Barriers settle after every write of the batch, so after all lines before them.
            failures, self._failures = self._failures, []
            error = TranscriptWriteError(failures) if failures else None
            outcomes.extend((future, error) for future in barriers)
        outcomes.extend((future, None) for future in quiet)
        self.batches += 1
        if outcomes:
            _settle_threadsafe(outcomes)

    def _flush(
        self,
        path: Path,
        chunks: list[bytes],
        futures: list[_Future],
        outcomes: list[_Outcome],
    ) -> None:
        error: OSError | None = None
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        try:
            fd = self._open(path)
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            self.lines_written += len(chunks)
        except OSError as exc:
            log.error("transcript %s: write of %d lines failed: %s", path, len(chunks), exc)
            error = exc
            self._failures.append((path, exc))
            # A short write may have left a fragment; reopening repairs it first.
            self._close(path)
        outcomes.extend((future, error) for future in futures)

    def _open(self, path: Path) -> int:
        fd = self._fds.get(path)
        if fd is not None:
            self._fds.move_to_end(path)
            return fd
        ensure_dir(path.parent)
        repair_transcript(path)
        fd = os.open(path, _OPEN_FLAGS, FILE_MODE)
        self._fds[path] = fd
        while len(self._fds) > self._max_open:
            _, oldest = self._fds.popitem(last=False)
            os.close(oldest)
        return fd

    def _close(self, path: Path) -> None:
        fd = self._fds.pop(path, None)
        if fd is not None:
            os.close(fd)


def _settle_threadsafe(outcomes: list[_Outcome]) -> None:
    by_loop: dict[asyncio.AbstractEventLoop, list[_Outcome]] = {}
    for outcome in outcomes:
        by_loop.setdefault(outcome[0].get_loop(), []).append(outcome)
    for loop, items in by_loop.items():
        # A closed loop raises RuntimeError: nobody is waiting there any more.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_settle, items)


def _settle(outcomes: list[_Outcome]) -> None:
    for future, error in outcomes:
        if future.done():
            continue
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)
