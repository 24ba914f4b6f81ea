"""The state database (SQLite, WAL): sessions index, sub-agent runs, announce outbox."""

from gateway.state.batches import BatchesTable
from gateway.state.db import StateDB
from gateway.state.diskfull import SpaceMonitor, is_out_of_space
from gateway.state.errors import (
    ChildLimitError,
    DiskFullError,
    InvalidUpdateError,
    ReadOnlyStateError,
    RecordConflictError,
    RecordNotFoundError,
    SchemaError,
    StateClosedError,
    StateError,
    StateMissingError,
)
from gateway.state.outbox import OutboxTable
from gateway.state.rows import (
    FINISHED_STATUSES,
    RUN_STATUSES,
    BatchRecord,
    BatchState,
    Cleanup,
    Completion,
    Origin,
    OutboxRecord,
    OutboxState,
    RunContext,
    RunRecord,
    RunStatus,
    SessionKind,
    SessionRecord,
)
from gateway.state.runs import RunsTable
from gateway.state.seen import SeenTable
from gateway.state.sessions import SessionsTable

__all__ = [
    "FINISHED_STATUSES",
    "RUN_STATUSES",
    "BatchRecord",
    "BatchState",
    "BatchesTable",
    "ChildLimitError",
    "Cleanup",
    "Completion",
    "DiskFullError",
    "InvalidUpdateError",
    "Origin",
    "OutboxRecord",
    "OutboxState",
    "OutboxTable",
    "ReadOnlyStateError",
    "RecordConflictError",
    "RecordNotFoundError",
    "RunContext",
    "RunRecord",
    "RunStatus",
    "RunsTable",
    "SchemaError",
    "SeenTable",
    "SessionKind",
    "SessionRecord",
    "SessionsTable",
    "SpaceMonitor",
    "StateClosedError",
    "StateDB",
    "StateError",
    "StateMissingError",
    "is_out_of_space",
]
