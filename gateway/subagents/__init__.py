"""Sub-agent runs: spawn, run on the ``subagent`` lane, announce, archive, recover.

- :mod:`~gateway.subagents.spawn`: the policy and the record of a new run (``Spawner``);
- :mod:`~gateway.subagents.door`: the one door for runs started outside a chat (``SpawnDoor``);
- :mod:`~gateway.subagents.runner`: executing a run, from start or resumed;
- :mod:`~gateway.subagents.announce`: the announce step and message;
- :mod:`~gateway.subagents.ends`: where a final run's result goes on (``RunEnds``);
- :mod:`~gateway.subagents.manager`: lane jobs, abort, wait, close (``RunManager``);
- :mod:`~gateway.subagents.recovery`: what a previous process left;
- :mod:`~gateway.subagents.presenter`: how a run is shown;
- :mod:`~gateway.subagents.tools`: the session tools;
- :mod:`~gateway.subagents.completions`: results written into the requester's history;
- :mod:`~gateway.subagents.batches`: ``sessions_yield`` batches and their follow-up turn;
- :mod:`~gateway.subagents.orchestration`: the orchestration tools;
- :mod:`~gateway.subagents.control`: what the ``subagents`` tool does with a session's runs;
- :mod:`~gateway.subagents.inbox`: messages for running runs (steers).
- :mod:`~gateway.subagents.notices`: what replicas of a cluster tell each other of runs.

Each name is imported from its module on first use: ``herald runs show`` needs the
presenter alone, not the runner, the tools and what they import.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from gateway.subagents.announce import Announcer, compose_announce
    from gateway.subagents.batches import BatchCoordinator
    from gateway.subagents.child import ChildSessions
    from gateway.subagents.completions import COMPLETION_PREFIX, Completions
    from gateway.subagents.control import SubagentControl
    from gateway.subagents.door import SpawnDoor
    from gateway.subagents.ends import RunEnds
    from gateway.subagents.errors import RunFinishedError, RunNotFoundError
    from gateway.subagents.feed import RunFeed
    from gateway.subagents.inbox import RunInbox
    from gateway.subagents.manager import RunManager, StoppedTree
    from gateway.subagents.notices import RUN_ENDED, STEERS, Notices
    from gateway.subagents.orchestration import (
        SUBAGENT_RUNS,
        YIELDS,
        SubagentsService,
        YieldService,
        register_orchestration_tools,
    )
    from gateway.subagents.owner import Owner
    from gateway.subagents.presenter import (
        run_detail,
        run_info,
        run_json,
        run_lines,
        run_name,
        run_tree,
        run_view,
        tree_name,
    )
    from gateway.subagents.queueing import LaneQueue, YieldedRunQueue
    from gateway.subagents.recovery import recover, settle_archives
    from gateway.subagents.runner import RunnerParts, RunRunner
    from gateway.subagents.spawn import (
        SPAWN_FORBIDDEN_NESTED,
        Occurrence,
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

_HOME: Final = {
    "Announcer": "gateway.subagents.announce",
    "BatchCoordinator": "gateway.subagents.batches",
    "COMPLETION_PREFIX": "gateway.subagents.completions",
    "ChildSessions": "gateway.subagents.child",
    "Completions": "gateway.subagents.completions",
    "LaneQueue": "gateway.subagents.queueing",
    "Notices": "gateway.subagents.notices",
    "Occurrence": "gateway.subagents.spawn",
    "Owner": "gateway.subagents.owner",
    "RUN_ENDED": "gateway.subagents.notices",
    "RunEnds": "gateway.subagents.ends",
    "RunFeed": "gateway.subagents.feed",
    "RunFinishedError": "gateway.subagents.errors",
    "RunInbox": "gateway.subagents.inbox",
    "RunManager": "gateway.subagents.manager",
    "RunNotFoundError": "gateway.subagents.errors",
    "RunRunner": "gateway.subagents.runner",
    "RunnerParts": "gateway.subagents.runner",
    "SESSIONS": "gateway.subagents.tools",
    "SPAWNER": "gateway.subagents.tools",
    "SPAWN_FORBIDDEN_NESTED": "gateway.subagents.spawn",
    "STEERS": "gateway.subagents.notices",
    "SUBAGENT_RUNS": "gateway.subagents.orchestration",
    "SpawnAccepted": "gateway.subagents.spawn",
    "SpawnDoor": "gateway.subagents.door",
    "SpawnRefused": "gateway.subagents.spawn",
    "SpawnRequest": "gateway.subagents.spawn",
    "SpawnResult": "gateway.subagents.spawn",
    "SpawnService": "gateway.subagents.tools",
    "Spawner": "gateway.subagents.spawn",
    "StoppedTree": "gateway.subagents.manager",
    "SubagentControl": "gateway.subagents.control",
    "SubagentsService": "gateway.subagents.orchestration",
    "TURNS": "gateway.subagents.tools",
    "TurnQueue": "gateway.subagents.tools",
    "YIELDS": "gateway.subagents.orchestration",
    "YieldService": "gateway.subagents.orchestration",
    "YieldedRunQueue": "gateway.subagents.queueing",
    "allowed_targets": "gateway.subagents.spawn",
    "compose_announce": "gateway.subagents.announce",
    "recover": "gateway.subagents.recovery",
    "register_orchestration_tools": "gateway.subagents.orchestration",
    "register_session_tools": "gateway.subagents.tools",
    "run_detail": "gateway.subagents.presenter",
    "run_info": "gateway.subagents.presenter",
    "run_json": "gateway.subagents.presenter",
    "run_lines": "gateway.subagents.presenter",
    "run_name": "gateway.subagents.presenter",
    "run_tree": "gateway.subagents.presenter",
    "run_view": "gateway.subagents.presenter",
    "settle_archives": "gateway.subagents.recovery",
    "tree_name": "gateway.subagents.presenter",
}

__all__ = [
    "COMPLETION_PREFIX",
    "RUN_ENDED",
    "SESSIONS",
    "SPAWNER",
    "SPAWN_FORBIDDEN_NESTED",
    "STEERS",
    "SUBAGENT_RUNS",
    "TURNS",
    "YIELDS",
    "Announcer",
    "BatchCoordinator",
    "ChildSessions",
    "Completions",
    "LaneQueue",
    "Notices",
    "Occurrence",
    "Owner",
    "RunEnds",
    "RunFeed",
    "RunFinishedError",
    "RunInbox",
    "RunManager",
    "RunNotFoundError",
    "RunRunner",
    "RunnerParts",
    "SpawnAccepted",
    "SpawnDoor",
    "SpawnRefused",
    "SpawnRequest",
    "SpawnResult",
    "SpawnService",
    "Spawner",
    "StoppedTree",
    "SubagentControl",
    "SubagentsService",
    "TurnQueue",
    "YieldService",
    "YieldedRunQueue",
    "allowed_targets",
    "compose_announce",
    "recover",
    "register_orchestration_tools",
    "register_session_tools",
    "run_detail",
    "run_info",
    "run_json",
    "run_lines",
    "run_name",
    "run_tree",
    "run_view",
    "settle_archives",
    "tree_name",
]


# Defined for the interpreter alone: the type checker, seeing a module ``__getattr__``, would
# type any name imported from here as ``Any`` (a misspelt one too) instead of looking for it
# among the imports above.
if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        module = _HOME.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value
