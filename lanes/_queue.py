"""The waiting room of a lane: FIFO order, with one job per key let through at a time.

Unkeyed jobs, and keyed jobs whose key is free, go to a ``ready`` deque in submission
order. A keyed job whose key is held (by a job ready or running) waits in that key's own
deque. When the holder ends, the next job of the key becomes ready; since it may be older
than jobs already in ``ready``, it goes to a small heap ordered by submission number, and
``pop`` takes whichever of the two heads was submitted first. Every operation on the common
path (unkeyed jobs) is O(1); removal, only for cancellation, is O(n) at C speed.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Hashable
from typing import Any

from lanes.job import JobHandle

Handle = JobHandle[Any]


class KeyedQueue:
    """Jobs waiting to start. ``len()`` counts all of them, ready or blocked on a key."""

    __slots__ = ("_count", "_keys", "_ready", "_released")

    def __init__(self) -> None:
        self._ready: deque[Handle] = deque()
        self._released: list[tuple[int, Handle]] = []
        # Key -> jobs waiting behind the key's holder (None while nobody waits). A key is
        # present while one of its jobs is ready or running.
        self._keys: dict[Hashable, deque[Handle] | None] = {}
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def has_ready(self) -> bool:
        """True when some waiting job is free to start."""
        return bool(self._ready or self._released)

    def push(self, handle: Handle) -> None:
        """Add a newly submitted job (submission numbers must increase)."""
        self._count += 1
        key = handle._key
        if key is None:
            self._ready.append(handle)
        elif key not in self._keys:
            self._keys[key] = None
            self._ready.append(handle)
        else:
            waiting = self._keys[key]
            if waiting is None:
                waiting = self._keys[key] = deque()
            waiting.append(handle)

    def pop(self) -> Handle:
        """Take the earliest submitted job that is free to start; its key stays held."""
        ready, released = self._ready, self._released
        self._count -= 1
        if released and (not ready or released[0][0] < ready[0]._seq):
            return heapq.heappop(released)[1]
        return ready.popleft()

    def release(self, key: Hashable) -> None:
        """The job holding ``key`` has ended (or was withdrawn): let the next one through."""
        waiting = self._keys.get(key)
        if waiting:
            nxt = waiting.popleft()
            heapq.heappush(self._released, (nxt._seq, nxt))
        else:
            self._keys.pop(key, None)

    def remove(self, handle: Handle) -> None:
        """Withdraw a waiting job (it was cancelled); frees its key if it held it."""
        key = handle._key
        waiting = self._keys.get(key) if key is not None else None
        if waiting is not None and handle in waiting:  # blocked behind its key's holder
            waiting.remove(handle)
        else:
            try:
                self._ready.remove(handle)
            except ValueError:
                self._released.remove((handle._seq, handle))
                heapq.heapify(self._released)
            if key is not None:
                self.release(key)
        self._count -= 1

    def all(self) -> list[Handle]:
        """Every waiting job, ready ones first."""
        jobs = list(self._ready) + [handle for _, handle in sorted(self._released)]
        for waiting in self._keys.values():
            if waiting:
                jobs.extend(waiting)
        return jobs

    def take_all(self, held_keys: list[Hashable]) -> list[Handle]:
        """Remove and return every waiting job; only ``held_keys`` (running jobs') stay held."""
        jobs = self.all()
        self._ready.clear()
        self._released.clear()
        self._keys = dict.fromkeys(held_keys)
        self._count = 0
        return jobs
