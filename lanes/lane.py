"""A bounded FIFO lane of asyncio jobs, with optional per-key serialisation.

Design: queued jobs are small handles in a ``KeyedQueue`` (``lanes._queue``); a task is
made only when a job starts, so a queued job costs about 200 bytes and no coroutine.

Order: a job submitted with a ``key`` waits behind any earlier job with the same key (one
job per key at a time, in submission order); jobs of other keys and unkeyed jobs may start
ahead of a job blocked on its key. Apart from that, jobs start strictly in submission
order: when a place frees, the earliest submitted job whose key is free starts.

Composition: ``async with lane.slot(key=...)`` takes a place in the same FIFO queue as
jobs and holds it for the body, in the caller's own task. A job on one lane may hold a
slot of another (the gateway's "session lane, then main lane"); acquiring lanes always in
the same order (session, then main) cannot deadlock. A job may also ``submit`` to another
lane and await the handle, but then cancelling the outer job does not cancel the inner.

Keys beyond this process: ``key_guard(key)``, when given, is an async context manager
entered around each keyed job (and keyed slot) once it starts, and left when it ends: a lock
shared with other processes, say. Entering it counts as part of the job (it holds a place
on the lane while it waits); an error entering or leaving it is the job's error.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, TypeVar

from lanes._queue import KeyedQueue
from lanes.errors import InvalidWidthError, JobCancelled, LaneClosed, LaneError, LaneFullError
from lanes.job import JobHandle, JobState

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: Makes the context manager entered around each keyed job (see the module docstring).
KeyGuard = Callable[[Hashable], AbstractAsyncContextManager[None]]

QUEUED = JobState.QUEUED
RUNNING = JobState.RUNNING
DONE = JobState.DONE
FAILED = JobState.FAILED
CANCELLED = JobState.CANCELLED


@dataclass(frozen=True, slots=True)
class LaneStats:
    """A snapshot of a lane's figures. Wait figures cover jobs that started."""

    name: str
    max_concurrent: int
    active: int
    queued: int
    submitted: int
    done: int
    failed: int
    cancelled: int
    wait_count: int
    wait_total_seconds: float
    wait_max_seconds: float


def _check_width(name: str, value: object) -> int:
    if type(value) is not int or value < 0:
        raise InvalidWidthError(name, value)
    return value


