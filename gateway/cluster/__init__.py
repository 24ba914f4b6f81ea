"""What runs only when ``cluster.databaseUrl`` is set: several replicas on one PostgreSQL.

- :mod:`~gateway.cluster.timing`: the queue's heartbeat, stalled and sweep periods;
- :mod:`~gateway.cluster.queue`: the ``subagent`` lane on procrastinate (imported lazily,
  with psycopg and procrastinate, only by a gateway configured for a cluster).
"""

from gateway.cluster.timing import QueueTiming

__all__ = ["QueueTiming"]
