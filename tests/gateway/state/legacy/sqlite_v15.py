"""The state schema's migrations 1-15 for SQLite as released (``gateway/state/schema.py`` at
issue 35), kept verbatim so a test can build a database the old code made and upgrade it."""

from __future__ import annotations

from typing import Final

#: The run's delivery states as version 13 wrote them (``gateway.state.lifecycle`` then).
DELIVERY_SQL: Final = "'live', 'held', 'batched', 'pending', 'delivered', 'consumed'"


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

#: Scheduled jobs and their occurrences (``gateway.schedules.store``). An occurrence is
#: written with its run in the transaction that moves the job's ``next_run_at`` on.
_V14: Final = (
    """
    CREATE TABLE schedule_jobs (
        job_id TEXT PRIMARY KEY,
        declared INTEGER NOT NULL DEFAULT 0,
        trigger_kind TEXT NOT NULL CHECK (trigger_kind IN ('cron', 'every', 'at')),
        trigger_value TEXT NOT NULL,
        timezone TEXT NOT NULL,
        anchor REAL NOT NULL,
        agent_id TEXT NOT NULL,
        task TEXT NOT NULL,
        to_target TEXT NOT NULL,
        label TEXT,
        model TEXT,
        run_timeout_seconds REAL NOT NULL DEFAULT 0,
        enabled INTEGER NOT NULL DEFAULT 1,
        created_by TEXT,
        created_at REAL NOT NULL,
        next_run_at REAL,
        paused INTEGER NOT NULL DEFAULT 0,
        consecutive_failures INTEGER NOT NULL DEFAULT 0,
        last_run_at REAL,
        last_run_id TEXT,
        last_status TEXT
    ) WITHOUT ROWID
    """,
    "CREATE INDEX schedule_jobs_due ON schedule_jobs (next_run_at) WHERE next_run_at IS NOT NULL",
    "CREATE INDEX schedule_jobs_creator ON schedule_jobs (created_by)",
    """
    CREATE TABLE schedule_occurrences (
        job_id TEXT NOT NULL,
        occurrence_at REAL NOT NULL,
        outcome TEXT NOT NULL CHECK (outcome IN ('ran', 'missed', 'skipped')),
        run_id TEXT,
        recorded_at REAL NOT NULL,
        PRIMARY KEY (job_id, occurrence_at)
    ) WITHOUT ROWID
    """,
    "ALTER TABLE runs ADD COLUMN job_id TEXT",
    "ALTER TABLE runs ADD COLUMN occurrence_at REAL",
    "CREATE UNIQUE INDEX runs_occurrence ON runs (job_id, occurrence_at) WHERE job_id IS NOT NULL",
)

#: The chat message a turn's reply is streamed in, kept with its inbound message (both go
#: when the turn ended): a re-run after a crash edits it (``channels.StreamedMessage``).
_V15: Final = ("ALTER TABLE inbound ADD COLUMN streamed TEXT",)

MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (
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
LATEST_VERSION: Final = len(MIGRATIONS)
