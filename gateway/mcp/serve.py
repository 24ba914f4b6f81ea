"""Herald as an MCP server (``mcp.serve``): Streamable HTTP at ``mcp.serve.path`` on the
gateway's own port, behind the same bearer token as the HTTP API.

Built on the SDK's server side (``MCPServer``, stateless Streamable HTTP with JSON answers:
every call is one POST, so nothing outlives a request). The SDK's transport is an ASGI app;
:func:`gateway.mcp.asgi.asgi_bridge` hands it each aiohttp request. Tools:

- ``spawn`` {task, label?, agentId?, model?, runTimeoutSeconds?, to?}: a sub-agent run whose
  announce goes to the chat target ``to`` (its requester is that chat's own session, so the
  agent there sees the completion), or to the default agent's main session;
- ``runs_list`` {status?, limit?}, ``run_get`` {runId}, ``run_wait`` {runId,
  timeoutSeconds ≤ 300} (the run, with its result once final), ``run_abort`` {runId};
- ``sessions_list``, ``session_history`` {sessionKey, limit?}.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any, Literal

import orjson
from aiohttp import web
from aiohttp.typedefs import Handler
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from gateway.mcp.asgi import MANAGER, asgi_bridge
from gateway.parts.state import RUN_RECORDS, SESSION_STORE
from gateway.reload import settings_of
from gateway.schema.targets import ChatTargetError
from gateway.sessions import (
    SessionNotFoundError,
    SessionRefError,
    session_view,
)
from gateway.settings import HeraldSettings
from gateway.subagents import (
    RunFinishedError,
    RunNotFoundError,
    SpawnAccepted,
    SpawnRequest,
    run_view,
)
from gateway.subagents.setup import RUN_CONTROL, SUBAGENTS

logger = logging.getLogger(__name__)

#: The longest ``run_wait`` (an HTTP request stays open that long).
MAX_WAIT_SECONDS = 300
RunStatus = Literal[
    "queued", "running", "announcing", "done", "error", "timeout", "cancelled", "interrupted"
]


def _json(model: Any) -> dict[str, Any]:
    data: dict[str, Any] = orjson.loads(model.wire_json())
    return data


def build_server(app: web.Application) -> MCPServer:
    """Herald's MCP server over the services of ``app`` (read at each call)."""
    server = MCPServer(
        "herald",
        instructions=(
            "Hand work to Herald's background agents with spawn; the result is announced in "
            "the chat you name with `to` (slack:C0123, discord:<id>, webchat:<clientId>). "
            "run_wait waits for a run's result."
        ),
    )

    @server.tool()
    async def spawn(
        task: Annotated[str, Field(min_length=1, description="What the sub-agent should do.")],
        label: str | None = None,
        agentId: str | None = None,  # noqa: N803 - the wire's name
        model: str | None = None,
        runTimeoutSeconds: Annotated[float, Field(ge=0)] | None = None,  # noqa: N803
        to: Annotated[
            str | None,
            Field(
                description="Chat target for the announce: slack:C0123[/<thread ts>], "
                "discord:<channel id>, webchat:<clientId>. Default: the default agent's main "
                "session."
            ),
        ] = None,
    ) -> dict[str, Any]:
        """Start a background sub-agent run; returns at once with its runId."""
        door = app[SUBAGENTS].door
        request = SpawnRequest(
            task=task,
            label=label,
            agent_id=agentId,
            model=model,
            run_timeout_seconds=runTimeoutSeconds,
        )
        try:
            result = await door.spawn(door.target(to) if to is not None else None, request)
        except ChatTargetError as exc:
            raise ToolError(f"to: {exc}") from None
        if not isinstance(result, SpawnAccepted):
            raise ToolError(f"{result.status}: {result.to_json().get('error', '')}")
        return result.to_json()

    @server.tool()
    async def runs_list(
        status: RunStatus | None = None,
        limit: Annotated[int, Field(ge=1, le=200)] = 50,
    ) -> dict[str, Any]:
        """Sub-agent runs, newest first."""
        statuses = [status] if status is not None else None
        runs = await app[RUN_RECORDS].list(statuses=statuses, limit=limit)
        return {"runs": [_json(run_view(run)) for run in runs]}

    @server.tool()
    async def run_get(runId: str) -> dict[str, Any]:  # noqa: N803
        """One run: status, timestamps, usage, cost, result, announce."""
        run = await app[RUN_RECORDS].get(runId)
        if run is None:
            raise ToolError(f"no run {runId!r}")
        return _json(run_view(run))

    @server.tool()
    async def run_wait(
        runId: str,  # noqa: N803
        timeoutSeconds: Annotated[float, Field(ge=0, le=MAX_WAIT_SECONDS)] = 60,  # noqa: N803
    ) -> dict[str, Any]:
        """Wait until a run is final (at most timeoutSeconds); the run, with its result
        once final."""
        records = app[RUN_RECORDS]
        run = await records.get(runId)
        if run is None:
            raise ToolError(f"no run {runId!r}")
        if not run.progress.finished and timeoutSeconds > 0:
            try:
                run = await asyncio.wait_for(app[SUBAGENTS].manager.wait(runId), timeoutSeconds)
            except TimeoutError:
                run = await records.get(runId) or run
        return _json(run_view(run))

    @server.tool()
    async def run_abort(runId: str) -> dict[str, Any]:  # noqa: N803
        """Stop a queued or running run and the runs under it (announced cancelled)."""
        try:
            stopped = await app[RUN_CONTROL].abort_tree(runId)
        except RunNotFoundError:
            raise ToolError(f"no run {runId!r}") from None
        except RunFinishedError as exc:
            raise ToolError(str(exc)) from None
        return _json(run_view(stopped.run))

    @server.tool()
    async def sessions_list(
        limit: Annotated[int, Field(ge=1, le=500)] = 100,
    ) -> dict[str, Any]:
        """The sessions people talk in, most recently updated first."""
        store = app[SESSION_STORE]
        records = await store.list(limit=limit)
        return {"sessions": [_json(session_view(r, store.current_path(r))) for r in records]}

    @server.tool()
    async def session_history(
        sessionKey: str,  # noqa: N803
        limit: Annotated[int, Field(ge=1, le=200)] = 20,
    ) -> dict[str, Any]:
        """The last messages of a session, oldest first."""
        store = app[SESSION_STORE]
        try:
            where = await store.locate(sessionKey)
        except (SessionNotFoundError, SessionRefError):
            raise ToolError(f"no session {sessionKey!r}") from None
        lines = await store.history(where.session.key, limit=limit)
        messages = [{"role": m.get("role"), "content": m.get("content")} for m in lines]
        return {"sessionKey": where.session.key, "messages": messages}

    return server


async def mcp_endpoint(app: web.Application) -> AsyncIterator[None]:
    """Run the SDK's session manager while the gateway runs (``mcp.serve.enabled``)."""
    server = build_server(app)
    settings = settings_of(app)
    # Builds the SDK's session manager (its Starlette app is not used: aiohttp serves).
    server.streamable_http_app(
        streamable_http_path=settings.mcp.serve.path,
        stateless_http=True,
        json_response=True,
        host=settings.gateway.host,
    )
    manager = server.session_manager
    async with manager.run():
        app[MANAGER] = manager
        logger.info("mcp endpoint ready", extra={"path": settings.mcp.serve.path})
        yield


def add_endpoint(
    app: web.Application, settings: HeraldSettings, guard: Callable[[Handler], Handler]
) -> None:
    """The route (every method) and the session manager's lifetime on ``app``.

    The route checks the bearer token itself with ``guard`` (the app's): it never depends
    on the app's list of public paths (``herald config check`` refuses a path that collides
    with another route anyway).
    """
    app.router.add_route("*", settings.mcp.serve.path, guard(asgi_bridge))
    app.cleanup_ctx.append(mcp_endpoint)
