"""Web chat pages on several gateway replicas: telling the others that a client's history
grew.

A client's pages are open on one replica (or a few: tabs behind a load balancer), but a
reply or an announce for it may be sent by any replica (each delivers announces). Every
replica writes what it sends to the client's history file in the shared state directory,
then publishes the client's id through a :class:`Relay`; each replica holding a page of
that client reads the file again and pushes what its pages lack (message ids keep each
frame on a page once). A notice carries no message, only whose history grew, so it never
outgrows a transport's size limit and a notice missed while a replica was cut off is made
good by reading the files again (``on_change(None)``).

A reply being written reaches pages on other replicas the same way, as it grows: the
replica running the turn publishes :class:`RelayedDelta` notices (throttled: see
:mod:`channels.webchat.streams`), each carrying only the text new since the last, with the
length the turn's text had before it (``at``), so a replica that missed one (a gap in the
notices) knows and waits for the final reply instead of showing a hole.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

#: Called with a client id whose history another replica extended, or with None after a
#: gap in the notices (reconnected): then every client with an open page is read again.
ChangeHandler = Callable[[str | None], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class RelayedDelta:
    """More of a reply another replica is writing for ``client_id``'s pages."""

    client_id: str
    turn_id: str
    #: How long the turn's text was before ``text`` (0 with ``reset``: ``text`` replaces it).
    at: int
    text: str
    reset: bool = False
    #: The turn is over (``text`` is empty): drop what was not replaced by a final reply.
    end: bool = False


#: Called with each :class:`RelayedDelta` of another replica, in the order it published them.
DeltaHandler = Callable[[RelayedDelta], Awaitable[None]]


class Relay(Protocol):
    """Notices between replicas that a client's history file grew."""

    async def start(self, on_change: ChangeHandler, on_delta: DeltaHandler) -> None:
        """Begin listening; ``on_change`` hears the other replicas' notices of history,
        ``on_delta`` their replies as they are written."""
        ...

    async def publish(self, client_id: str) -> None:
        """Tell the other replicas that ``client_id``'s history grew; raise
        :class:`channels.errors.ChannelSendError` (retryable) when it could not be told."""
        ...

    async def publish_delta(self, delta: RelayedDelta) -> None:
        """Show the other replicas' pages of ``delta.client_id`` more of a reply (split as
        the transport needs); raise :class:`channels.errors.ChannelSendError` when they
        could not be told."""
        ...

    async def stop(self) -> None:
        """Stop listening. Idempotent."""
        ...
