"""The route table: every operation the gateway serves itself, in one list.

The app registers these entries (:func:`route_defs`) and ``/openapi.json`` describes them
(:mod:`gateway.api.openapi`). Routes the channels add (the web chat's page, assets and
WebSocket; Slack's events URL) are theirs and not in the table.
"""

from __future__ import annotations

import functools
from typing import Any, Final

import orjson
from aiohttp import web

from gateway.api import health, openapi, runs, schedules, sessions
from gateway.api.keys import MCP_PATH
from gateway.api.requests import (
    HistoryParams,
    InvokeRequest,
    JobPath,
    RunPath,
    RunsQuery,
    SessionsQuery,
    TranscriptParams,
)
from gateway.api.routing import Reply, Route, aiohttp_routes, answer, error
from gateway.metrics import METRICS_PATH
from gateway.schedules.views import Job, JobList, RunStarted
from gateway.schema.schedules import JobSpec
from gateway.shapes import (
    Health,
    History,
    InvokeResult,
    Readiness,
    Run,
    RunDetail,
    RunList,
    SessionList,
    Transcript,
)


def openapi_document(*, slack_events: bool = False, mcp_path: str | None = None) -> dict[str, Any]:
    """The gateway's OpenAPI document: :func:`~gateway.api.openapi.build_document` of
    :data:`ROUTES` (``slack_events`` adds ``POST /slack/events``, served in Slack HTTP mode;
    ``mcp_path`` Herald's MCP endpoint)."""
    return openapi.build_document(ROUTES, slack_events=slack_events, mcp_path=mcp_path)


@functools.cache
def _served(slack_events: bool, mcp_path: str | None) -> bytes:
    return orjson.dumps(openapi_document(slack_events=slack_events, mcp_path=mcp_path))


async def serve_document(request: web.Request, _: None) -> web.Response:
    """``GET /openapi.json``: the document for the app that serves it (``/slack/events``
    and the MCP endpoint appear when that app has them)."""
    slack = openapi.has_route(request.app, openapi.SLACK_EVENTS_PATH)
    # Not app.get(): its typing takes an AppKey[str] for a plain str key.
    mcp_path = request.app[MCP_PATH] if MCP_PATH in request.app else None  # noqa: SIM401
    body = _served(slack, mcp_path)
    return web.Response(body=body, content_type="application/json")


_NO_SUCH_RUN: Final = error("No such run (run_not_found)")
_BAD_QUERY: Final = error("A bad query parameter (invalid_parameter)")
_NO_SUCH_JOB: Final = error("No such job (job_not_found)")
_NO_SCHEDULER: Final = error("The scheduler is not running (unavailable)")


