"""``POST /v1/tools/invoke`` and the sub-agent run routes (DESIGN §9).

- ``POST /v1/tools/invoke`` ``{"tool", "args", "sessionKey"?}`` runs a tool as if called
  from that session (default: the default agent's main session) → ``{"ok", "result"}``;
  unknown tool 404, a tool the session may not use 403, invalid arguments 400 naming the
  JSON path of the problem.
- ``GET /v1/runs?status=&sessionKey=&limit=``, ``GET /v1/runs/{runId}``,
  ``POST /v1/runs/{runId}/abort`` (202; 409 once the run has finished).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from gateway.agent import InvokeError, ToolNotAllowedError
from gateway.agent import SessionNotFoundError as NoSessionError
from gateway.api.errors import json_error
from gateway.api.keys import RUN_CONTROL, RUN_RECORDS, SESSION_STORE, TOOL_INVOKER
from gateway.sessions import SessionKey, SessionKeyError, SessionStore, current_transcript_path
from gateway.state import RUN_STATUSES, RunRecord
from gateway.subagents import RunFinishedError, RunNotFoundError, run_json
from gateway.tools import ToolArgumentsError, UnknownToolError

MAX_RUNS_LIMIT = 500


async def _json_body(request: web.Request) -> dict[str, Any] | web.Response:
    # Only JSON: a browser sends text/plain cross-site without a CORS preflight.
    if request.content_type != "application/json":
        return json_error(
            415, "unsupported_media_type", "send the body as application/json", field=""
        )
    try:
        body = await request.json()
    except (ValueError, RecursionError):  # RecursionError: deeply nested JSON
        return json_error(400, "invalid_json", "the request body is not valid JSON")
    if not isinstance(body, dict):
        return json_error(400, "invalid_body", "the request body must be a JSON object", field="")
    return body


async def _describe(store: SessionStore, run: RunRecord) -> dict[str, Any]:
    path: str | None = None
    session = await store.get(run.child_session_key)
    if session is not None:
        current = current_transcript_path(store.state_dir, session)
        path = str(current) if current else None
    return run_json(run, transcript_path=path)


async def invoke(request: web.Request) -> web.Response:
    invoker = request.app[TOOL_INVOKER]
    body = await _json_body(request)
    if isinstance(body, web.Response):
        return body
    unknown = sorted(set(body) - {"tool", "args", "sessionKey"})
    if unknown:
        return json_error(400, "unknown_field", f"unknown field {unknown[0]!r}", field=unknown[0])
    tool = body.get("tool")
    if not isinstance(tool, str) or not tool:
        return json_error(400, "invalid_field", "tool must be a tool name", field="tool")
    args = body.get("args", {})
    if not isinstance(args, dict):
        return json_error(400, "invalid_field", "args must be an object", field="args")
    raw_key = body.get("sessionKey", invoker.default_session_key())
    if not isinstance(raw_key, str):
        return json_error(400, "invalid_field", "sessionKey must be a string", field="sessionKey")
    try:
        key = SessionKey.parse(raw_key)
    except SessionKeyError as exc:
        return json_error(400, "invalid_session_key", exc.reason, field="sessionKey")
    try:
        output = await invoker.invoke(key, tool, args)
    except UnknownToolError:
        return json_error(404, "unknown_tool", f"no tool {tool!r}", field="tool")
    except ToolArgumentsError as exc:
        return json_error(400, "invalid_args", exc.message, field=exc.path)
    except ToolNotAllowedError as exc:
        return json_error(403, "tool_not_allowed", str(exc), field=exc.field)
    except NoSessionError as exc:
        return json_error(404, "session_not_found", str(exc), field=exc.field)
    except InvokeError as exc:
        return json_error(404, "agent_not_found", str(exc), field=exc.field)
    return web.json_response({"ok": not output.is_error, "result": output.result_json()})


async def list_runs(request: web.Request) -> web.Response:
    statuses: list[str] | None = None
    if raw := request.query.get("status"):
        statuses = [s.strip() for s in raw.split(",") if s.strip()]
        bad = [s for s in statuses if s not in RUN_STATUSES]
        if bad:
            return json_error(
                400, "invalid_parameter", f"unknown status {bad[0]!r}", field="status"
            )
    try:
        limit = int(request.query.get("limit", "50"))
    except ValueError:
        limit = 0
    if not 1 <= limit <= MAX_RUNS_LIMIT:
        return json_error(
            400,
            "invalid_parameter",
            f"limit must be an integer from 1 to {MAX_RUNS_LIMIT}",
            field="limit",
        )
    runs = await request.app[RUN_RECORDS].list(
        statuses=statuses, parent_session_key=request.query.get("sessionKey"), limit=limit
    )
    store = request.app[SESSION_STORE]
    return web.json_response({"runs": [await _describe(store, run) for run in runs]})


async def get_run(request: web.Request) -> web.Response:
    run = await request.app[RUN_RECORDS].get(request.match_info["runId"])
    if run is None:
        return json_error(404, "run_not_found", "no such run", field="runId")
    return web.json_response(await _describe(request.app[SESSION_STORE], run))


async def abort_run(request: web.Request) -> web.Response:
    try:
        run = await request.app[RUN_CONTROL].abort(request.match_info["runId"])
    except RunNotFoundError:
        return json_error(404, "run_not_found", "no such run", field="runId")
    except RunFinishedError as exc:
        return json_error(409, "run_finished", str(exc), field="runId")
    return web.json_response(await _describe(request.app[SESSION_STORE], run), status=202)


def run_routes() -> list[web.RouteDef]:
    """The tool and run routes."""
    return [
        web.post("/v1/tools/invoke", invoke),
        web.get("/v1/runs", list_runs),
        web.get("/v1/runs/{runId}", get_run),
        web.post("/v1/runs/{runId}/abort", abort_run),
    ]
