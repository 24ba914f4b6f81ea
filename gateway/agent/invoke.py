"""Running one tool as if a session had called it: the HTTP API's ``/v1/tools/invoke``.

The session is the one named (an agent's main session exists on first use; any other must
exist); the tool must be in that session's effective tool set; the arguments are validated
against the tool's parameters. Each way to fail is a typed error the API maps to a status.
"""

from __future__ import annotations

from collections.abc import Callable

from gateway.agent.context import ToolContexts
from gateway.agent.profile import agents_above
from gateway.errors import HeraldError
from gateway.reload import SettingsHolder
from gateway.sessions import SessionKey, SessionStore
from gateway.state import RunRecord, RunsTable, SessionRecord
from gateway.tools import ToolOutput, ToolRegistry, tools_for_agent, tools_for_subagent


class InvokeError(HeraldError):
    """A tool call that cannot run; ``field`` names the offending input."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


class AgentNotFoundError(InvokeError):
    pass


class SessionNotFoundError(InvokeError):
    pass


class ToolNotAllowedError(InvokeError):
    pass


class ToolInvoker:
    """Runs a tool on behalf of a session (see the module docstring)."""

    def __init__(
        self,
        *,
        holder: SettingsHolder,
        store: SessionStore,
        runs: RunsTable,
        tools: Callable[[], ToolRegistry],
        contexts: ToolContexts,
    ) -> None:
        self._holder = holder
        self._store = store
        self._runs = runs
        self._tools = tools
        self._contexts = contexts
        # An agent's own tool set, with the settings and registry (and its version) it was
        # computed from: a reload replaces both objects, so identity says when it is stale.
        self._agent_tools: dict[str, tuple[object, object, int, frozenset[str]]] = {}

    def default_session_key(self) -> str:
        """The default agent's main session: where a call without ``sessionKey`` runs."""
        return str(SessionKey.main(self._holder.current.routing.default_agent))

    async def session(self, key: SessionKey) -> SessionRecord:
        """The session a call names; raises :class:`AgentNotFoundError` or
        :class:`SessionNotFoundError`."""
        if key.agent_id not in self._holder.current.routing.agents:
            raise AgentNotFoundError(f"no agent {key.agent_id}", field="sessionKey")
        if key.session_kind == "main":  # an agent's main session exists on first use
            return await self._store.ensure(key)
        found = await self._store.get(str(key))
        if found is None:
            raise SessionNotFoundError(f"no session {key}", field="sessionKey")
        return found

    async def allowed(self, session: SessionRecord) -> frozenset[str]:
        """The session's effective tool set."""
        settings = self._holder.current
        registry = self._tools()
        if not session.is_subagent:
            cached = self._agent_tools.get(session.agent_id)
            if (
                cached is not None
                and cached[0] is settings
                and cached[1] is registry
                and cached[2] == registry.version
            ):
                return cached[3]
            names = tools_for_agent(settings, session.agent_id, registry)
            self._agent_tools[session.agent_id] = (settings, registry, registry.version, names)
            return names
        run = await self._run_of(session)
        if run is None:
            return tools_for_subagent(settings, session.agent_id, session.agent_id, registry)
        lineage = (
            agents_above(await self._runs.lineage(run.run_id)) if run.request.depth > 1 else ()
        )
        return tools_for_subagent(
            settings,
            run.request.requester_agent_id,
            run.request.agent_id,
            registry,
            lineage=lineage,
        )

    async def _run_of(self, session: SessionRecord) -> RunRecord | None:
        if not session.is_subagent:
            return None
        runs = await self._runs.list(child_session_key=session.key, limit=1)
        return runs[0] if runs else None

    async def invoke(self, key: SessionKey, tool: str, args: object) -> ToolOutput:
        """Validate and run ``tool`` with ``args`` from session ``key``.

        Raises :class:`InvokeError` subclasses, ``UnknownToolError`` and
        ``ToolArgumentsError``; a tool's own failure is an error :class:`ToolOutput`.
        """
        session = await self.session(key)
        registry = self._tools()
        params = registry.validate(tool, args)
        if tool not in await self.allowed(session):
            raise ToolNotAllowedError(
                f"tool {tool!r} is not allowed in {session.key}", field="tool"
            )
        run = await self._run_of(session)
        ctx = (
            self._contexts.for_session(session)
            if run is None
            else self._contexts.for_session(session, run_id=run.run_id, depth=run.request.depth)
        )
        return await registry.execute(tool, params, ctx)
