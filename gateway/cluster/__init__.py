"""What runs only when ``cluster.databaseUrl`` is set: several replicas on one PostgreSQL.

One module per concept:

- :mod:`~gateway.cluster.timing`: the queue's heartbeat, stalled and sweep periods;
- :mod:`~gateway.cluster.queue`: the ``subagent`` lane on procrastinate;
- :mod:`~gateway.cluster.locks`: one turn at a time per session across replicas;
- :mod:`~gateway.cluster.replicas`: replica liveness (heartbeats) and taking over what a dead
  replica left;
- :mod:`~gateway.cluster.leader`: which replica holds a channel's one inbound connection
  (Discord's gateway);
- :mod:`~gateway.cluster.notify`: notices between replicas over LISTEN/NOTIFY (web chat
  deliveries, steers, runs that ended).

Those that import psycopg (and procrastinate) are imported lazily, only by a gateway
configured for a cluster: a gateway on SQLite never loads them.
"""

from gateway.cluster.replicas import DEAD_AFTER_SECONDS, HEARTBEAT_SECONDS, Heartbeat, Reaper
from gateway.cluster.timing import QueueTiming

__all__ = ["DEAD_AFTER_SECONDS", "HEARTBEAT_SECONDS", "Heartbeat", "QueueTiming", "Reaper"]
