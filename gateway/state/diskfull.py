"""The disk-full state: entered when the disk refuses a write, left when space is back.

A full disk refuses writes from every part of the gateway at once — run bookkeeping, the
outbox, chat turns, transcripts — and each retries on its own schedule. Logged one by one,
with tracebacks, that is a flood that hides the one fact an operator needs (and on a small
volume the log itself takes the space). So the first refusal — SQLite's ``SQLITE_FULL`` from
the state database, ``ENOSPC`` from the transcript writer — enters the disk-full state with
one warning; later refusals are only counted. Writers that cannot lose their write wait and
retry; a chat is answered with an apology.

Leaving is decided by a probe, not by the next write that succeeds: a full database still
takes writes that fit in its existing pages (and a full disk those that fit in the WAL's
already allocated file), so a success proves nothing and would flap the state. While full,
the probe runs on a backoff schedule (sooner after a write succeeded): it checkpoints the
WAL with ``TRUNCATE`` — the WAL keeps its size until SQLite's automatic checkpoint at ~4 MB
and would take freed space straight back — then measures the headroom, free bytes on the
volume and pages below SQLite's ``max_page_count``
(:func:`gateway.state.sqlite.database.checkpoint_and_measure`). Enough of both leaves the
state with one info line, and the listeners resume what the disk stranded.

With the state database on PostgreSQL (:mod:`gateway.state.postgres`) the server's refusal
(SQLSTATE ``53100``, ``disk_full``) enters the same state, but the server's disk is not
Herald's to measure: the probe measures the state directory alone (:func:`measure_directory`,
where the transcripts are written), and a server still full refuses the next write again.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from gateway.backoff import backoff
from gateway.state.errors import DiskFullError

log = logging.getLogger(__name__)

#: Errors of a write the disk had no room for: a full volume, or the user's quota used up.
OUT_OF_SPACE_ERRNOS: Final = frozenset({errno.ENOSPC, errno.EDQUOT})
#: Room needed to leave the state: the WAL grows to ~4 MB (1000 pages) before SQLite's
#: automatic checkpoint, so with less free, ordinary use fills the disk again at once.
HEADROOM_BYTES: Final = 4 * 1024 * 1024
#: Probe schedule while full: a probe is cheap (a checkpoint of what was written since the
#: last one, two stat calls), and runs waiting for space resume as soon as it passes.
PROBE_FIRST_SECONDS: Final = 0.5
PROBE_MAX_SECONDS: Final = 5.0

Listener = Callable[[], object]


def is_out_of_space(exc: BaseException) -> bool:
    """Whether ``exc`` is a write refused for want of space (database or file)."""
    if isinstance(exc, DiskFullError):
        return True
    return isinstance(exc, OSError) and exc.errno in OUT_OF_SPACE_ERRNOS


@dataclass(frozen=True, slots=True)
class Headroom:
    """What a probe found: free bytes on the volume and below SQLite's page limit, and the
    WAL's size before and after the probe's checkpoint (None: no SQLite file was probed)."""

    volume_bytes: int
    database_bytes: int | None
    wal_before: int | None = None
    wal_after: int | None = None

    @property
    def enough(self) -> bool:
        room = [self.volume_bytes]
        if self.database_bytes is not None:
            room.append(self.database_bytes)
        return min(room) >= HEADROOM_BYTES

    def summary(self) -> str:
        """``12 MB free; WAL checkpointed from 4096 to 0 bytes`` for the log line."""
        text = f"{self.volume_bytes // (1024 * 1024)} MB free"
        if self.wal_before is not None and self.wal_after is not None:
            text += f"; WAL checkpointed from {self.wal_before} to {self.wal_after} bytes"
        return text


def measure_directory(directory: Path) -> Headroom:
    """The free bytes of the volume ``directory`` is on (its nearest existing ancestor's,
    before it is created): the probe where no SQLite file is kept."""
    existing = directory
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    volume = os.statvfs(existing)
    return Headroom(volume_bytes=volume.f_bavail * volume.f_frsize, database_bytes=None)


def file_size(path: Path) -> int:
    """``path``'s size in bytes; 0 when there is no such file (a WAL not created yet)."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


