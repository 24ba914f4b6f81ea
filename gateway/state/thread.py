"""The thread a state connection lives on: its operations run there one at a time, in the
order the event loop handed them over.

What :class:`concurrent.futures.ThreadPoolExecutor` with one worker did, at half its cost
per call (a state operation hops to its thread and back dozens of times per sub-agent run):
no ``concurrent.futures.Future`` chained to the asyncio one, no condition variable, no
pool bookkeeping — a queue in, and ``call_soon_threadsafe`` with the outcome back. An
operation whose awaiting task was cancelled before the thread reached it does not run, as
with the executor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")

_Item = tuple[asyncio.AbstractEventLoop | None, "asyncio.Future[Any] | None", Callable[[], Any]]


class StateThread:
    """One daemon thread named ``name`` running the callables given to :meth:`submit` and
    :meth:`post`; :meth:`shutdown` stops it after what was queued before."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._stopped = False
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def __repr__(self) -> str:
        return f"<StateThread {self.name}{' stopped' if self._stopped else ''}>"

    def submit(self, fn: Callable[[], T]) -> asyncio.Future[T]:
        """Run ``fn`` on the thread; the future (of the running loop) gets its outcome.

        Raises ``RuntimeError`` once :meth:`shutdown` has begun.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._put((loop, future, fn))
        return future

    def post(self, fn: Callable[[], object]) -> None:
        """Run ``fn`` on the thread, its outcome nobody's (it settles its own callers).

        Raises ``RuntimeError`` once :meth:`shutdown` has begun."""
        self._put((None, None, fn))

    def shutdown(self) -> None:
        """Refuse new work, let the thread finish what was queued, and wait for it."""
        with self._lock:
            if not self._stopped:
                self._stopped = True
                self._queue.put(None)
        if threading.current_thread() is not self._thread:
            self._thread.join()

    def _put(self, item: _Item) -> None:
        with self._lock:
            if self._stopped:
                raise RuntimeError("cannot schedule new futures after shutdown")
            self._queue.put(item)

    def _serve(self) -> None:
        while (item := self._queue.get()) is not None:
            loop, future, fn = item
            if future is not None and future.cancelled():
                continue  # its caller gave up before it began
            try:
                result = fn()
            except BaseException as exc:  # handed to the caller, as an executor would
                if loop is None:  # a posted callable settles its callers itself: a bug
                    logger.exception("state thread %s: unhandled error", self.name)
                    continue
                _settle_soon(loop, future, None, exc)
            else:
                if loop is not None:
                    _settle_soon(loop, future, result, None)


def _settle_soon(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[Any] | None,
    result: object,
    error: BaseException | None,
) -> None:
    with contextlib.suppress(RuntimeError):  # a closed loop: nobody is waiting any more
        loop.call_soon_threadsafe(_settle, future, result, error)


def _settle(
    future: asyncio.Future[Any] | None, result: object, error: BaseException | None
) -> None:
    if future is None or future.done():  # cancelled while it ran
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
