"""Sub-agent runs: spawn, run on the ``subagent`` lane, announce, archive, recover.

- :mod:`~gateway.subagents.spawn`: the policy and the record of a new run (``Spawner``);
- :mod:`~gateway.subagents.runner`: executing a run, from start or resumed;
- :mod:`~gateway.subagents.announce`: the announce step and message;
- :mod:`~gateway.subagents.manager`: lane jobs, abort, wait, close (``RunManager``);
- :mod:`~gateway.subagents.recovery`: what a previous process left;
- :mod:`~gateway.subagents.presenter`: how a run is shown;
- :mod:`~gateway.subagents.tools`: the session tools.
"""

from gateway.subagents.announce import Announcer, compose_announce
from gateway.subagents.child import ChildSessions
from gateway.subagents.errors import RunFinishedError, RunNotFoundError
from gateway.subagents.feed import RunFeed
from gateway.subagents.manager import RunManager
from gateway.subagents.presenter import run_info, run_json, run_line, run_name, run_view
from gateway.subagents.recovery import recover, settle_archives
from gateway.subagents.runner import RunRunner
from gateway.subagents.spawn import (
    SPAWN_FORBIDDEN_NESTED,
    SpawnAccepted,
    Spawner,
    SpawnRefused,
    SpawnRequest,
    SpawnResult,
    allowed_targets,
)
from gateway.subagents.tools import (
    SESSIONS,
    SPAWNER,
    TURNS,
    SpawnService,
    TurnQueue,
    register_session_tools,
)

__all__ = [
    "SESSIONS",
    "SPAWNER",
    "SPAWN_FORBIDDEN_NESTED",
    "TURNS",
    "Announcer",
    "ChildSessions",
    "RunFeed",
    "RunFinishedError",
    "RunManager",
    "RunNotFoundError",
    "RunRunner",
    "SpawnAccepted",
    "SpawnRefused",
    "SpawnRequest",
    "SpawnResult",
    "SpawnService",
    "Spawner",
    "TurnQueue",
    "allowed_targets",
    "compose_announce",
    "recover",
    "register_session_tools",
    "run_info",
    "run_json",
    "run_line",
    "run_name",
    "run_view",
    "settle_archives",
]