ROUTES: Final[tuple[Route[Any], ...]] = (
    Route(
        method="GET",
        path="/healthz",
        operation_id="healthz",
        summary="Liveness: the process serves requests",
        handler=health.healthz,
        responses={200: answer(Health, "The gateway process is up")},
        public=True,
    ),
    Route(
        method="GET",
        path="/readyz",
        operation_id="readyz",
        summary="Readiness: every enabled channel is connected (and PostgreSQL answers)",
        handler=health.readyz,
        responses={
            200: answer(Readiness, "Every enabled channel is connected"),
            503: answer(
                Readiness,
                "Some enabled channel is not connected yet, or the PostgreSQL state database"
                " does not answer",
            ),
        },
        public=True,
    ),
    Route(
        method="POST",
        path="/v1/tools/invoke",
        operation_id="invokeTool",
        summary="Run a tool as if called from a session",
        description="A sessions_spawn announces to that session's chat and thread, "
        "as last recorded for it.",
        handler=runs.invoke,
        body=InvokeRequest,
        responses={
            200: answer(InvokeResult, "The tool ran"),
            400: error("Bad body, session key or tool arguments; `field` names the input"),
            403: error(
                "The session's agent may not use this tool (tool_not_allowed), or the "
                "request came from another site's page (forbidden_origin)"
            ),
            404: error("Unknown tool, agent or session"),
            413: error("The body is over 1 MiB (body_too_large)"),
            415: error("The body is not application/json (unsupported_media_type)"),
        },
    ),
    Route(
        method="GET",
        path="/v1/runs",
        operation_id="listRuns",
        summary="Sub-agent runs, newest first",
        handler=runs.list_runs,
        params=RunsQuery,
        responses={200: answer(RunList, "The runs"), 400: _BAD_QUERY},
    ),
    Route(
        method="GET",
        path="/v1/runs/{runId}",
        operation_id="getRun",
        summary="One run: status, timestamps, usage, cost, announce, transcript, children",
        handler=runs.get_run,
        params=RunPath,
        responses={
            200: answer(RunDetail, "The run, with the runs its session spawned"),
            404: _NO_SUCH_RUN,
        },
    ),
    Route(
        method="POST",
        path="/v1/runs/{runId}/abort",
        operation_id="abortRun",
        summary="Stop a queued or running run and the runs under it (announced cancelled)",
        handler=runs.abort_run,
        params=RunPath,
        responses={
            202: answer(Run, "Stopping; the run as it was"),
            404: _NO_SUCH_RUN,
            409: error("The run has already finished (run_finished)"),
            503: error("Sub-agents are not available (unavailable)"),
        },
    ),
    Route(
        method="GET",
        path="/v1/schedules",
        operation_id="listSchedules",
        summary="Scheduled jobs (declared and created), by id",
        handler=schedules.list_jobs,
        responses={200: answer(JobList, "The jobs"), 503: _NO_SCHEDULER},
    ),
    Route(
        method="POST",
        path="/v1/schedules",
        operation_id="createSchedule",
        summary="Create a job: exactly one of cron, every and at; its task; its chat target",
        description="As a job in the config file; `id` optional (one is made). A mistake is "
        "a 400 whose `field` names the input.",
        handler=schedules.create_job,
        body=JobSpec,
        responses={
            201: answer(Job, "The job, with its next run"),
            400: error("A bad field: `field` names it (cron, every, at, timezone, to, agentId)"),
            409: error("The id is taken, or is a declared job's (job_exists)"),
            503: _NO_SCHEDULER,
        },
    ),
    Route(
        method="GET",
        path="/v1/schedules/{jobId}",
        operation_id="getSchedule",
        summary="One job, with its last 20 occurrences",
        handler=schedules.get_job,
        params=JobPath,
        responses={200: answer(Job, "The job"), 404: _NO_SUCH_JOB, 503: _NO_SCHEDULER},
    ),
    Route(
        method="DELETE",
        path="/v1/schedules/{jobId}",
        operation_id="deleteSchedule",
        summary="Delete a job (declared jobs are removed from the config file instead)",
        handler=schedules.delete_job,
        params=JobPath,
        responses={
            200: answer(Job, "The job as it was"),
            404: _NO_SUCH_JOB,
            409: error("A declared job (job_declared)"),
            503: _NO_SCHEDULER,
        },
    ),
    Route(
        method="POST",
        path="/v1/schedules/{jobId}/run",
        operation_id="runSchedule",
        summary="Start an occurrence now, besides the schedule",
        handler=schedules.run_job,
        params=JobPath,
        responses={
            202: answer(RunStarted, "The run started"),
            404: _NO_SUCH_JOB,
            409: error("Its previous run has not finished (job_busy)"),
            503: _NO_SCHEDULER,
        },
    ),
    Route(
        method="POST",
        path="/v1/schedules/{jobId}/pause",
        operation_id="pauseSchedule",
        summary="Pause a job (kept across restarts)",
        handler=schedules.pause_job,
        params=JobPath,
        responses={200: answer(Job, "The job"), 404: _NO_SUCH_JOB, 503: _NO_SCHEDULER},
    ),
    Route(
        method="POST",
        path="/v1/schedules/{jobId}/resume",
        operation_id="resumeSchedule",
        summary="Resume a paused job (its failure count starts again)",
        handler=schedules.resume_job,
        params=JobPath,
        responses={200: answer(Job, "The job"), 404: _NO_SUCH_JOB, 503: _NO_SCHEDULER},
    ),
    Route(
        method="GET",
        path="/v1/sessions",
        operation_id="listSessions",
        summary="Sessions, most recently updated first",
        handler=sessions.list_sessions,
        params=SessionsQuery,
        responses={200: answer(SessionList, "The sessions"), 400: _BAD_QUERY},
    ),
    Route(
        method="GET",
        path="/v1/sessions/{sessionKey}/history",
        operation_id="sessionHistory",
        summary="The last messages of a session, oldest first",
        handler=sessions.history,
        params=HistoryParams,
        responses={
            200: answer(History, "The session's history"),
            400: error("A malformed session key or query parameter"),
            404: error("No such session (session_not_found)"),
        },
    ),
    Route(
        method="GET",
        path="/v1/sessions/{sessionKey}/transcript",
        operation_id="sessionTranscript",
        summary="A session's transcript records as written: messages, tool calls and "
        "results, usage, events",
        description="The newest `limit` records before `before` (default: the end), oldest "
        "first; `start` and `total` place the window, so a reader pages back with "
        "`before=start`. Archived sessions answer too.",
        handler=sessions.transcript,
        params=TranscriptParams,
        responses={
            200: answer(Transcript, "A window of the session's transcript"),
            400: error("A malformed session key or query parameter"),
            404: error("No such session (session_not_found)"),
        },
    ),
    Route(
        method="GET",
        path=METRICS_PATH,
        operation_id="metrics",
        summary="Prometheus metrics (text exposition format 0.0.4)",
        handler=health.metrics,
        responses={200: Reply("The metrics", {"type": "string"}, media_type="text/plain")},
    ),
    Route(
        method="GET",
        path=openapi.OPENAPI_PATH,
        operation_id="openapi",
        summary="This document",
        handler=serve_document,
        responses={200: Reply("The OpenAPI 3.1 document", {"type": "object"})},
    ),
)


def route_defs(*prefixes: str) -> list[web.RouteDef]:
    """The aiohttp routes of the table's entries whose path starts with one of
    ``prefixes`` (every entry when none is given): part of the API for a test app."""
    chosen = [r for r in ROUTES if not prefixes or r.path.startswith(prefixes)]
    return aiohttp_routes(chosen)
