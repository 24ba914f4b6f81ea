"""Remembering the events a channel has handled, so that a repeat or a replay is dropped.

A chat provider may deliver one event more than once (Slack retries an event whose ack it
missed), and whoever captured a signed request may send it again while its signature is
still accepted. A channel names each event by a few keys (its event id, its signature) and
asks a :class:`SeenKeys` whether any of them was seen within a window. The gateway supplies
one kept in its state database, so the memory outlives any number of other events and a
restart; :class:`MemorySeenKeys` serves a channel built on its own (tests, ``herald doctor``).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Protocol


class SeenKeys(Protocol):
    """Keys of handled events, each remembered for a while."""

    async def first_sighting(self, keys: Sequence[str], ttl_seconds: float) -> bool:
        """Remember ``keys`` for ``ttl_seconds`` from now (a key seen again is remembered
        longer); True when none of them was remembered already, i.e. the event is new."""
        ...


class MemorySeenKeys:
    """:class:`SeenKeys` in memory: bounded to ``capacity`` keys (the oldest fall out) and
    forgotten on restart."""

    def __init__(self, capacity: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._capacity = capacity
        self._clock = clock
        self._expiry: OrderedDict[str, float] = OrderedDict()

    def __repr__(self) -> str:
        return f"<MemorySeenKeys {len(self._expiry)}/{self._capacity}>"

    def __len__(self) -> int:
        return len(self._expiry)

    async def first_sighting(self, keys: Sequence[str], ttl_seconds: float) -> bool:
        return self.first_sighting_now(keys, ttl_seconds)

    def first_sighting_now(self, keys: Sequence[str], ttl_seconds: float) -> bool:
        """:meth:`first_sighting` without awaiting (it never waits for anything)."""
        now = self._clock()
        new = True
        for key in keys:
            expires = self._expiry.pop(key, None)
            if expires is not None and expires >= now:
                new = False
            self._expiry[key] = max(now + ttl_seconds, expires or 0.0)
        while len(self._expiry) > self._capacity:
            self._expiry.popitem(last=False)
        return new
