"""Named values shared across the gateway. Each non-obvious number says why."""

from __future__ import annotations

import re
from typing import Final

#: Environment variable naming the config file.
CONFIG_ENV: Final = "HERALD_CONFIG"
#: Prefix of per-key overrides: ``HERALD_<SECTION>__<KEY>``.
ENV_PREFIX: Final = "HERALD_"
ENV_NESTED_DELIMITER: Final = "__"

#: sysexits.h EX_CONFIG: systemd's RestartPreventExitStatus=78 stops a crash loop on it.
EXIT_CONFIG: Final = 78
#: EX_UNAVAILABLE: the address cannot be bound.
EXIT_UNAVAILABLE: Final = 69
#: EX_TEMPFAIL: another gateway runs on this state directory; try again later.
EXIT_TEMPFAIL: Final = 75

#: Seconds a stopping gateway waits, after its drain, for HTTP requests still in flight
#: before it cancels them (aiohttp's default is 60, past systemd's stop timeout): a
#: request that came in as the port closed may never be read (the client times out and
#: retries elsewhere), and a long poll is asked again.
HTTP_STOP_SECONDS: Final = 3.0

#: Session, agent and chat ids after normalising.
ID_PATTERN: Final = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")

#: Bounds that keep a single spawn (or a scheduled job's runs) from flooding a transcript or
#: a prompt: a sub-agent's task and its label.
MAX_TASK_CHARS: Final = 50_000
MAX_LABEL_CHARS: Final = 200

#: Lane names. The per-session lane is one keyed lane: a key runs one job at a time.
MAIN_LANE: Final = "main"
SUBAGENT_LANE: Final = "subagent"
SESSION_LANE: Final = "session"
#: Sessions that may hold a turn at once; each waits for a ``main`` slot inside its turn, so
#: this must be wide (it bounds held turns, not model calls).
SESSION_LANE_WIDTH: Final = 1024
#: Chat turns waiting for their session's lane: past this a chat is told "busy" instead of
#: memory growing without bound under a flood (a few KB per queued message).
SESSION_LANE_MAX_QUEUED: Final = 10_000
#: Turns waiting for a ``main`` slot: at most one per session holding its lane.
MAIN_LANE_MAX_QUEUED: Final = SESSION_LANE_WIDTH
#: The session lane's width in a cluster, where each held turn also holds a PostgreSQL
#: connection for its session's lock: 32 a replica leaves room for a few replicas within
#: PostgreSQL's default ``max_connections`` (100) once raised a little; turns past it wait.
CLUSTER_SESSION_LANE_WIDTH: Final = 32
#: The message a turn is cancelled with when its session's lock was lost with its database
#: connection (another replica may be writing the session now).
SESSION_LOCK_LOST: Final = "session lock lost"

#: Files under the state directory.
STATE_DB_NAME: Final = "herald.db"
AGENTS_DIR: Final = "agents"
SESSIONS_DIR: Final = "sessions"
WORKSPACES_DIR: Final = "workspaces"
TRANSCRIPT_SUFFIX: Final = ".jsonl"
ARCHIVE_MARKER: Final = ".deleted."
DEFAULT_STATE_DIR: Final = "~/.herald"

#: Exactly this announce reply posts nothing (seed 004).
ANNOUNCE_SKIP: Final = "ANNOUNCE_SKIP"
#: Seed 000: more spawns than this in one model turn get an error result.
MAX_SPAWNS_PER_TURN: Final = 10
#: The deepest ``agent.subagents.maxSpawnDepth``: each level is a model turn waiting on the
#: next, so deeper trees cost more than they return.
MAX_SPAWN_DEPTH: Final = 5

#: Loopback hosts that may run without ``gateway.auth.token``.
LOOPBACK_HOSTS: Final = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})

#: Context windows (tokens) of the OpenAI and Anthropic models the example config lists, used
#: when a model sets no ``contextWindow`` (the vendors' published figures).
KNOWN_CONTEXT_WINDOWS: Final[dict[str, int]] = {
    "gpt-4o-mini": 128_000,
    "gpt-4o": 128_000,
    "claude-sonnet-4-5": 200_000,
    "claude-haiku-4-5": 200_000,
}
#: The smallest ``contextWindow`` accepted: below it no system prompt and reply fit at all.
MIN_CONTEXT_WINDOW: Final = 256
#: The largest ``contextWindow`` accepted: ten times the largest window any model offers
#: today (10M tokens); beyond it a figure is a typo, and token arithmetic loses its meaning.
MAX_CONTEXT_WINDOW: Final = 100_000_000
#: A replica's name: it appears in logs, claims and PostgreSQL's ``application_name``.
REPLICA_ID_PATTERN: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
#: ``agent.tools.maxResultChars``: about 5,000 tokens, so a few big results still leave room.
DEFAULT_MAX_RESULT_CHARS: Final = 20_000
#: The smallest cut worth making: the marker alone is ~150 characters.
MIN_RESULT_CHARS: Final = 500

#: Cluster: seconds between a standby replica's tries for a channel's lock, between checks
#: that a held lock's connection lives, and before a lost LISTEN connection is opened
#: again. Small against the 30 s a dead holder's Discord connection may take to move.
CLUSTER_POLL_SECONDS: Final = 5.0
