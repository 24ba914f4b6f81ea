"""The session tools: ``sessions_spawn``, ``agents_list``, ``sessions_list``,
``sessions_history`` and ``sessions_send``. The policy keeps them from sub-agents (below
``agent.subagents.maxSpawnDepth`` a sub-agent keeps ``sessions_spawn`` and ``agents_list``);
``sessions_spawn`` also refuses in a sub-agent session at the depth cap itself. The
sessions these tools see are those of ``agent.sessionTools.visibility``
(:mod:`gateway.subagents.visibility`); any other key answers as unknown.

Each tool reaches only the narrow service it needs through its :class:`ToolContext`: a
:class:`SpawnService` under :data:`SPAWNER`, a :class:`TurnQueue` under :data:`TURNS`, the
session store under :data:`SESSIONS`. The sub-agents setup registers them.
"""

from __future__ import annotations

from typing import Literal, Protocol

from pydantic import Field

from gateway.constants import MAX_LABEL_CHARS, MAX_TASK_CHARS
from gateway.sessions import (
    DEFAULT_HISTORY_LIMIT,
    MAX_HISTORY_LIMIT,
    SessionError,
    SessionNotFoundError,
    SessionStore,
)
from gateway.state import SessionRecord
from gateway.subagents.spawn import SpawnContext, SpawnRequest, SpawnResult, nested_forbidden
from gateway.subagents.visibility import SessionScope
from gateway.tools import (
    ServiceKey,
    Tool,
    ToolContext,
    ToolError,
    ToolOutput,
    ToolParams,
    ToolRegistry,
)
from lanes import LaneClosed, LaneFullError

#: Bounds that keep a single send from flooding a transcript or a prompt (a spawn's are
#: :data:`~gateway.constants.MAX_TASK_CHARS` and :data:`~gateway.constants.MAX_LABEL_CHARS`).
MAX_SEND_CHARS = 50_000


class SpawnService(Protocol):
    """What ``sessions_spawn`` and ``agents_list`` need: :class:`gateway.subagents.Spawner`."""

    async def spawn(self, requester: ToolContext, request: SpawnRequest) -> SpawnResult: ...

    def allowed_targets(self, agent_id: str) -> set[str]: ...


class TurnQueue(Protocol):
    """What ``sessions_send`` needs: queue a turn of another session (the chat runtime)."""

    def submit_turn(self, session: SessionRecord, text: str) -> object: ...


SPAWNER: ServiceKey[SpawnService] = ServiceKey("spawner")
TURNS: ServiceKey[TurnQueue] = ServiceKey("turns")
SESSIONS: ServiceKey[SessionStore] = ServiceKey("sessions")


class SpawnParams(ToolParams):
    task: str = Field(
        min_length=1,
        max_length=MAX_TASK_CHARS,
        pattern=r"\S",
        description="What the sub-agent should do; it sees only this text",
    )
    label: str | None = Field(
        default=None, max_length=MAX_LABEL_CHARS, description="A short name for the run"
    )
    agent_id: str | None = Field(
        default=None, description="Run under another agent id (see agents_list)"
    )
    model: str | None = Field(default=None, description="Model override, '<provider>/<model id>'")
    run_timeout_seconds: float | None = Field(
        default=None, ge=0, description="Abort the run after this many seconds; 0 = none"
    )
    cleanup: Literal["delete", "keep"] = Field(
        default="keep", description="'delete' archives the sub-agent session after its announce"
    )
    context: SpawnContext = Field(
        default="isolated",
        description=(
            "'isolated': the sub-agent sees only the task; 'fork': it starts with this "
            "conversation so far, then the task"
        ),
    )


class SessionsSpawnTool(Tool[SpawnParams]):
    name = "sessions_spawn"
    group = "sessions"
    params = SpawnParams
    description = (
        "Start a background sub-agent on a task. Returns at once with status 'accepted'; "
        "when the sub-agent finishes, its result comes back to you as a '[sub-agent "
        "completion]' message (from a chat, it is also posted there). Use it for long or "
        "slow work."
    )

    async def run(self, params: SpawnParams, ctx: ToolContext) -> ToolOutput:
        cap = ctx.settings.agent.subagents.max_spawn_depth
        if ctx.is_subagent and max(ctx.depth, 1) >= cap:
            error = nested_forbidden(max(ctx.depth, 1), cap)
            return ToolOutput.json({"status": "forbidden", "error": error}, is_error=True)
        request = SpawnRequest(
            task=params.task,
            label=params.label,
            agent_id=params.agent_id,
            model=params.model,
            run_timeout_seconds=params.run_timeout_seconds,
            cleanup=params.cleanup,
            context=params.context,
        )
        result = await ctx.service(SPAWNER).spawn(ctx, request)
        return ToolOutput.json(result.to_json(), is_error=result.status != "accepted")


