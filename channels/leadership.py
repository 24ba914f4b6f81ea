"""Which process of a cluster holds a channel's one inbound connection.

Some chat services give a bot one inbound connection (Discord's gateway: two connections
of one bot would each receive every message). In a cluster of gateway replicas one of them
holds it, chosen by a lock the gateway supplies (:class:`Leadership`); the others stand by,
still sending over the service's REST API, and one of them takes over when the holder
dies. A channel built on its own (one process) leads always: :class:`AlwaysLeader`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Protocol


class Lease(Protocol):
    """The leadership of one name, held while inside :meth:`Leadership.hold`."""

    async def lost(self) -> None:
        """Return when the leadership is lost (the lock's connection dropped): the holder
        must then give the connection up at once, as another process may take it."""
        ...


class Leadership(Protocol):
    """A cluster-wide lock per name, at most one holder at a time."""

    def hold(self, name: str) -> AbstractAsyncContextManager[Lease]:
        """Wait (as long as it takes) until this process holds ``name``'s leadership; hold
        it inside the block, give it back on leaving."""
        ...


class _Forever:
    async def lost(self) -> None:
        await asyncio.Event().wait()


class AlwaysLeader:
    """:class:`Leadership` of a single process: held at once, never lost."""

    def __repr__(self) -> str:
        return "<AlwaysLeader>"

    @asynccontextmanager
    async def hold(self, name: str) -> AsyncIterator[Lease]:
        yield _Forever()
