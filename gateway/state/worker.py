"""One thread that runs a connection's calls in order, for the event loop.

``loop.run_in_executor`` on a one-thread ``ThreadPoolExecutor`` does the same, at a cost
that counts on PostgreSQL, where every read and every round trip of a write is such a call
(about 40 a sub-agent run): a ``concurrent.futures.Future`` and a work item per call, the
executor's locks, and the two futures chained to each other by callbacks both ways. Here a
call is a tuple on a :class:`queue.SimpleQueue` and its asyncio future, settled from the
thread with one ``call_soon_threadsafe``.

As with the executor, a call whose future was cancelled before the thread came to it is
skipped (a cancelled write is never run late); one already running runs to its end, and its
outcome is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_Call = tuple[Callable[[], Any], asyncio.Future[Any], asyncio.AbstractEventLoop]


class WorkerStoppedError(RuntimeError):
    """A call was handed to a worker after :meth:`Worker.stop`."""


class Worker:
    """A thread running calls in the order given (see the module docstring)."""

    def __init__(self, name: str) -> None:
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._stopped = False
        # A daemon: a database never closed must not keep the process from exiting.
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    def __repr__(self) -> str:
        return f"<Worker {self._thread.name} stopped={self._stopped}>"

    def call(self, fn: Callable[[], T]) -> asyncio.Future[T]:
        """Run ``fn`` on the thread after the calls before it; its result or exception."""
        if self._stopped:
            raise WorkerStoppedError(f"{self._thread.name} is stopped")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._calls.put((fn, future, loop))
        return future

    async def stop(self) -> None:
        """Run the calls handed over so far, then end the thread. Idempotent."""
        if not self._stopped:
            self._stopped = True
            self._calls.put(None)
        await asyncio.to_thread(self._thread.join)

    def _work(self) -> None:
        while (item := self._calls.get()) is not None:
            fn, future, loop = item
            if future.cancelled():  # a plain read of its state: never run it late
                continue
            settle: Callable[[asyncio.Future[Any], Any], None]
            try:
                outcome = fn()
                settle = _succeed
            except BaseException as exc:  # handed to the caller, as an executor would
                settle, outcome = _fail, exc
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(settle, future, outcome)
            del fn, future, item, outcome  # nothing of a call outlives it on this thread


def _succeed(future: asyncio.Future[Any], result: Any) -> None:
    if not future.cancelled():
        future.set_result(result)


def _fail(future: asyncio.Future[Any], exc: BaseException) -> None:
    if not future.cancelled():
        future.set_exception(exc)
