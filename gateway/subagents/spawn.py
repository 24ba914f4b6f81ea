"""``sessions_spawn``'s core: decide whether a spawn may go ahead, record it, queue it.

:class:`Spawner` checks the request against the policy (a sub-agent session spawns only
below ``agent.subagents.maxSpawnDepth``; a session has at most
``agent.subagents.maxChildrenPerSession`` runs not yet final; another agent only if
``subagents.allowAgents`` names it; a model override that names an unknown model is ignored
with a warning), records the child session and the run — with the requester's origin
captured now, its depth, its parent run and, for ``context: "fork"``, a copy of the
requester's conversation — and queues the run. It never waits for the run. The answer is a
typed :class:`SpawnAccepted` or :class:`SpawnRefused`. A scheduled :class:`Occurrence` is
recorded on the run, and its job's records written in the run's own transaction.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal

from gateway.agent import resolve_agent, subagent_model_ref
from gateway.agent.context_window import cap_messages
from gateway.llm import ChatMessage
from gateway.reload import SettingsHolder
from gateway.sessions import (
    INTERRUPTED_TOOL_RESULT,
    SessionError,
    SessionKey,
    SessionStore,
    new_uuid,
)
from gateway.settings import HeraldSettings
from gateway.state import (
    ChildLimitError,
    RunContext,
    RunProgress,
    RunRecord,
    RunRequest,
    SessionRecord,
    StateDB,
    StateError,
)
from gateway.state.connection import Connection
from gateway.subagents.child import spawned_event
from gateway.subagents.feed import RunFeed
from gateway.subagents.manager import RunManager
from gateway.tools import ToolContext
from lanes import LaneClosed

logger = logging.getLogger(__name__)

SPAWN_FORBIDDEN_NESTED = "sessions_spawn is not allowed from sub-agent sessions"
SHUTTING_DOWN = "the gateway is shutting down; spawn refused"
FORK_EMPTY = (
    "context 'fork' starts the sub-agent with this session's conversation, but it has no "
    "messages yet; use context 'isolated'"
)
#: The result a forked child sees for the calls its requester's turn had open (its own
#: ``sessions_spawn`` among them).
FORK_OPEN_CALL = "(still running in the conversation this copy was forked from)"

SpawnContext = RunContext


def nested_forbidden(depth: int, cap: int) -> str:
    """Why a sub-agent session at ``depth`` may not spawn under a depth cap of ``cap``."""
    if depth <= 1:
        return SPAWN_FORBIDDEN_NESTED
    return f"sessions_spawn is not allowed at depth {depth}: agent.subagents.maxSpawnDepth is {cap}"


def too_many_children(limit: int) -> str:
    return (
        f"this session already has {limit} sub-agent runs that have not finished "
        "(agent.subagents.maxChildrenPerSession); wait for some to end before spawning more"
    )


def forked_conversation(messages: list[ChatMessage]) -> list[ChatMessage]:
    """What a forked child starts with: the requester's recent conversation, the calls its
    turn still has open answered with :data:`FORK_OPEN_CALL` instead of "interrupted"."""
    out = messages[cap_messages(messages) :]
    index = len(out)
    while index > 0 and out[index - 1].role == "tool":
        index -= 1
    return out[:index] + [
        replace(m, content=FORK_OPEN_CALL, is_error=False)
        if m.content == INTERRUPTED_TOOL_RESULT
        else m
        for m in out[index:]
    ]


@dataclass(frozen=True, slots=True)
class SpawnRequest:
    task: str
    label: str | None = None
    agent_id: str | None = None
    model: str | None = None
    run_timeout_seconds: float | None = None
    cleanup: Literal["delete", "keep"] = "keep"
    #: ``fork``: the child starts with the requester's conversation, then the task.
    context: SpawnContext = "isolated"


@dataclass(frozen=True, slots=True)
class Occurrence:
    """The scheduled occurrence a run is for: its job and due time, recorded on the run, and
    the job's own records of it, written in the run's own transaction so that a crash (or a
    failed write) keeps both or neither."""

    job_id: str
    at: float
    #: Writes the job's records of the occurrence (given the new run's id) in the spawn's
    #: transaction; what it raises rolls the spawn back whole.
    write: Callable[[Connection, str], None]


@dataclass(frozen=True, slots=True)
class SpawnAccepted:
    """The run is recorded and queued."""

    run_id: str
    child_session_key: str
    #: Set when the request named a model: whether the run uses it.
    model_applied: bool | None = None
    warning: str | None = None

    @property
    def status(self) -> Literal["accepted"]:
        return "accepted"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "status": "accepted",
            "runId": self.run_id,
            "childSessionKey": self.child_session_key,
        }
        if self.model_applied is not None:
            out["modelApplied"] = self.model_applied
        if self.warning is not None:
            out["warning"] = self.warning
        return out


@dataclass(frozen=True, slots=True)
class SpawnRefused:
    """The run was not started; ``error`` says why."""

    status: Literal["forbidden", "error"]
    error: str

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "error": self.error}


SpawnResult = SpawnAccepted | SpawnRefused


def allowed_targets(settings: HeraldSettings, agent_id: str) -> set[str]:
    """Agent ids ``agent_id`` may spawn: itself, plus ``subagents.allowAgents``."""
    agent = settings.routing.agents.get(agent_id)
    allowed = {agent_id}
    if agent is None:
        return allowed
    if "*" in agent.subagents.allow_agents:
        return set(settings.routing.agents)
    return allowed | (set(agent.subagents.allow_agents) & set(settings.routing.agents))


class Spawner:
    """Validates, records and queues sub-agent runs (see the module docstring)."""

    def __init__(
        self,
        *,
        holder: SettingsHolder,
        db: StateDB,
        store: SessionStore,
        manager: RunManager,
        feed: RunFeed,
        clock: Callable[[], float] = time.time,
        spawning: Callable[[str], None] = lambda requester_run_id: None,
    ) -> None:
        self._holder = holder
        self._db = db
        self._store = store
        self._manager = manager
        self._feed = feed
        self._clock = clock
        #: Told a requester run's id before its child is recorded (completions may then be
        #: routed to it: :meth:`gateway.subagents.Completions.spawned`).
        self._spawning = spawning

    def __repr__(self) -> str:
        return f"<Spawner {self._manager!r}>"

    def allowed_targets(self, agent_id: str) -> set[str]:
        """Agent ids ``agent_id`` may spawn (for ``agents_list``)."""
        return allowed_targets(self._holder.current, agent_id)

    async def spawn(
        self,
        requester: ToolContext,
        request: SpawnRequest,
        *,
        occurrence: Occurrence | None = None,
    ) -> SpawnResult:
        """Record and queue a run for ``requester`` (for a scheduled ``occurrence``, recorded
        with it: an isolated spawn only); returns at once."""
        try:
            return await self._spawn(requester, request, occurrence)
        except (OSError, StateError, SessionError) as exc:
            logger.error("spawn could not be recorded", extra={"error": str(exc)})
            return SpawnRefused("error", f"the run could not be recorded: {exc}")
        except LaneClosed:
            return SpawnRefused("error", SHUTTING_DOWN)

    def _decide(
        self,
        settings: HeraldSettings,
        requester: ToolContext,
        requester_run: RunRecord | None,
        request: SpawnRequest,
    ) -> SpawnRefused | tuple[str, str, bool | None, str | None]:
        """The policy: a refusal, or (target agent, model ref, model applied, warning)."""
        if requester.is_subagent:
            cap = settings.agent.subagents.max_spawn_depth
            # A sub-agent session without a run cannot be placed in a tree: it spawns nothing.
            depth = requester_run.request.depth if requester_run is not None else cap
            if depth >= cap:
                return SpawnRefused("forbidden", nested_forbidden(depth, cap))
        if self._manager.closing:
            return SpawnRefused("error", SHUTTING_DOWN)
        target_id = request.agent_id or requester.agent_id
        if target_id not in settings.routing.agents:
            known = ", ".join(settings.agent_ids())
            return SpawnRefused("error", f"unknown agent {target_id!r} (agents: {known})")
        if target_id != requester.agent_id:
            allowed = allowed_targets(settings, requester.agent_id)
            if target_id not in allowed:
                names = ", ".join(sorted(allowed)) or requester.agent_id
                return SpawnRefused(
                    "forbidden",
                    f"agent {requester.agent_id!r} may not spawn {target_id!r}; allowed: {names}",
                )
        model_ref = subagent_model_ref(settings, resolve_agent(settings, target_id))
        if request.model is None:
            return target_id, model_ref, None, None
        problem = settings.model_ref_problem(request.model)
        if problem is None:
            return target_id, request.model, True, None
        warning = f"model {request.model!r} ignored ({problem}); using {model_ref}"
        return target_id, model_ref, False, warning

    async def _requester_run(self, requester: ToolContext) -> RunRecord | None:
        """The run whose session asks (None for a person's session)."""
        if not requester.is_subagent:
            return None
        if requester.run_id is not None:
            return await self._db.runs.get(requester.run_id)
        runs = await self._db.runs.list(child_session_key=requester.session_key, limit=1)
        return runs[0] if runs else None

    async def _spawn(
        self, requester: ToolContext, request: SpawnRequest, occurrence: Occurrence | None
    ) -> SpawnResult:
        settings = self._holder.current
        requester_run = await self._requester_run(requester)
        decision = self._decide(settings, requester, requester_run, request)
        if isinstance(decision, SpawnRefused):
            return decision
        target_id, model_ref, model_applied, warning = decision
        timeout = (
            request.run_timeout_seconds
            if request.run_timeout_seconds is not None
            else settings.agent.subagents.run_timeout_seconds
        )
        parent = await self._store.require(requester.session_key)
        limit = settings.agent.subagents.max_children_per_session
        forked: list[ChatMessage] = []
        if request.context == "fork" and occurrence is not None:
            return SpawnRefused("error", "a scheduled occurrence starts an isolated run only")
        if request.context == "fork":
            # Checked before the conversation is copied; the insert checks again.
            if await self._db.runs.live_children(parent.key) >= limit:
                return SpawnRefused("error", too_many_children(limit))
            forked = forked_conversation(await self._store.chat_messages(parent.key))
            if not forked:
                return SpawnRefused("error", FORK_EMPTY)
        origin = parent.origin  # captured now, never re-read
        child_key = SessionKey.subagent(target_id)
        new_child: SessionRecord | None = None
        if forked:
            # The copy is written before the run exists: one the disk refused must not run.
            child = await self._store.ensure(
                child_key,
                parent_key=parent.key,
                label=request.label,
                model=model_ref,
                origin=origin,
                fresh=True,
            )
            await self._store.append_event(
                child, "forked", {"sessionKey": parent.key, "messages": len(forked)}
            )
            for message in forked:
                await self._store.append_message(child, message)
            await self._store.sync(child)
        else:
            # Recorded with the run, in its transaction. Its transcript is begun by its runner,
            # off the accept path: the run row is the durable record of the spawn.
            child = new_child = self._store.new_record(
                child_key,
                parent_key=parent.key,
                label=request.label,
                model=model_ref,
                origin=origin,
            )
        run = RunRecord(
            run_id=new_uuid(),
            child_session_key=child.key,
            child_session_id=child.session_id,
            request=RunRequest(
                requester_agent_id=requester.agent_id,
                agent_id=target_id,
                task=request.task,
                parent_session_key=parent.key,
                label=request.label,
                model=model_ref,
                model_applied=model_applied is not False,
                cleanup=request.cleanup,
                run_timeout_seconds=timeout,
                origin=origin,
                context=request.context,
                parent_run_id=requester_run.run_id if requester_run is not None else None,
                depth=requester_run.request.depth + 1 if requester_run is not None else 1,
                job_id=occurrence.job_id if occurrence is not None else None,
                occurrence_at=occurrence.at if occurrence is not None else None,
            ),
            progress=RunProgress(
                created_at=self._clock(),
                transcript_path=str(self._store.transcript_path(child)),
            ),
        )
        also = _recording(occurrence, run.run_id) if occurrence is not None else None
        if requester_run is not None:
            self._spawning(requester_run.run_id)
        try:
            if new_child is None:
                await self._db.runs.insert(run, max_live_siblings=limit)
            else:
                await self._db.runs.insert_spawn(run, new_child, max_live_siblings=limit, also=also)
        except ChildLimitError:  # another spawn of this session took the last place
            if new_child is None:
                await self._store.archive(child.key)
            return SpawnRefused("error", too_many_children(limit))
        if new_child is not None:
            self._store.adopt(new_child)  # its runner begins the transcript
        else:
            await self._store.append_event(child, *spawned_event(run, task=True))
        self._feed.publish(run)
        await self._store.append_event(parent, *spawned_event(run, task=False))
        self._manager.submit(run.run_id)
        logger.info(
            "sub-agent spawned",
            extra={
                "run_id": run.run_id,
                "agent": target_id,
                "model": model_ref,
                "depth": run.request.depth,
            },
        )
        return SpawnAccepted(run.run_id, child.key, model_applied, warning)


def _recording(occurrence: Occurrence, run_id: str) -> Callable[[Connection], None]:
    """The occurrence's own write, for the spawn's transaction of run ``run_id``."""

    def write(conn: Connection) -> None:
        occurrence.write(conn, run_id)

    return write
