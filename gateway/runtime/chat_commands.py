"""Carrying out chat commands: ``/spawn``, ``/subagents list|info|log|stop``, ``/stop``, ``/help``.

Parsing lives in :mod:`gateway.runtime.commands`; each command here answers with one text
for the chat it came from.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gateway.agent import ToolContexts
from gateway.runtime.commands import HELP_TEXT, ChatCommand, CommandUsageError
from gateway.runtime.turns import ChatTurns
from gateway.sessions import SessionStore
from gateway.state import SessionRecord, StateDB
from gateway.subagents import (
    RunFinishedError,
    RunManager,
    RunNotFoundError,
    SpawnAccepted,
    Spawner,
    SpawnRequest,
    run_info,
    run_lines,
)

#: Runs of the conversation ``/subagents list`` shows, newest first.
LIST_RUNS = 10
#: Runs spawned by those (and by theirs) shown indented below them, at most.
LIST_DESCENDANTS = 40
#: Runs of a conversation a ``/subagents`` argument is matched against (and as many of
#: the runs they spawned).
MATCH_RUNS = 50
#: Transcript messages ``/subagents log`` shows, each cut to this many characters.
LOG_MESSAGES = 10
LOG_CHARS = 300


class ChatCommands:
    """Runs a parsed chat command in ``session`` and returns the answer."""

    def __init__(
        self,
        *,
        db: StateDB,
        store: SessionStore,
        turns: ChatTurns,
        spawner: Spawner,
        runs: RunManager,
        contexts: ToolContexts,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._db = db
        self._store = store
        self._turns = turns
        self._spawner = spawner
        self._runs = runs
        self._contexts = contexts
        self._clock = clock

    async def run(self, command: ChatCommand | CommandUsageError, session: SessionRecord) -> str:
        """The answer to ``command`` sent in ``session``."""
        if isinstance(command, CommandUsageError):
            return command.message
        if command.name == "help":
            return HELP_TEXT
        if command.name == "stop":
            turns, runs = await self.stop(session.key)
            return stop_answer(turns, runs)
        if command.name == "spawn":
            result = await self._spawner.spawn(
                self._contexts.for_session(session), SpawnRequest(task=command.argument)
            )
            if not isinstance(result, SpawnAccepted):
                return f"Not started: {result.error}"
            return f"Started sub-agent run {result.run_id[:8]}; its result will be posted here."
        return await self._subagents(command, session)

    async def stop(self, key: str) -> tuple[int, int]:
        """``/stop``: cancel the session's turns and its sub-agent runs (the cascade)."""
        turns = self._turns.stop(key)
        runs = await self._runs.stop_session(key)
        return turns, runs

    async def _subagents(self, command: ChatCommand, session: SessionRecord) -> str:
        runs = await self._db.runs.list(parent_session_key=session.key, limit=MATCH_RUNS)
        if command.action == "list":
            if not runs:
                return "No sub-agent runs in this conversation."
            shown = runs[:LIST_RUNS]
            below = await self._db.runs.below([run.run_id for run in shown], limit=LIST_DESCENDANTS)
            return "\n".join(run_lines([*shown, *below], self._clock()))
        # Runs the conversation's runs spawned are listed under them, so they answer too.
        below = await self._db.runs.below([r.run_id for r in runs], limit=MATCH_RUNS)
        prefix = command.argument.lower()
        matches = [r for r in [*runs, *below] if r.run_id.startswith(prefix)]
        if len(matches) != 1:
            found = "no" if not matches else "more than one"
            return f"{found.capitalize()} run of this conversation matches {command.argument!r}."
        run = matches[0]
        if command.action == "info":
            return run_info(run)
        if command.action == "log":
            lines = await self._store.history(run.child_session_key, limit=LOG_MESSAGES)
            text = "\n".join(f"{m.get('role')}: {str(m.get('content'))[:LOG_CHARS]}" for m in lines)
            return text or "The run's transcript is empty."
        # Counted first: a cancelled run also stops its runs itself, so which stop takes
        # which descendant is a race; the answer counts every run under it that is stopping.
        below = await self._db.runs.live_descendants(run.run_id)
        try:
            await self._runs.abort_tree(run.run_id)
        except RunFinishedError as exc:
            return str(exc)
        except RunNotFoundError:
            return f"No run {run.run_id}."
        spawned = len(below)
        tail = f" and {spawned} run{'s' if spawned != 1 else ''} it spawned" if spawned else ""
        return f"Stopping sub-agent run {run.run_id[:8]}{tail}."


def stop_answer(turns: int, runs: int) -> str:
    """``/stop``'s one line: what it stopped, in words."""
    if not turns and not runs:
        return "Nothing to stop: no reply or sub-agent is running here."
    parts = []
    if turns:
        parts.append("the reply in progress" if turns == 1 else f"{turns} replies in progress")
    if runs:
        parts.append(f"{runs} sub-agent{'s' if runs != 1 else ''}")
    return f"Stopped {' and '.join(parts)}."
