"""Group commit: the writes that queue up while one transaction commits share the next.

:class:`WriteGroups` is the queue and its drain, for both backends; how a group runs is the
backend's :class:`GroupRunner` — :class:`gateway.state.sqlite.groups.SqliteGroups` and
:class:`gateway.state.postgres.groups.PgGroups`.

A write is a function of the connection. :meth:`WriteGroups.submit` queues it and returns
a future; the writer thread takes everything queued (at most :data:`MAX_GROUP`), opens one
transaction, runs each write inside a savepoint of its own and commits once. Under load
that turns N commits (each writing the same table and index pages again) into one, while a
write on its own still commits at once: nothing waits for company.

Each write keeps its own outcome:

- a write that raises is rolled back to its savepoint and gets its exception; the others
  in its group commit as if it had never run;
- if the failure ended the whole transaction (SQLite rolls back by itself on
  ``SQLITE_FULL``, for one), the writes of the group that had succeeded are run again in a
  new transaction, so none is lost with it — a write is a function of the connection and
  may run more than once, as the lock and conflict retries already require;
- a ``BEGIN`` or a ``COMMIT`` that fails fails every write of the group (nothing of it was
  kept), and each caller's own retry decides what happens next.

Nothing is settled before its commit: results (and errors) reach the callers after the
group's ``COMMIT`` returned, with one ``call_soon_threadsafe`` per group and event loop.
A write cancelled before its group was formed never runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Protocol, TypeVar, cast

from gateway.state.connection import Connection
from gateway.state.thread import StateThread

T = TypeVar("T")

#: Writes per transaction at most: bounds how long the first of a group waits for its
#: commit, and how much one ``SQLITE_FULL`` makes the group run again.
MAX_GROUP: Final = 128


@dataclass(slots=True)
class Write:
    """A queued write: its function, and the future (of ``loop``) its caller awaits."""

    fn: Callable[[Connection], Any]
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop


#: A settled write: its result, or the exception it raised.
Outcome = tuple[Write, Any, BaseException | None]


class GroupRunner(Protocol):
    """A backend's way of running one group (on the writer thread)."""

    #: Transactions committed and writes kept by them; writes run again because the
    #: transaction of their group was lost (for metrics, tests and benchmarks).
    commits: int
    writes: int
    rerun: int

    def __call__(self, todo: list[Write], outcomes: list[Outcome]) -> list[Write]:
        """Run ``todo`` in one transaction, adding the outcome of each write it settled to
        ``outcomes`` (after the commit, for the ones that succeeded); return the writes to
        run again in a new transaction."""
        ...


class WriteGroups:
    """The write queue of a connection, served on ``thread`` (the only thread that may use
    the connection), each group run by ``run_group`` (the backend's
    :class:`GroupRunner`).
    """

    def __init__(
        self, thread: StateThread, run_group: GroupRunner, *, max_group: int = MAX_GROUP
    ) -> None:
        self._thread = thread
        self._run_group = run_group
        self._max_group = max_group
        self._lock = threading.Lock()
        self._queue: deque[Write] = deque()
        self._draining = False

    def __repr__(self) -> str:
        return f"<WriteGroups queued={len(self._queue)} commits={self.commits}>"

    @property
    def commits(self) -> int:
        """Transactions committed (for tests and benchmarks)."""
        return self._run_group.commits

    @property
    def writes(self) -> int:
        """Writes committed (for tests and benchmarks)."""
        return self._run_group.writes

    @property
    def rerun(self) -> int:
        """Writes run again because the transaction of their group was lost."""
        return self._run_group.rerun

    @property
    def queued(self) -> int:
        """Writes waiting for a group."""
        return len(self._queue)

    def submit(self, fn: Callable[[Connection], T]) -> asyncio.Future[T]:
        """Queue ``fn``; the future resolves after the transaction that ran it committed.

        Raises ``RuntimeError`` when the thread has been shut down.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._lock:
            self._queue.append(Write(fn, cast(asyncio.Future[Any], future), loop))
            if self._draining:
                return future  # the running drain takes it with the next group
            self._draining = True
        try:
            self._thread.post(self._drain)
        except BaseException:
            with self._lock:
                self._draining = False
                self._queue.clear()
            raise
        return future

    # -- the writer thread -------------------------------------------------------------------

    def _drain(self) -> None:
        while True:
            with self._lock:
                if not self._queue:
                    self._draining = False
                    return
                count = min(len(self._queue), self._max_group)
                group = [self._queue.popleft() for _ in range(count)]
            outcomes: list[Outcome] = []
            todo = [w for w in group if not w.future.cancelled()]
            try:
                while todo:
                    todo = self._run_group(todo, outcomes)
            except BaseException as exc:  # a ROLLBACK failed: the connection is unusable
                seen = {id(w) for w, _, _ in outcomes}
                outcomes.extend((w, None, exc) for w in group if id(w) not in seen)
            _settle_all(outcomes)


def _settle_all(outcomes: list[Outcome]) -> None:
    by_loop: dict[asyncio.AbstractEventLoop, list[Outcome]] = {}
    for outcome in outcomes:
        by_loop.setdefault(outcome[0].loop, []).append(outcome)
    for loop, settled in by_loop.items():
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody is waiting any more
            loop.call_soon_threadsafe(_settle, settled)


def _settle(outcomes: list[Outcome]) -> None:
    for write, result, error in outcomes:
        if write.future.done():  # cancelled while its group ran
            continue
        if error is not None:
            write.future.set_exception(error)
        else:
            write.future.set_result(result)
