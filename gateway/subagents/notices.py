"""What the sub-agent layer tells the other replicas of a cluster, and hears from them.

Two topics, each naming a run: :data:`STEERS` (a steer waits in the database for a run this
replica may be executing) and :data:`RUN_ENDED` (a run reached its final status: waiters
look again). A notice can be missed (a replica's LISTEN connection was down, or the notify
failed): the notices implementation calls every handler with None once it listens again,
and the receivers look in the database now and then anyway (``poll``). One process has no
notices: what it needs to know it learns in memory.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final, Protocol

#: A steer for the run named waits in the database.
STEERS: Final = "steer"
#: The run named reached its final status.
RUN_ENDED: Final = "run_ended"

#: Hears a notice's run id, or None after a gap in the notices (look at every run).
NoticeHandler = Callable[[str | None], Awaitable[None]]


class Notices(Protocol):
    """Notices between replicas (:class:`gateway.cluster.notify.PgNotices`)."""

    async def subscribe(self, topic: str, handler: NoticeHandler) -> None: ...

    def unsubscribe(self, topic: str) -> None: ...

    async def tell(self, topic: str, ref: str) -> None:
        """Tell the other replicas; a failure is logged, never raised."""
        ...
