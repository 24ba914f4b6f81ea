"""The state database in a SQLite file (the default backend): :class:`SqliteStateDB`."""

from gateway.state.sqlite.connection import SQLITE, SqliteConnection
from gateway.state.sqlite.database import SqliteStateDB

__all__ = ["SQLITE", "SqliteConnection", "SqliteStateDB"]