class SpaceMonitor:
    """The disk-full state of one state directory (see the module docstring).

    ``probe`` checkpoints and measures (:func:`checkpoint_and_measure` on the writer's
    thread); it returns None once the database is closed. :meth:`refused` and :meth:`wrote`
    are called on the event loop, :meth:`refused_threadsafe` from any thread.
    """

    def __init__(self, probe: Callable[[], Awaitable[Headroom | None]]) -> None:
        self._probe = probe
        self._loop: asyncio.AbstractEventLoop | None = None
        self._since: float | None = None
        self._available = asyncio.Event()
        self._available.set()
        self._wrote = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._listeners: list[Listener] = []
        self._closed = False
        #: Writes refused for want of space since start (a metric).
        self.refusals = 0
        #: Times space came back: work that failed for want of space during an attempt that
        #: began before the last return missed its listeners' call and must retry at once.
        self.recoveries = 0

    def __repr__(self) -> str:
        return f"<SpaceMonitor {'full' if self.full else 'ok'} refusals={self.refusals}>"

    @property
    def full(self) -> bool:
        return self._since is not None

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop that :meth:`refused_threadsafe` hands refusals to."""
        self._loop = loop

    def subscribe(self, listener: Listener) -> None:
        """Call ``listener()`` on the loop each time space is back after the disk was full."""
        self._listeners.append(listener)

    def unsubscribe(self, listener: Listener) -> None:
        with contextlib.suppress(ValueError):
            self._listeners.remove(listener)

    def refused(self, what: str, error: BaseException) -> None:
        """The disk refused a write of ``what``: enter the state (logged once) and probe."""
        self.refusals += 1
        if self.full or self._closed:
            return
        self._since = time.monotonic()
        self._available.clear()
        self._wrote.clear()
        log.warning(
            "disk full: the %s refused a write (%s); waiting for space, "
            "chats get an apology meanwhile",
            what,
            error,
        )
        self._task = asyncio.get_running_loop().create_task(self._watch(), name="disk-full")

    def refused_threadsafe(self, what: str, error: BaseException) -> None:
        """:meth:`refused` from another thread (the transcript writer's)."""
        loop = self._loop
        if loop is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody to tell
            loop.call_soon_threadsafe(self.refused, what, error)

    def wrote(self) -> None:
        """A write went through: while full, probe soon rather than on the slow schedule."""
        if self.full:
            self._wrote.set()

    async def wait_for_space(self, seconds: float) -> bool:
        """Wait until the disk is not full, at most ``seconds``; whether it is not."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._available.wait(), seconds)
        return not self.full

    async def close(self) -> None:
        """Stop probing. Idempotent."""
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _watch(self) -> None:
        attempt = 0
        while self.full and not self._closed:
            attempt += 1
            delay = backoff(attempt, base=PROBE_FIRST_SECONDS, cap=PROBE_MAX_SECONDS)
            # At most one probe per PROBE_FIRST_SECONDS, however many writes go through.
            await asyncio.sleep(PROBE_FIRST_SECONDS)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wrote.wait(), max(0.0, delay - PROBE_FIRST_SECONDS))
            self._wrote.clear()
            try:
                room = await self._probe()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the disk refused the checkpoint: still full
                log.debug("disk space probe failed: %s", exc)
                continue
            if room is None:
                return  # closed
            if room.enough:
                self._clear(room)

    def _clear(self, room: Headroom) -> None:
        since, self._since = self._since, None
        self._task = None
        self._available.set()
        full_for = time.monotonic() - since if since is not None else 0.0
        log.info("disk space is back after %.0fs (%s)", full_for, room.summary())
        self.recoveries += 1
        for listener in list(self._listeners):
            try:
                listener()
            except Exception:
                log.exception("a disk-space listener failed")
