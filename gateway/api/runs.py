"""``POST /v1/tools/invoke`` and the sub-agent run routes.

- ``POST /v1/tools/invoke`` runs a tool as if called from a session (``sessionKey``, or
  ``to``: the chat's own session of a chat target; default: the default agent's main
  session) → ``{"ok", "result"}``; unknown tool 404, a tool the session may
  not use 403, invalid arguments 400 naming the JSON path of the problem (``args.task``).
- ``GET /v1/runs``, ``GET /v1/runs/{runId}`` (with ``children``: the runs its session
  spawned, oldest first), ``POST /v1/runs/{runId}/abort`` (202, and the runs spawned under
  it stop too; 409 once the run has finished).

A run's ``transcriptPath`` is where its transcript is now, and ``archivedAt`` says when its
session was archived (:meth:`SessionStore.location`), so an answer never points at the
name a transcript had before it was renamed.

Requests arrive validated (:mod:`gateway.api.requests`); answers are
:mod:`gateway.shapes` shapes.
"""

from __future__ import annotations

from typing import TypeVar

from aiohttp import web

from gateway.agent import InvokeError, ToolNotAllowedError
from gateway.agent import SessionNotFoundError as NoSessionError
from gateway.api.errors import json_error
from gateway.api.requests import InvokeRequest, RunPath, RunsQuery
from gateway.api.routing import reply
from gateway.parts.agent import TOOL_INVOKER
from gateway.parts.channels import TARGET_SESSIONS
from gateway.parts.state import RUN_RECORDS, SESSION_STORE
from gateway.schema.targets import ChatTargetError
from gateway.sessions import SessionKey, SessionKeyError, SessionStore
from gateway.shapes import InvokeResult, Run, RunDetail, RunList
from gateway.state import RunRecord
from gateway.subagents import RunFinishedError, RunNotFoundError, run_detail, run_view
from gateway.subagents.setup import RUN_CONTROL
from gateway.tools import ToolArgumentsError, UnknownToolError

V = TypeVar("V", bound=Run)


async def _located(store: SessionStore, run: RunRecord, view: V) -> V:
    """``view`` with the transcript where it is now (archiving renames it) and when the
    run's session was archived."""
    session = await store.get(run.child_session_key)
    if session is None:
        return view
    where = store.location(session, run.run_id)
    path = str(where.path) if where.path is not None else None
    return view.model_copy(update={"transcript_path": path, "archived_at": where.archived_at})


async def _view(store: SessionStore, run: RunRecord) -> Run:
    return await _located(store, run, run_view(run))


async def _detail(request: web.Request, run: RunRecord) -> RunDetail:
    store = request.app[SESSION_STORE]
    children = await request.app[RUN_RECORDS].list(parent_run_id=run.run_id, oldest_first=True)
    return await _located(store, run, run_detail(run, children))


async def invoke(request: web.Request, body: InvokeRequest) -> web.Response:
    invoker = request.app[TOOL_INVOKER]
    key = body.session_key
    if body.to is not None:
        if key is not None:
            message = "give sessionKey or to (a chat target), not both"
            return json_error(400, "invalid_field", message, field="to")
        try:
            key = SessionKey.parse((await request.app[TARGET_SESSIONS](body.to)).key)
        except ChatTargetError as exc:
            return json_error(400, "invalid_field", str(exc), field="to")
    if key is None:
        try:
            key = SessionKey.parse(invoker.default_session_key())
        except SessionKeyError as exc:
            return json_error(400, "invalid_session_key", exc.reason, field="sessionKey")
    try:
        output = await invoker.invoke(key, body.tool, body.args)
    except UnknownToolError:
        return json_error(404, "unknown_tool", f"no tool {body.tool!r}", field="tool")
    except ToolArgumentsError as exc:
        return json_error(400, "invalid_args", exc.message, field=exc.path)
    except ToolNotAllowedError as exc:
        return json_error(403, "tool_not_allowed", str(exc), field=exc.field)
    except NoSessionError as exc:
        return json_error(404, "session_not_found", str(exc), field=exc.field)
    except InvokeError as exc:
        return json_error(404, "agent_not_found", str(exc), field=exc.field)
    return reply(InvokeResult(ok=not output.is_error, result=output.result_json()))


async def list_runs(request: web.Request, query: RunsQuery) -> web.Response:
    runs = await request.app[RUN_RECORDS].list(
        statuses=query.status, parent_session_key=query.session_key, limit=query.limit
    )
    store = request.app[SESSION_STORE]
    return reply(RunList(runs=[await _view(store, run) for run in runs]))


async def get_run(request: web.Request, path: RunPath) -> web.Response:
    run = await request.app[RUN_RECORDS].get(path.run_id)
    if run is None:
        return json_error(404, "run_not_found", "no such run", field="runId")
    return reply(await _detail(request, run))


async def abort_run(request: web.Request, path: RunPath) -> web.Response:
    try:
        run = (await request.app[RUN_CONTROL].abort_tree(path.run_id)).run
    except RunNotFoundError:
        return json_error(404, "run_not_found", "no such run", field="runId")
    except RunFinishedError as exc:
        return json_error(409, "run_finished", str(exc), field="runId")
    return reply(await _view(request.app[SESSION_STORE], run), status=202)
