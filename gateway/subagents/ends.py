"""Where a final run's result goes after the write that made it final.

:func:`gateway.state.destination` decides, from the run as that write left it: its batch
(the follow-up starts once every run of it is final), a ``subagents wait`` (woken by the run
feed; nothing to do here), or its nearest live requester (a completion, up the nesting chain
if need be). Then what waited for the run itself goes on up the chain: the batch it yielded
to, if the run ended first, and the completions routed to it.
"""

from __future__ import annotations

import logging

from gateway.state import Destination, RunRecord, StateDB, destination
from gateway.subagents.batches import BatchCoordinator
from gateway.subagents.completions import Completions

logger = logging.getLogger(__name__)


class RunEnds:
    """Hands final runs' results on (see the module docstring)."""

    def __init__(self, *, db: StateDB, batches: BatchCoordinator, completions: Completions) -> None:
        self._db = db
        self._batches = batches
        self._completions = completions

    def __repr__(self) -> str:
        return f"<RunEnds {self._batches!r} {self._completions!r}>"

    async def hand_on(self, run: RunRecord) -> None:
        """Take ``run``'s result where its destination says, then dissolve the batch it
        yielded to (if it ended first) and send on what was routed to it."""
        where = destination(run)
        if where is Destination.BATCH and run.delivery.batch_id is not None:
            await self._batches.run_final(run.delivery.batch_id)
        elif where is not Destination.WAITER:
            await self._completions.deliver(run)
        if not self._completions.childless(run.run_id):  # else it yielded to no batch
            await self._batches.dissolve_for(run)
        await self._completions.forward(run)
