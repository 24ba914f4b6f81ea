"""Typed errors of the state database."""

from __future__ import annotations

from typing import Literal

from gateway.errors import HeraldError

#: The constraints other than uniqueness that a write can break.
ConstraintKind = Literal["CHECK", "NOT NULL", "FOREIGN KEY"]


class StateError(HeraldError):
    """Base class of state database errors."""


class StateClosedError(StateError):
    """The state database was closed; no more operations."""


class StateMissingError(StateError):
    """There is no state database at the path (read-only opens never create one)."""


class SchemaError(StateError):
    """The database schema cannot be used: a migration failed, or the file is newer/older."""


class ReadOnlyStateError(StateError):
    """A write was asked of a database opened read-only."""


class DiskFullError(StateError):
    """The disk refused a write for want of space (SQLite's ``SQLITE_FULL``, PostgreSQL's
    SQLSTATE ``53100``); nothing of the write was kept. The gateway is in its disk-full
    state (:mod:`gateway.state.diskfull`) until space is back."""


class RecordNotFoundError(StateError, LookupError):
    """No row has this key in ``table``."""

    def __init__(self, table: str, key: object) -> None:
        self.table = table
        self.key = key
        super().__init__(f"no {table} row {key!r}")


class RecordConflictError(StateError):
    """A row with this unique key already exists in ``table``."""

    def __init__(self, table: str, detail: str) -> None:
        self.table = table
        super().__init__(f"{table}: {detail}")


class InvalidUpdateError(StateError, ValueError):
    """An update names a column that does not exist or may not change."""


class ConstraintError(InvalidUpdateError):
    """A CHECK, NOT NULL or foreign key constraint refused the values written (the caller's
    bad value); ``kind`` says which, ``detail`` is the database's own message."""

    def __init__(self, kind: ConstraintKind, detail: str) -> None:
        self.kind: ConstraintKind = kind
        self.detail = detail
        super().__init__(f"{kind} constraint: {detail}")


class StateUnavailableError(StateError):
    """The state database cannot be reached now (PostgreSQL down, the network cut); the
    operation did not happen, or (a write whose connection broke at its end) may have."""


class WriteConflictError(StateUnavailableError):
    """The write met a concurrent one and did not happen: SQLite's database stayed locked
    past the busy timeout, or PostgreSQL chose this transaction to fail (a serialization
    failure, a deadlock). The write may be run again whole; each backend's ``write`` does,
    with backoff, and raises this only once it has tried for long enough."""


class ChildLimitError(StateError):
    """The requester session already has ``limit`` runs that are not final."""

    def __init__(self, parent_session_key: str, limit: int) -> None:
        self.parent_session_key = parent_session_key
        self.limit = limit
        super().__init__(f"{parent_session_key} has {limit} runs that are not final")
