"""The state database on PostgreSQL (``cluster.databaseUrl``), shared by every replica:
:class:`PgStateDB`. Importing it imports psycopg; only a configuration that names a
PostgreSQL database does."""

from gateway.state.postgres.connection import POSTGRESQL, PgConnection
from gateway.state.postgres.database import PgStateDB

__all__ = ["POSTGRESQL", "PgConnection", "PgStateDB"]
