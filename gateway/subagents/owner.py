"""The name this gateway records on the orchestration work it owns.

Holds of ``subagents wait``, completions being handed on and batch follow-ups carry the
replica that owns them (:mod:`gateway.state.claims`): at start a replica takes up only its
own, and what a dead replica owned is taken over by a survivor after a heartbeat. One
process (no ``cluster.databaseUrl``) owns everything, under :data:`LOCAL_REPLICA`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

LOCAL_REPLICA: Final = "local"


@dataclass(frozen=True, slots=True)
class Owner:
    """This gateway as an owner: ``replica_id`` in a cluster, None alone."""

    replica_id: str | None = None

    @property
    def name(self) -> str:
        return self.replica_id or LOCAL_REPLICA

    @property
    def alone(self) -> bool:
        """No other process shares the database: every piece of work is this one's."""
        return self.replica_id is None


#: One process on its own database.
ALONE: Final = Owner()
