"""Carrying out chat commands: ``/spawn``, ``/subagents list|info|log|stop``, ``/stop``,
``/schedules``, ``/unschedule``, ``/help``.

Parsing lives in :mod:`gateway.runtime.commands`; each command here answers with one text
for the chat it came from.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gateway.agent import ToolContexts
from gateway.runtime.commands import HELP_TEXT, ChatCommand, CommandUsageError
from gateway.runtime.turns import ChatTurns
from gateway.schedules.service import ChatScope, ScheduleError, Schedules
from gateway.schedules.views import job_line
from gateway.sessions import SessionStore, target_of_origin
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
#: Transcript messages ``/subagents log`` shows, each cut (at a word) to this many characters.
LOG_MESSAGES = 10
LOG_CHARS = 300
#: How the announce turn's user message begins (``templates/announce.md``): Herald's own
#: question to the sub-agent, not part of the run's conversation, so the log leaves it out.
ANNOUNCE_PROMPT_HEAD = "[announce]"


def clip(text: str, limit: int = LOG_CHARS) -> str:
    """``text`` on one line, cut at the last word boundary before ``limit`` characters."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat[: limit - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut).rstrip(" ,.;:") + "…"


def log_lines(messages: list[dict[str, object]]) -> list[str]:
    """A run's conversation for ``/subagents log``: its messages by role, the announce
    prompt left out and the reply to it shown as the announce."""
    lines: list[str] = []
    after_prompt = False
    for message in messages:
        role, content = str(message.get("role")), str(message.get("content") or "")
        if role == "user" and content.startswith(ANNOUNCE_PROMPT_HEAD):
            after_prompt = True
            continue
        if after_prompt and role == "assistant":
            role, after_prompt = "announce", False
        lines.append(f"{role}: {clip(content)}")
    return lines


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
        schedules: Callable[[], Schedules | None] = lambda: None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        #: Looked up at each command: the scheduler starts after the chat does.
        self._schedules = schedules
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
        if command.name == "unknown":
            return f"Unknown command /{command.argument}; see /help for the commands."
        if command.name == "stop":
            turns, runs = await self.stop(session.key)
            return stop_answer(turns, runs)
        if command.name in ("schedules", "unschedule"):
            return await self._schedule_command(command, session)
        if command.name == "spawn":
            result = await self._spawner.spawn(
                self._contexts.for_session(session), SpawnRequest(task=command.argument)
            )
            if not isinstance(result, SpawnAccepted):
                return f"Not started: {result.error}"
            return f"Started sub-agent run {result.run_id[:8]}; its result will be posted here."
        return await self._subagents(command, session)

    async def _schedule_command(self, command: ChatCommand, session: SessionRecord) -> str:
        service = self._schedules()
        if service is None:
            return "Scheduled jobs are not available yet; try again in a moment."
        scope = ChatScope(session.key, target_of_origin(session.origin))
        if command.name == "unschedule":
            try:
                job = await service.cancel_for_chat(command.argument, scope)
            except ScheduleError as exc:
                return f"Not cancelled: {exc}"
            return f"Cancelled scheduled job {job.job_id}."
        jobs = await service.chat_jobs(scope)
        if not jobs:
            return "No scheduled jobs in this chat."
        return "Scheduled jobs:\n" + "\n".join(job_line(job) for job in jobs)

    async def stop(self, key: str) -> tuple[int, int]:
        """``/stop``: cancel the session's turns and its sub-agent runs (the cascade)."""
        turns = self._turns.stop(key)
        runs = await self._runs.stop_session(key)
        return turns, runs

    async def _subagents(self, command: ChatCommand, session: SessionRecord) -> str:
        runs = await self._db.runs.list(parent_session_key=session.key, limit=MATCH_RUNS)
        # This conversation: `/new` keeps the session's key and starts it again (its
        # created_at moves), so runs the conversation before it spawned are not its own.
        runs = [run for run in runs if run.progress.created_at >= session.created_at]
        if command.action == "stop" and command.argument.lower() == "all":
            stopped = await self._runs.stop_session(session.key)
            if not stopped:
                return "No sub-agent run of this conversation is running."
            return f"Stopping {plural(stopped, 'sub-agent run')} (the runs they spawned included)."
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
            # One more than shown, so the announce prompt left out costs no line.
            messages = await self._store.history(run.child_session_key, limit=LOG_MESSAGES + 1)
            lines = log_lines(messages)[-LOG_MESSAGES:]
            return "\n".join(lines) or "The run's transcript is empty."
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


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def stop_answer(turns: int, runs: int) -> str:
    """``/stop``'s answer in words: what it stopped, or that nothing was running."""
    if not turns and not runs:
        return "Nothing to stop: no reply is in progress and no sub-agent is running here."
    stopped = []
    if turns:
        stopped.append("the reply in progress" if turns == 1 else f"{turns} replies in progress")
    if runs:
        stopped.append(plural(runs, "sub-agent"))
    return f"Stopped {' and '.join(stopped)}."