class NoParams(ToolParams):
    pass


class AgentsListTool(Tool[NoParams]):
    name = "agents_list"
    group = "sessions"
    params = NoParams
    description = "List the agent ids this agent may target with sessions_spawn."

    async def run(self, params: NoParams, ctx: ToolContext) -> ToolOutput:
        settings = ctx.settings
        allowed = ctx.service(SPAWNER).allowed_targets(ctx.agent_id)
        agents = [
            {"id": agent_id, "name": settings.routing.agents[agent_id].name or agent_id}
            for agent_id in sorted(allowed)
        ]
        return ToolOutput.json({"agents": agents})


class SessionsListParams(ToolParams):
    include_subagents: bool = Field(default=False, description="Include sub-agent sessions")
    limit: int = Field(default=50, ge=1, le=500)


class SessionsListTool(Tool[SessionsListParams]):
    name = "sessions_list"
    group = "sessions"
    params = SessionsListParams
    description = "List sessions (conversations), most recent first."

    async def run(self, params: SessionsListParams, ctx: ToolContext) -> ToolOutput:
        store = ctx.service(SESSIONS)
        scope = SessionScope(store, ctx)
        records = await scope.listing(
            include_subagents=params.include_subagents, limit=params.limit
        )
        return ToolOutput.json({"sessions": [store.describe(record) for record in records]})


class SessionsHistoryParams(ToolParams):
    session_key: str = Field(
        min_length=1,
        max_length=512,
        description="The session key; or its sessionId, a runId, or a transcript path "
        "from a stats line (found even after the transcript was archived)",
    )
    limit: int = Field(default=DEFAULT_HISTORY_LIMIT, ge=1, le=MAX_HISTORY_LIMIT)
    include_tools: bool = False


class SessionsHistoryTool(Tool[SessionsHistoryParams]):
    name = "sessions_history"
    group = "sessions"
    params = SessionsHistoryParams
    description = "Read a session's recent messages (a sub-agent's, say, from its announce)."

    async def run(self, params: SessionsHistoryParams, ctx: ToolContext) -> ToolOutput:
        store = ctx.service(SESSIONS)
        try:
            where = await store.locate(params.session_key)
            if not await SessionScope(store, ctx).sees(where.session):
                raise SessionNotFoundError(params.session_key)  # exactly as an unknown one
            key = where.session.key
            messages = await store.history(
                key, limit=params.limit, include_tools=params.include_tools
            )
        except SessionError as exc:
            raise ToolError(str(exc)) from exc
        found: dict[str, object] = {"sessionKey": key, "messages": messages}
        if where.archived:
            found |= {"archivedAt": where.archived_at, "note": where.note()}
        return ToolOutput.json(found)


class SessionsSendParams(ToolParams):
    session_key: str = Field(min_length=1, max_length=512)
    message: str = Field(min_length=1, max_length=MAX_SEND_CHARS)


class SessionsSendTool(Tool[SessionsSendParams]):
    name = "sessions_send"
    group = "sessions"
    params = SessionsSendParams
    description = (
        "Queue a message into another session, as if its person had sent it; that session's "
        "reply goes to its own chat."
    )

    async def run(self, params: SessionsSendParams, ctx: ToolContext) -> ToolOutput:
        if params.session_key == ctx.session_key:
            raise ToolError("a session cannot send to itself (it would wait on its own turn)")
        try:
            session = await SessionScope(ctx.service(SESSIONS), ctx).require(params.session_key)
        except SessionError as exc:
            raise ToolError(str(exc)) from exc
        if session.is_subagent or session.archived:
            raise ToolError(f"session {session.key} does not take messages")
        try:
            ctx.service(TURNS).submit_turn(session, params.message)
        except LaneFullError as exc:
            raise ToolError(f"session {session.key} is busy; try again later") from exc
        except LaneClosed as exc:
            raise ToolError("the gateway is shutting down") from exc
        return ToolOutput.json({"status": "queued", "sessionKey": session.key})


def register_session_tools(registry: ToolRegistry) -> None:
    """Add the session tools to ``registry`` (after :func:`gateway.tools.default_registry`)."""
    for tool in (
        SessionsSpawnTool(),
        AgentsListTool(),
        SessionsListTool(),
        SessionsHistoryTool(),
        SessionsSendTool(),
    ):
        registry.register(tool)
