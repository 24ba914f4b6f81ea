"""The state database (SQLite, WAL; or PostgreSQL with ``cluster.databaseUrl``): sessions
index, sub-agent runs, announce outbox.

The modules here are the core both backends share — the interface (:class:`StateDB`), the
tables, records, the run lifecycle and its transition table, errors, the migrations — and
each backend is a package of its own: :mod:`gateway.state.sqlite`,
:mod:`gateway.state.postgres` (imported only when a configuration names one).
:func:`open_state` chooses between them.
"""

from gateway.state.backend import (
    SchemaStatus,
    backend_of,
    database_reachable,
    migrate_state,
    open_state,
    schema_status,
)
from gateway.state.batches import BatchesTable
from gateway.state.claims import ClaimsTable
from gateway.state.connection import Connection, Dialect
from gateway.state.cursors import CursorTable
from gateway.state.database import StateDB
from gateway.state.diskfull import SpaceMonitor, is_out_of_space
from gateway.state.errors import (
    ChildLimitError,
    ConstraintError,
    DiskFullError,
    InvalidUpdateError,
    ReadOnlyStateError,
    RecordConflictError,
    RecordNotFoundError,
    SchemaError,
    StateClosedError,
    StateError,
    StateMissingError,
    StateUnavailableError,
    WriteConflictError,
)
from gateway.state.inbound import InboundRecord, InboundTable
from gateway.state.lifecycle import (
    TRANSITIONS,
    WITHDRAWN,
    Destination,
    IllegalTransitionError,
    announce_item,
    announce_state_for,
    check_transition,
    destination,
)
from gateway.state.outbox import OutboxTable
from gateway.state.replicas import ReplicaRecord, ReplicasTable
from gateway.state.rows import (
    FINISHED_STATUSES,
    RUN_STATUSES,
    BatchRecord,
    BatchState,
    Cleanup,
    Delivery,
    Origin,
    OutboxRecord,
    OutboxState,
    RunContext,
    RunStatus,
    SessionKind,
    SessionRecord,
)
from gateway.state.runends import insert_item
from gateway.state.runrows import (
    RunDelivery,
    RunProgress,
    RunRecord,
    RunRequest,
    Spent,
    run_columns,
    run_from_columns,
)
from gateway.state.runs import RunsTable
from gateway.state.seen import SeenTable
from gateway.state.sessions import SessionsTable
from gateway.state.sqlite import SqliteStateDB
from gateway.state.steers import SteerRecord, SteersTable

__all__ = [
    "FINISHED_STATUSES",
    "RUN_STATUSES",
    "TRANSITIONS",
    "WITHDRAWN",
    "BatchRecord",
    "BatchState",
    "BatchesTable",
    "ChildLimitError",
    "ClaimsTable",
    "Cleanup",
    "Connection",
    "ConstraintError",
    "CursorTable",
    "Delivery",
    "Destination",
    "Dialect",
    "DiskFullError",
    "IllegalTransitionError",
    "InboundRecord",
    "InboundTable",
    "InvalidUpdateError",
    "Origin",
    "OutboxRecord",
    "OutboxState",
    "OutboxTable",
    "ReadOnlyStateError",
    "RecordConflictError",
    "RecordNotFoundError",
    "ReplicaRecord",
    "ReplicasTable",
    "RunContext",
    "RunDelivery",
    "RunProgress",
    "RunRecord",
    "RunRequest",
    "RunStatus",
    "RunsTable",
    "SchemaError",
    "SchemaStatus",
    "SeenTable",
    "SessionKind",
    "SessionRecord",
    "SessionsTable",
    "SpaceMonitor",
    "Spent",
    "SqliteStateDB",
    "StateClosedError",
    "StateDB",
    "StateError",
    "StateMissingError",
    "StateUnavailableError",
    "SteerRecord",
    "SteersTable",
    "WriteConflictError",
    "announce_item",
    "announce_state_for",
    "backend_of",
    "check_transition",
    "database_reachable",
    "destination",
    "insert_item",
    "is_out_of_space",
    "migrate_state",
    "open_state",
    "run_columns",
    "run_from_columns",
    "schema_status",
]