class Lane:
    """Runs submitted coroutine factories FIFO, at most ``max_concurrent`` at once.

    ``max_queued`` bounds the jobs waiting to start (None: no bound); past it ``submit``
    raises ``LaneFullError``. ``on_wait`` is called with each started job's queue wait in
    seconds (e.g. to feed a histogram); an error in it is logged, never raised.
    ``key_guard`` is entered around each keyed job (module docstring). ``clock`` is for
    tests. A lane is used from one event loop and is not thread-safe.
    """

    def __init__(
        self,
        name: str,
        max_concurrent: int,
        *,
        max_queued: int | None = None,
        on_wait: Callable[[float], object] | None = None,
        key_guard: KeyGuard | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._name = name
        self._max = _check_width(name, max_concurrent)
        if max_queued is not None:
            _check_width(name, max_queued)
        self._max_queued = max_queued
        self.on_wait = on_wait
        self._key_guard = key_guard
        self._clock = clock
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue = KeyedQueue()
        self._running: set[JobHandle[Any]] = set()
        self._seq = 0
        self._closed = False
        self._shutdown_task: asyncio.Future[None] | None = None
        self._idle: asyncio.Future[None] | None = None
        self._done = self._failed = self._cancelled = 0
        self._wait_count = 0
        self._wait_total = 0.0
        self._wait_max = 0.0

    # -- figures --------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The lane's name, as given."""
        return self._name

    @property
    def max_concurrent(self) -> int:
        """How many jobs may run at once. Settable at run time.

        Raising it starts waiting jobs at once; lowering it lets running jobs finish but
        starts no more until fewer than the new width run. 0 pauses the lane.
        """
        return self._max

    @max_concurrent.setter
    def max_concurrent(self, value: int) -> None:
        self._max = _check_width(self._name, value)
        self._pump()

    @property
    def max_queued(self) -> int | None:
        """How many jobs may wait to start (None: no bound)."""
        return self._max_queued

    @property
    def active(self) -> int:
        """Jobs (and slots) running now."""
        return len(self._running)

    @property
    def queued(self) -> int:
        """Jobs (and slots) waiting to start, including those blocked on their key."""
        return len(self._queue)

    @property
    def closed(self) -> bool:
        """True once ``shutdown`` has been called."""
        return self._closed

    def stats(self) -> LaneStats:
        """A snapshot of the lane's counts and wait-time figures."""
        return LaneStats(
            name=self._name,
            max_concurrent=self._max,
            active=len(self._running),
            queued=len(self._queue),
            submitted=self._seq,
            done=self._done,
            failed=self._failed,
            cancelled=self._cancelled,
            wait_count=self._wait_count,
            wait_total_seconds=self._wait_total,
            wait_max_seconds=self._wait_max,
        )

    def __repr__(self) -> str:
        closed = " closed" if self._closed else ""
        return f"<Lane {self._name}{closed} active={len(self._running)} queued={len(self._queue)}>"

    # -- intake ---------------------------------------------------------------------

    def submit(
        self, factory: Callable[[], Awaitable[T]], *, key: Hashable | None = None
    ) -> JobHandle[T]:
        """Queue ``factory`` (called only when the job starts) and return its handle.

        Jobs start in submission order; with a ``key``, never alongside another job of
        the same key. Must be called with the event loop running; raises ``LaneClosed``
        once shutdown has begun and ``LaneFullError`` when ``max_queued`` jobs wait.
        """
        handle: JobHandle[T] = self._enqueue(factory, key)
        if len(self._running) < self._max:
            self._pump()
        return handle

    @contextlib.asynccontextmanager
    async def slot(self, *, key: Hashable | None = None) -> AsyncIterator[None]:
        """Wait FIFO for a place on this lane and hold it, in the caller's task, for the body.

        A slot queues, counts and obeys keys exactly like a job. Cancelling the waiting
        caller withdraws it; cancelling it via shutdown raises ``JobCancelled`` (or
        ``LaneClosed`` if shutdown keeps queued work) in the caller; once held, shutdown's
        drain deadline cancels the caller's task.
        """
        owner = asyncio.current_task()
        if owner is None:
            raise LaneError(f"lane {self._name!r}: slot() must be used inside a task")
        handle: JobHandle[None] = self._enqueue(None, key)
        handle._task = owner
        gate = handle._waiter = asyncio.get_running_loop().create_future()
        self._pump()
        try:
            await gate
        except BaseException:
            if handle._state is QUEUED:
                self._cancel_queued(handle)
            elif handle._state is RUNNING:  # started just as the caller was cancelled
                self._finish(handle, CANCELLED, None, None)
                self._pump()
            raise
        if handle._state is CANCELLED:
            raise JobCancelled(self._name)
        if handle._state is QUEUED:  # shutdown(cancel_queued=False) woke it
            raise LaneClosed(self._name)
        try:
            if key is not None and self._key_guard is not None:
                async with self._key_guard(key):
                    yield
            else:
                yield
        except asyncio.CancelledError:
            self._finish(handle, CANCELLED, None, None)
            raise
        except BaseException:
            self._finish(handle, FAILED, None, None)
            raise
        else:
            self._finish(handle, DONE, None, None)
        finally:
            self._pump()

    def _enqueue(
        self, factory: Callable[[], Awaitable[T]] | None, key: Hashable | None
    ) -> JobHandle[T]:
        if self._closed:
            raise LaneClosed(self._name)
        if self._max_queued is not None and len(self._queue) >= self._max_queued:
            raise LaneFullError(self._name, self._max_queued)
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        self._seq += 1
        handle = JobHandle(self, factory, key, self._seq, self._clock())
        self._queue.push(handle)
        return handle

    # -- running --------------------------------------------------------------------

    def _pump(self) -> None:
        """Start jobs while there is room and something is free to start."""
        if self._closed:
            return
        queue, running = self._queue, self._running
        while len(running) < self._max and queue.has_ready():
            self._start(queue.pop())

    def _start(self, handle: JobHandle[Any]) -> None:
        now = self._clock()
        wait = now - handle._t_submit
        handle._t_left = now
        handle._state = RUNNING
        self._running.add(handle)
        self._wait_count += 1
        self._wait_total += wait
        if wait > self._wait_max:
            self._wait_max = wait
        if self.on_wait is not None:
            try:
                self.on_wait(wait)
            except Exception:
                logger.exception("lane %s: on_wait hook failed", self._name)
        factory = handle._factory
        if factory is None:  # a slot: let its owner in (unless the owner was just cancelled)
            self._wake(handle)
            return
        handle._factory = None
        try:
            key = handle._key
            if key is not None and self._key_guard is not None:
                awaitable: Awaitable[Any] = self._guarded(self._key_guard, key, factory)
            else:
                awaitable = factory()
            if asyncio.iscoroutine(awaitable):
                assert self._loop is not None  # set by the first submit
                task: asyncio.Future[Any] = self._loop.create_task(awaitable)
            else:
                task = asyncio.ensure_future(awaitable)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # the factory itself failed: the job fails
            cancelled = isinstance(exc, asyncio.CancelledError)
            self._finish(handle, CANCELLED if cancelled else FAILED, None, exc)
            return
        handle._task = task
        task.add_done_callback(handle._on_task_done)

    @staticmethod
    async def _guarded(guard: KeyGuard, key: Hashable, factory: Callable[[], Awaitable[T]]) -> T:
        async with guard(key):
            return await factory()

    def _task_done(self, handle: JobHandle[Any], task: asyncio.Future[Any]) -> None:
        if task.cancelled():
            self._finish(handle, CANCELLED, None, None)
        else:
            exc = task.exception()  # retrieving it keeps asyncio from logging it
            if exc is None:
                self._finish(handle, DONE, task.result(), None)
            else:
                logger.debug("lane %s: job failed", self._name, exc_info=exc)
                self._finish(handle, FAILED, None, exc)
        self._pump()

    def _finish(
        self, handle: JobHandle[Any], state: JobState, result: Any, exc: BaseException | None
    ) -> None:
        handle._state = state
        handle._result = result
        handle._exc = exc
        handle._task = None
        self._running.discard(handle)
        if state is DONE:
            self._done += 1
        elif state is FAILED:
            self._failed += 1
        else:
            self._cancelled += 1
        if handle._key is not None:
            self._queue.release(handle._key)
        self._wake(handle)
        self._check_idle()

    # -- keys, cancellation, idleness -----------------------------------------------

    def _cancel_queued(self, handle: JobHandle[Any]) -> None:
        self._queue.remove(handle)
        self._mark_cancelled(handle)
        self._wake(handle)
        self._check_idle()
        self._pump()

    def _mark_cancelled(self, handle: JobHandle[Any]) -> None:
        """A queued job that will never start: cancelled, its factory dropped, counted."""
        handle._state = CANCELLED
        handle._factory = None
        handle._t_left = self._clock()
        self._cancelled += 1

    @staticmethod
    def _wake(handle: JobHandle[Any]) -> None:
        waiter = handle._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _check_idle(self) -> None:
        idle = self._idle
        if idle is not None and not self._running and (not self._queue or self._closed):
            self._idle = None
            if not idle.done():
                idle.set_result(None)

    async def join(self) -> None:
        """Wait until no job runs and none waits (once closed: until none runs).

        A paused lane (width 0) with queued jobs keeps ``join`` waiting.
        """
        while self._running or (self._queue and not self._closed):
            if self._idle is None or self._idle.done():
                self._idle = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._idle)

    # -- shutdown -------------------------------------------------------------------

    async def shutdown(self, drain_seconds: float, *, cancel_queued: bool = True) -> None:
        """Refuse new work, drain running jobs for ``drain_seconds``, then cancel them.

        Jobs still queued are cancelled at once (``cancel_queued=True``) or left queued,
        never to start here (``cancel_queued=False``; awaiting them raises ``LaneClosed``).
        Running jobs get ``drain_seconds`` to finish; the rest are cancelled and awaited.
        Idempotent: later calls wait for the first one to complete.
        """
        if self._shutdown_task is None:
            self._closed = True
            if cancel_queued:
                held = [h._key for h in self._running if h._key is not None]
                queued = self._queue.take_all(held)
            else:
                queued = self._queue.all()
            for handle in queued:
                if cancel_queued:
                    self._mark_cancelled(handle)
                self._wake(handle)
            self._check_idle()
            self._shutdown_task = asyncio.ensure_future(self._drain(max(drain_seconds, 0.0)))
        await asyncio.shield(self._shutdown_task)

    async def _drain(self, drain_seconds: float) -> None:
        running = list(self._running)
        if not running:
            return
        loop = asyncio.get_running_loop()
        waits: list[asyncio.Future[None]] = []
        for handle in running:
            if handle._waiter is None or handle._waiter.done():
                handle._waiter = loop.create_future()
            waits.append(handle._waiter)
        _, late = await asyncio.wait(waits, timeout=drain_seconds)
        if late:
            logger.info("lane %s: cancelling %d jobs after the drain", self._name, len(late))
            for handle in running:
                handle.cancel()
            await asyncio.gather(*late, return_exceptions=True)
