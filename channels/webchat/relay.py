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
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

#: Called with a client id whose history another replica extended, or with None after a
#: gap in the notices (reconnected): then every client with an open page is read again.
ChangeHandler = Callable[[str | None], Awaitable[None]]


class Relay(Protocol):
    """Notices between replicas that a client's history file grew."""

    async def start(self, on_change: ChangeHandler) -> None:
        """Begin listening; ``on_change`` hears the other replicas' notices."""
        ...

    async def publish(self, client_id: str) -> None:
        """Tell the other replicas that ``client_id``'s history grew; raise
        :class:`channels.errors.ChannelSendError` (retryable) when it could not be told."""
        ...

    async def stop(self) -> None:
        """Stop listening. Idempotent."""
        ...
