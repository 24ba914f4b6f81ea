"""Schema migrations of the state database, in order; version N is ``migrations()[N - 1]``.

This is the one migration source of both backends. Each migration is a tuple of single SQL
statements, written once in SQLite's words; SQLite runs them as written
(:mod:`gateway.state.sqlite.schema`), PostgreSQL as translated by a few fixed rules (types,
collation, index order: :mod:`gateway.state.postgres.migrations`). A step one database does
differently is a marker each backend's runner knows (:data:`JOB_QUEUE_SCHEMA`). Each
migration is applied with its ``schema_version`` row in one transaction (both databases'
DDL is transactional), so a failed migration leaves the previous version intact. Never edit
a released migration: append a new one (a test holds versions 1-15 to their released text).

Timestamps are epoch seconds (REAL). ``sessions`` is the index of every session; a session
is archived when ``archived_at`` is set and keeps its row (usage stays queryable).
``runs`` records sub-agent runs; ``outbox`` holds announce deliveries (at most one per
run). ``message_ids`` is a JSON list of the provider's message ids.

Version 2 adds orchestration: a run's ``parent_run_id`` and ``depth`` (1 for a run a person's
session spawned), the ``batch_id`` of the ``sessions_yield`` batch it belongs to, and its
``completion`` — the result written into the requester's conversation exactly once:
``pending`` once final, then ``delivered`` (into the requester's history) or ``consumed``
(returned by ``subagents wait`` or a batch's follow-up turn). ``batches`` holds yields and
their follow-up; an outbox item carries the ``batch_id`` of the follow-up reply it posts.

Version 3 adds ``seen_keys``: the chat events already handled.

Version 4: ``outbox.first_attempt_at`` (when the first send began: the start of the window
in which a cut-off send is looked for in the chat) and ``outbox.in_doubt`` (1 while an item
a crash left mid-send waits for its channel to say whether that send reached the chat).

Version 5 records how a run's conversation began (``context``): ``isolated`` (the task
only) or ``fork`` (a copy of the requester's conversation in the child's transcript, then
the task), so a starting run reads its transcript only when there is something to read,
and indexes the runs not yet final by requester (``maxChildrenPerSession``).

Version 6 is for several replicas on one database: ``replicas`` (each one's heartbeat, so a
replica that stopped beating is known to be dead), the replica that claimed an outbox item
(``outbox.claimed_by``: only it sends the item while it lives) and the replica archiving a
session (``sessions.archive_claimed_by``/``archive_claimed_at``: only it renames the
transcript). One process on SQLite claims the same way, under its own name.

Version 7 is PostgreSQL's alone: the job queue of the cluster's sub-agent lane
(procrastinate's own tables and functions, :data:`JOB_QUEUE_SCHEMA`), applied with the other
migrations under their advisory lock, so ``herald db status`` and ``herald db migrate``
cover it. SQLite records the version and has nothing to do.

Version 8 keeps the number of live runs per requester session in ``live_runs``, so a
spawn's check of ``maxChildrenPerSession`` is one lookup however many runs the session has
queued; the writes that insert a run or change its status keep it
(``gateway.state.runs.count_live``).

Version 9 records which replica owns the orchestration work in flight, so a replica starting
while others run takes up only its own, and a dead replica's is taken over by one survivor:
``runs.held_by`` (the replica whose ``subagents wait`` holds the run), ``runs.completion_by``
(the replica handing the run's pending completion on) and ``batches.claimed_by`` (the
replica running the batch's follow-up). One process on SQLite records its own name.

Version 10 keeps the chat messages acknowledged to their chat whose turn has not run yet
(``inbound``, each deleted once its turn ended), so a crash between the acknowledgement and
the turn loses no message: they are run again at start, or by a survivor in a cluster.

Version 11 keeps, per chat of a channel, the newest message taken there (``chat_cursors``),
so that after a fresh Discord session the channel reads what each chat received while no
connection was up.

Version 12 keeps the steers of running runs until their turn wrote them (``steers``): a steer
reaches its run on whichever replica executes it, and survives a stop or a crash.

Version 13 gives each run one delivery state (``runs.delivery``: who has its result, with
its legal moves in ``gateway.state.lifecycle``) in place of ``completion``, ``held`` and the
routing values of ``announce_state`` (which now records only what became of the chat post),
and ``batches.stopped_at``: a ``/stop`` stopped the batch's runs (it closes without a turn).

Version 14 is the schedules' (:mod:`gateway.schedules.schema`): their jobs, occurrences, and
the run each occurrence started.

Version 15 keeps, with a chat message whose turn has not ended, the message its reply is
being streamed in (``inbound.streamed``: a JSON object of its chat, thread and message ids,
written when first posted), so a turn run again after a crash edits that message instead
of posting a second reply.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Mapping
from typing import Final

from gateway.state.lifecycle import DELIVERY_SQL

RUN_STATUS_SQL: Final = (
    "'queued', 'running', 'announcing', 'done', 'error', 'timeout', 'cancelled', 'interrupted'"
)

_V1: Final = (
    """
    CREATE TABLE sessions (
        key TEXT PRIMARY KEY,
        session_id TEXT NOT NULL UNIQUE,
        agent_id TEXT NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('main', 'chat', 'subagent')),
        parent_key TEXT,
        label TEXT,
        model TEXT,
        origin_channel TEXT,
        origin_account TEXT,
        origin_chat_id TEXT,
        origin_thread_id TEXT,
        origin_chat_type TEXT,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        usage_input INTEGER NOT NULL DEFAULT 0,
        usage_output INTEGER NOT NULL DEFAULT 0,
        usage_cache_read INTEGER NOT NULL DEFAULT 0,
        usage_cache_write INTEGER NOT NULL DEFAULT 0,
        cost_usd REAL,
        archive_due_at REAL,
        archived_at REAL,
        archived_path TEXT
    )
    """,
    "CREATE INDEX sessions_listing ON sessions (archived_at, kind, updated_at)",
    "CREATE INDEX sessions_parent ON sessions (parent_key)",
    """
    CREATE INDEX sessions_archive_due ON sessions (archive_due_at)
    WHERE archived_at IS NULL AND archive_due_at IS NOT NULL
    """,
    f"""
    CREATE TABLE runs (
        run_id TEXT PRIMARY KEY,
        child_session_key TEXT NOT NULL REFERENCES sessions (key),
        child_session_id TEXT NOT NULL,
        parent_session_key TEXT,
        requester_agent_id TEXT NOT NULL,
        agent_id TEXT NOT NULL,
        label TEXT,
        task TEXT NOT NULL,
        model TEXT,
        model_applied INTEGER NOT NULL DEFAULT 1,
        cleanup TEXT NOT NULL DEFAULT 'keep' CHECK (cleanup IN ('delete', 'keep')),
        run_timeout_seconds REAL NOT NULL DEFAULT 0,
        status TEXT NOT NULL CHECK (status IN ({RUN_STATUS_SQL})),
        origin_channel TEXT,
        origin_account TEXT,
        origin_chat_id TEXT,
        origin_thread_id TEXT,
        origin_chat_type TEXT,
        created_at REAL NOT NULL,
        started_at REAL,
        ended_at REAL,
        usage_input INTEGER NOT NULL DEFAULT 0,
        usage_output INTEGER NOT NULL DEFAULT 0,
        usage_cache_read INTEGER NOT NULL DEFAULT 0,
        usage_cache_write INTEGER NOT NULL DEFAULT 0,
        cost_usd REAL,
        result_text TEXT,
        error TEXT,
        announce_state TEXT,
        announce_error TEXT,
        transcript_path TEXT,
        outcome TEXT CHECK (outcome IS NULL OR outcome IN ({RUN_STATUS_SQL})),
        announce_text TEXT
    )
    """,
    "CREATE INDEX runs_status ON runs (status)",
    "CREATE INDEX runs_parent ON runs (parent_session_key, created_at)",
    "CREATE INDEX runs_child ON runs (child_session_key)",
    """
    CREATE TABLE outbox (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id TEXT UNIQUE REFERENCES runs (run_id),
        channel TEXT NOT NULL,
        account TEXT NOT NULL,
        chat_id TEXT NOT NULL,
        thread_id TEXT,
        text TEXT NOT NULL,
        kind TEXT NOT NULL DEFAULT 'announce',
        state TEXT NOT NULL DEFAULT 'pending'
            CHECK (state IN ('pending', 'sending', 'delivered', 'failed')),
        attempts INTEGER NOT NULL DEFAULT 0,
        next_attempt_at REAL,
        last_error TEXT,
        created_at REAL NOT NULL,
        delivered_at REAL,
        message_ids TEXT
    )
    """,
    "CREATE INDEX outbox_due ON outbox (state, next_attempt_at)",
)

BATCH_STATE_SQL: Final = "'waiting', 'following', 'done'"
COMPLETION_SQL: Final = "'pending', 'delivered', 'consumed'"

_V2: Final = (
    "ALTER TABLE runs ADD COLUMN parent_run_id TEXT REFERENCES runs (run_id)",
    "ALTER TABLE runs ADD COLUMN depth INTEGER NOT NULL DEFAULT 1",
    "ALTER TABLE runs ADD COLUMN batch_id TEXT",
    f"""
    ALTER TABLE runs ADD COLUMN completion TEXT
        CHECK (completion IS NULL OR completion IN ({COMPLETION_SQL}))
    """,
    "ALTER TABLE runs ADD COLUMN held INTEGER NOT NULL DEFAULT 0",
    "CREATE INDEX runs_parent_run ON runs (parent_run_id)",
    "CREATE INDEX runs_batch ON runs (batch_id) WHERE batch_id IS NOT NULL",
    "CREATE INDEX runs_completion ON runs (completion) WHERE completion = 'pending'",
    f"""
    CREATE TABLE batches (
        batch_id TEXT PRIMARY KEY,
        session_key TEXT NOT NULL REFERENCES sessions (key),
        run_id TEXT REFERENCES runs (run_id),
        run_ids TEXT NOT NULL,
        message TEXT,
        origin_channel TEXT,
        origin_account TEXT,
        origin_chat_id TEXT,
        origin_thread_id TEXT,
        origin_chat_type TEXT,
        first_spawn_at REAL NOT NULL,
        created_at REAL NOT NULL,
        deadline_at REAL NOT NULL,
        state TEXT NOT NULL DEFAULT 'waiting' CHECK (state IN ({BATCH_STATE_SQL})),
        followup_started_at REAL,
        ended_at REAL,
        reply_text TEXT
    )
    """,
    "CREATE INDEX batches_open ON batches (state) WHERE state != 'done'",
    "ALTER TABLE outbox ADD COLUMN batch_id TEXT REFERENCES batches (batch_id)",
    "CREATE UNIQUE INDEX outbox_batch ON outbox (batch_id) WHERE batch_id IS NOT NULL",
)

#: Keys of chat events already handled (a channel's event ids and request signatures), each
#: until ``expires_at``: a repeat or a replay inside that window is dropped, across restarts.
_V3: Final = (
    """
    CREATE TABLE seen_keys (
        key TEXT PRIMARY KEY,
        expires_at REAL NOT NULL
    ) WITHOUT ROWID
    """,
    "CREATE INDEX seen_keys_expiry ON seen_keys (expires_at)",
)

_V4: Final = (
    "ALTER TABLE outbox ADD COLUMN first_attempt_at REAL",
    "ALTER TABLE outbox ADD COLUMN in_doubt INTEGER NOT NULL DEFAULT 0",
)


#: The statuses of a run not yet final, as the partial index below and its queries say it.
LIVE_STATUS_SQL: Final = "'queued', 'running', 'announcing'"

_V5: Final = (
    """
    ALTER TABLE runs ADD COLUMN context TEXT NOT NULL DEFAULT 'isolated'
        CHECK (context IN ('isolated', 'fork'))
    """,
    # Counting a session's live runs (maxChildrenPerSession) on every spawn must not scan
    # every run the session ever had.
    f"CREATE INDEX runs_live ON runs (parent_session_key) WHERE status IN ({LIVE_STATUS_SQL})",
)

_V6: Final = (
    """
    CREATE TABLE replicas (
        replica_id TEXT PRIMARY KEY,
        host TEXT NOT NULL,
        pid INTEGER NOT NULL,
        started_at REAL NOT NULL,
        heartbeat_at REAL NOT NULL,
        stopped_at REAL
    ) WITHOUT ROWID
    """,
    "ALTER TABLE outbox ADD COLUMN claimed_by TEXT",
    "ALTER TABLE sessions ADD COLUMN archive_claimed_by TEXT",
    "ALTER TABLE sessions ADD COLUMN archive_claimed_at REAL",
    # Healing claims at start looks for the few claimed sessions, not every session.
    """
    CREATE INDEX sessions_archive_claimed ON sessions (archive_claimed_by)
    WHERE archive_claimed_by IS NOT NULL
    """,
)


#: The statement PostgreSQL replaces with procrastinate's schema (when its tables are
#: missing); to SQLite it is a comment.
JOB_QUEUE_SCHEMA: Final = "-- the job queue of the cluster's sub-agent lane (PostgreSQL only)"

_V7: Final = (JOB_QUEUE_SCHEMA,)

_V8: Final = (
    # A spawn checks its requester's room without counting: the count is kept, per
    # requester session, by the writes that insert a run or change its status.
    """
    CREATE TABLE live_runs (
        parent_session_key TEXT PRIMARY KEY,
        live INTEGER NOT NULL
    ) WITHOUT ROWID
    """,
    "INSERT INTO live_runs (parent_session_key, live) SELECT parent_session_key, COUNT(*)"
    f" FROM runs WHERE parent_session_key IS NOT NULL AND status IN ({LIVE_STATUS_SQL})"
    " GROUP BY parent_session_key",
)

_V9: Final = (
    "ALTER TABLE runs ADD COLUMN held_by TEXT",
    "ALTER TABLE runs ADD COLUMN completion_by TEXT",
    "ALTER TABLE batches ADD COLUMN claimed_by TEXT",
    # The takeover after every heartbeat looks for the few held runs, not every run.
    "CREATE INDEX runs_held ON runs (held_by) WHERE held = 1 OR announce_state = 'held'",
)

#: Chat messages acknowledged to their chat whose turn has not run yet (deleted once it
#: ran); ``claimed_by`` is the replica handling each (NULL in a single process).
_V10: Final = (
    """
    CREATE TABLE inbound (
        inbound_id TEXT PRIMARY KEY,
        message TEXT NOT NULL,
        received_at REAL NOT NULL,
        claimed_by TEXT
    ) WITHOUT ROWID
    """,
)

#: The newest message taken per chat (Discord snowflakes fit in 64 bits); chats whose cursor
#: moved recently are read again after a fresh gateway session.
_V11: Final = (
    """
    CREATE TABLE chat_cursors (
        channel TEXT NOT NULL,
        account TEXT NOT NULL,
        chat_id TEXT NOT NULL,
        chat_type TEXT NOT NULL,
        message_id INTEGER NOT NULL,
        updated_at REAL NOT NULL,
        PRIMARY KEY (channel, account, chat_id)
    ) WITHOUT ROWID
    """,
)

#: Steers given to a running run and not yet written into its conversation (deleted once
#: written), so one reaches its run wherever the run executes, and after a restart.
_V12: Final = (
    """
    CREATE TABLE steers (
        steer_id INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id TEXT NOT NULL,
        message TEXT NOT NULL,
        created_at REAL NOT NULL
    )
    """,
    "CREATE INDEX steers_run ON steers (run_id, steer_id)",
)

#: One delivery state per run (``gateway.state.lifecycle``) in place of ``completion``,
#: ``held`` and the ``held``/``consumed`` values of ``announce_state``; the old columns stay,
#: unused, so a replica of the previous version still reads rows while a rolling restart
#: replaces it.
_V13: Final = (
    f"""
    ALTER TABLE runs ADD COLUMN delivery TEXT NOT NULL DEFAULT 'live'
        CHECK (delivery IN ({DELIVERY_SQL}))
    """,
    """
    UPDATE runs SET delivery = CASE
        WHEN completion = 'delivered' THEN 'delivered'
        WHEN completion = 'consumed' THEN 'consumed'
        WHEN held = 1 OR announce_state = 'held' THEN 'held'
        WHEN completion = 'pending' AND batch_id IS NOT NULL THEN 'batched'
        WHEN completion = 'pending' THEN 'pending'
        ELSE 'live' END
    """,
    "UPDATE runs SET announce_state = NULL WHERE announce_state = 'held'",
    "DROP INDEX runs_completion",
    "DROP INDEX runs_held",
    "CREATE INDEX runs_delivery_pending ON runs (delivery) WHERE delivery = 'pending'",
    # The takeover after every heartbeat looks for the few held runs, not every run.
    "CREATE INDEX runs_delivery_held ON runs (held_by) WHERE delivery = 'held'",
    "ALTER TABLE batches ADD COLUMN stopped_at REAL",
)

#: The schedules' tables (:data:`FEATURE_SCHEMAS`).
_V14: Final[tuple[str, ...]] = ()

#: The chat message a turn's reply is streamed in, kept with its inbound message (both go
#: when the turn ended): a re-run after a crash edits it (``channels.StreamedMessage``).
_V15: Final = ("ALTER TABLE inbound ADD COLUMN streamed TEXT",)

#: The state's own statements per version (version N is ``STATE_MIGRATIONS[N - 1]``); a
#: feature's tables are in :data:`FEATURE_SCHEMAS`.
STATE_MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (
    _V1,
    _V2,
    _V3,
    _V4,
    _V5,
    _V6,
    _V7,
    _V8,
    _V9,
    _V10,
    _V11,
    _V12,
    _V13,
    _V14,
    _V15,
)
LATEST_VERSION: Final = len(STATE_MIGRATIONS)

#: The features that own tables in the state database, by module: each module's
#: ``MIGRATIONS`` maps a version to the statements it adds to that version, run after the
#: state's own (as Django's ``INSTALLED_APPS`` names the apps whose migrations it runs).
#: Named, not imported: the features sit above the state layer, and their schema modules
#: import nothing of Herald's, so loading one at the first migration cannot loop.
FEATURE_SCHEMAS: Final = ("gateway.schedules.schema",)


@functools.cache
def migrations() -> tuple[tuple[str, ...], ...]:
    """Every version's statements: the state's own, then each feature's (version N is
    ``migrations()[N - 1]``). A feature's version this list does not have is an error in
    that feature's module (a version is added here first, even when empty)."""
    versions = [list(statements) for statements in STATE_MIGRATIONS]
    for name in FEATURE_SCHEMAS:
        feature = importlib.import_module(name).MIGRATIONS
        if not isinstance(feature, Mapping):
            raise TypeError(f"{name}.MIGRATIONS is not a mapping of version to statements")
        for version, statements in feature.items():
            if not isinstance(version, int) or not 1 <= version <= LATEST_VERSION:
                raise ValueError(
                    f"{name}.MIGRATIONS: version {version!r} is not one of 1-{LATEST_VERSION}"
                )
            versions[version - 1].extend(str(statement) for statement in statements)
    return tuple(tuple(statements) for statements in versions)
