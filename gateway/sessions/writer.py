"""The transcript writer: one thread that appends whole lines for every transcript.

Why a thread and batches: awaiting one ``aiofiles`` write per line costs a thread hop per
line, several times the write itself. Here :meth:`TranscriptWriter.append` adds the line to
the pending lines of its file and returns; the writer thread takes everything pending,
writes each file's lines with a single ``write()`` on an ``O_APPEND`` descriptor, and
settles any waiting futures of a batch with one ``call_soon_threadsafe`` per event loop.
Under load a batch holds many lines per file, so the per-line cost falls as the load
rises. Appends do not wait for their write by default because that wait (a future and a
task switch per line) costs more than the write; ``bench/transcripts.py`` measures both.

Guarantees: lines never interleave (one writer thread, whole lines per ``write()``, a short
write is completed before anything else touches that file) and each file's lines are
written in the order they were appended. ``append`` returns once the line is queued;
``append(..., wait=True)`` and :meth:`flush` return once the bytes reached the operating
system. There is no ``fsync`` per line: a power cut may lose the last lines, a process
crash loses only what was still queued (microseconds' worth), and a torn last line is
tolerated by every reader. When the writer first opens a file it cuts any torn tail (see
:func:`gateway.sessions.transcript.repair_transcript`) so a new line never lands glued to
a fragment. Files are created ``0600`` in directories created ``0700``.

A failed write is logged (a full disk instead goes to ``on_out_of_space``, the disk-full
state, which logs it once for all files); a caller that waited (``wait=True``) gets the
``OSError``, and the next :meth:`flush` raises :class:`TranscriptWriteError` listing the
failures since the last flush. The queue is bounded: past ``max_pending_bytes`` every append
waits for its own write. Descriptors are cached (LRU, ``max_open_files``); :meth:`release`
closes them before a transcript is renamed, after the lines queued for them so far are
written.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Final

from gateway.files import ensure_dir
from gateway.sessions.errors import TranscriptWriteError, TranscriptWriterClosedError
from gateway.sessions.paths import FILE_MODE
from gateway.sessions.transcript import encode_line, repair_transcript
from gateway.state import is_out_of_space

log = logging.getLogger(__name__)

#: Enough for every busy session of a large gateway; each costs one descriptor.
DEFAULT_MAX_OPEN_FILES: Final = 256
#: Bytes queued before appends start waiting for their own write (backpressure).
DEFAULT_MAX_PENDING_BYTES: Final = 16 * 1024 * 1024
_OPEN_FLAGS: Final = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC

_Future = asyncio.Future[None]
_Outcome = tuple[_Future, BaseException | None]


class _Batch:
    """What the writer thread takes in one go. Lines are grouped per file as they arrive,
    so the thread does no per-line work beyond one ``join`` and one ``write`` per file."""

    __slots__ = ("barriers", "lines", "quiet", "releases", "size", "waiters")

    def __init__(self) -> None:
        self.lines: dict[Path, list[bytes]] = {}
        self.size = 0
        self.waiters: list[tuple[Path, _Future]] = []  # appends waiting for their write
        self.releases: list[tuple[list[Path], _Future]] = []
        self.barriers: list[_Future] = []  # flushes that report failures
        self.quiet: list[_Future] = []  # flushes that only wait

    def __bool__(self) -> bool:
        return bool(self.lines or self.waiters or self.releases or self.barriers or self.quiet)


class TranscriptWriter:
    """Appends whole lines to transcript files from one writer thread (started lazily).

    ``on_out_of_space(error)`` is called on the writer thread for each write the disk had
    no room for; without it such a write is logged like any other failure.
    """

    def __init__(
        self,
        *,
        max_open_files: int = DEFAULT_MAX_OPEN_FILES,
        max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES,
        on_out_of_space: Callable[[OSError], None] | None = None,
    ) -> None:
        if max_open_files < 1 or max_pending_bytes < 1:
            raise ValueError("max_open_files and max_pending_bytes must be at least 1")
        self._cond = threading.Condition(threading.Lock())
        self._batch = _Batch()
        self._max_pending = max_pending_bytes
        self._idle = False
        self._closed = False
        self._thread: threading.Thread | None = None
        self._max_open = max_open_files
        self._on_out_of_space = on_out_of_space
        self._fds: OrderedDict[Path, int] = OrderedDict()  # owned by the writer thread
        self._failures: list[tuple[Path, OSError]] = []  # since the last flush
        # The latest write failure of each file not yet raised to a waiter on that file.
        self._unreported: dict[Path, OSError] = {}
        self.lines_written = 0
        self.batches = 0

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<TranscriptWriter {state} pending_bytes={self._batch.size} files={len(self._fds)}>"

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def pending_bytes(self) -> int:
        """Bytes queued and not yet taken by the writer thread."""
        return self._batch.size

    async def append(self, path: Path, record: Mapping[str, Any], *, wait: bool = False) -> None:
        """Queue ``record`` as one JSON line for ``path`` (created 0600 if missing).

        Returns once queued, or with ``wait`` once written (raising the write's ``OSError``).
        Raises :class:`TranscriptWriterClosedError` after :meth:`aclose`.
        """
        data = encode_line(record)
        if wait or self._batch.size + len(data) > self._max_pending:
            await self._put_and_wait(path, data)
        else:
            self._put(path, data, None)

    async def write(self, path: Path, data: bytes, *, wait: bool = False) -> None:
        """Queue ``data`` — one or more whole lines, ending in ``\\n`` — for ``path``."""
        if not data.endswith(b"\n"):
            raise ValueError("transcript data must be whole lines ending in a newline")
        if wait or self._batch.size + len(data) > self._max_pending:
            await self._put_and_wait(path, data)
        else:
            self._put(path, data, None)

    async def flush(self, *, report: bool = True) -> None:
        """Wait until every line queued before this call reached the OS.

        With ``report``, raises :class:`TranscriptWriteError` naming the writes that failed
        since the previous reporting flush; without, only waits (for readers that want to
        see their own writes).
        """
        future: _Future = asyncio.get_running_loop().create_future()
        with self._cond:
            self._check_open()
            (self._batch.barriers if report else self._batch.quiet).append(future)
            self._wake()
        await future

    async def sync(self, path: Path) -> None:
        """Wait until every line queued for ``path`` so far reached the OS; raise the
        ``OSError`` of any write to ``path`` that failed since the last wait on it.

        One wait at the end of a turn replaces a wait per line: the turn still learns of a
        full disk, at a fraction of the thread hand-offs.
        """
        future: _Future = asyncio.get_running_loop().create_future()
        with self._cond:
            self._check_open()
            self._batch.waiters.append((path, future))
            self._wake()
        await future

    async def release(self, paths: Iterable[Path]) -> None:
        """Close the cached descriptors of ``paths`` after the lines queued for them so far
        are written (a rename may follow; later lines open the path afresh)."""
        names = list(paths)
        if not names:
            return
        future: _Future = asyncio.get_running_loop().create_future()
        with self._cond:
            self._check_open()
            self._batch.releases.append((names, future))
            self._wake()
        await future

    async def aclose(self) -> None:
        """Refuse new lines, write everything queued, close the files. Idempotent."""
        with self._cond:
            self._closed = True
            self._cond.notify()
            thread = self._thread
        if thread is not None:
            await asyncio.to_thread(thread.join)

    async def _put_and_wait(self, path: Path, data: bytes) -> None:
        future: _Future = asyncio.get_running_loop().create_future()
        self._put(path, data, future)
        await future

    def _put(self, path: Path, data: bytes, future: _Future | None) -> None:
        with self._cond:
            self._check_open()
            batch = self._batch
            chunks = batch.lines.get(path)
            if chunks is None:
                batch.lines[path] = [data]
            else:
                chunks.append(data)
            batch.size += len(data)
            if future is not None:
                batch.waiters.append((path, future))
            self._wake()

    def _check_open(self) -> None:
        if self._closed:
            raise TranscriptWriterClosedError("the transcript writer is closed")

    def _wake(self) -> None:
        # Called with the lock held.
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
                while not self._batch and not self._closed:
                    self._idle = True
                    self._cond.wait()
                self._idle = False
                batch, self._batch = self._batch, _Batch()
            if not batch:
                break  # closed and drained
            try:
                self._process(batch)
            except BaseException:  # never leave callers waiting forever
                log.exception("transcript writer failed on a batch")
                waiting = [f for _, f in batch.waiters] + [f for _, f in batch.releases]
                waiting += batch.barriers + batch.quiet
                _settle_threadsafe([(f, TranscriptWriteError([])) for f in waiting])
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def _process(self, batch: _Batch) -> None:
        errors: dict[Path, OSError] = {}
        for path, chunks in batch.lines.items():
            error = self._flush(path, chunks)
            if error is not None:
                errors[path] = error
        outcomes: list[_Outcome] = [
            (f, self._unreported.pop(path, None) or errors.get(path)) for path, f in batch.waiters
        ]
        for paths, future in batch.releases:
            for path in paths:
                self._close(path)
            outcomes.append((future, None))
        if batch.barriers:
            # Barriers settle after every write of the batch, so after all lines before them.
            failures, self._failures = self._failures, []
            report = TranscriptWriteError(failures) if failures else None
            outcomes.extend((future, report) for future in batch.barriers)
        outcomes.extend((future, None) for future in batch.quiet)
        self.batches += 1
        if outcomes:
            _settle_threadsafe(outcomes)

    def _flush(self, path: Path, chunks: list[bytes]) -> OSError | None:
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        try:
            fd = self._open(path)
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
        except OSError as exc:
            if self._on_out_of_space is not None and is_out_of_space(exc):
                self._on_out_of_space(exc)  # one line for the whole disk, not one per write
                log.debug("transcript %s: %d lines refused: %s", path, len(chunks), exc)
            else:
                log.error("transcript %s: write of %d lines failed: %s", path, len(chunks), exc)
            self._failures.append((path, exc))
            self._unreported[path] = exc
            # A short write may have left a fragment; reopening repairs it first.
            self._close(path)
            return exc
        self.lines_written += len(chunks)
        return None

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
