"""What several gateway replicas on one PostgreSQL database need beyond the shared state:
session locks across replicas (``locks``) and replica liveness (``replicas``).

Used only with ``cluster.databaseUrl``; ``locks`` imports psycopg, so it is imported only
then (a gateway on SQLite never loads it).
"""

from gateway.cluster.replicas import DEAD_AFTER_SECONDS, HEARTBEAT_SECONDS, Heartbeat, Reaper

__all__ = ["DEAD_AFTER_SECONDS", "HEARTBEAT_SECONDS", "Heartbeat", "Reaper"]
