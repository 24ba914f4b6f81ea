"""The OpenAPI 3.1 document of the HTTP API (DESIGN §9), served at ``GET /openapi.json``.

The document is written next to the routes it describes, from the same constants (run
statuses, limits); tests compare it with the app's router both ways and fuzz the running
API against it, so a route or a status code that drifts from it fails the suite.

What it covers: every route of the gateway's own API, ``/metrics`` and this document. What
it leaves out, because the channels own them and they are not a JSON API: the web chat's
page (``GET /``), its assets (``GET /static/webchat/…``) and its WebSocket
(``GET /webchat/ws``). ``POST /slack/events`` belongs to Slack too, but DESIGN §9 lists it,
so the document describes it whenever the app serves it (Slack in HTTP mode).

Access: ``/openapi.json`` needs the bearer token like every ``/v1`` route when a token is
set; only ``/healthz``, ``/readyz``, the web chat page and ``/slack/events`` are public.
"""

from __future__ import annotations

import functools
import logging
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Final

import orjson
from aiohttp import web

from gateway.api.models import ANNOUNCE_STATES
from gateway.api.models import ERROR_CODES as ERROR_CODES
from gateway.api.requests import MAX_RUNS_LIMIT
from gateway.sessions import DEFAULT_HISTORY_LIMIT, MAX_HISTORY_LIMIT
from gateway.state import RUN_STATUSES

logger = logging.getLogger(__name__)

OPENAPI_PATH: Final = "/openapi.json"
SLACK_EVENTS_PATH: Final = "/slack/events"
#: Paths served by channels and deliberately left out of the document (see above).
CHANNEL_PATHS: Final = frozenset({"/", "/webchat/ws"})
CHANNEL_PREFIXES: Final = ("/static/",)

Schema = dict[str, Any]


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _nullable(kind: str, **extra: Any) -> Schema:
    return {"type": [kind, "null"], **extra}


def _object(properties: dict[str, Schema], *, optional: tuple[str, ...] = ()) -> Schema:
    """A closed object whose properties are all required except ``optional``."""
    return {
        "type": "object",
        "properties": properties,
        "required": [name for name in properties if name not in optional],
        "additionalProperties": False,
    }


_TIMESTAMP: Final[Schema] = {"type": "string", "format": "date-time"}
_NULLABLE_TIMESTAMP: Final[Schema] = {"type": ["string", "null"], "format": "date-time"}


def _schemas() -> dict[str, Schema]:
    count = {"type": "integer", "minimum": 0}
    return {
        "Error": _object(
            {
                "error": _object(
                    {
                        "code": {"type": "string", "enum": list(ERROR_CODES)},
                        "message": {"type": "string"},
                        "field": {
                            "type": "string",
                            "description": "JSON path of the offending input ('' = the body)",
                        },
                    },
                    optional=("field",),
                )
            }
        ),
        "Usage": _object(
            {
                "input": {**count, "description": "every prompt token, cache reads included"},
                "output": count,
                "cacheRead": count,
                "cacheWrite": count,
                "total": {**count, "description": "input + output"},
            }
        ),
        "Origin": _object(
            {
                "channel": {"type": "string"},
                "account": {"type": "string"},
                "chatId": {"type": "string"},
                "threadId": _nullable("string"),
                "chatType": _nullable("string"),
            }
        ),
        "Run": _object(
            {
                "runId": {"type": "string"},
                "status": {"type": "string", "enum": list(RUN_STATUSES)},
                "label": _nullable("string"),
                "task": {"type": "string"},
                "agentId": {"type": "string"},
                "requesterAgentId": {"type": "string"},
                "parentSessionKey": _nullable("string"),
                "childSessionKey": {"type": "string"},
                "childSessionId": {"type": "string"},
                "model": _nullable("string", description="<provider>/<model id>"),
                "modelApplied": {"type": "boolean"},
                "cleanup": {"type": "string", "enum": ["delete", "keep"]},
                "runTimeoutSeconds": {"type": "number", "minimum": 0},
                "origin": {"oneOf": [_ref("Origin"), {"type": "null"}]},
                "createdAt": _TIMESTAMP,
                "startedAt": _NULLABLE_TIMESTAMP,
                "endedAt": _NULLABLE_TIMESTAMP,
                "runtimeSeconds": _nullable("number"),
                "usage": _ref("Usage"),
                "costUsd": _nullable("number", description="estimated USD; null without a price"),
                "result": _nullable("string"),
                "error": _nullable("string"),
                "announce": _object(
                    {
                        "state": {"enum": [*ANNOUNCE_STATES, None]},
                        "error": _nullable("string"),
                        "text": _nullable("string"),
                    }
                ),
                "transcriptPath": _nullable("string"),
            }
        ),
        "Session": _object(
            {
                "key": {"type": "string"},
                "sessionId": {"type": "string"},
                "agentId": {"type": "string"},
                "kind": {"type": "string", "enum": ["main", "chat", "subagent"]},
                "parentKey": _nullable("string"),
                "label": _nullable("string"),
                "model": _nullable("string"),
                "origin": {"oneOf": [_ref("Origin"), {"type": "null"}]},
                "createdAt": _TIMESTAMP,
                "updatedAt": _TIMESTAMP,
                "usage": _ref("Usage"),
                "costUsd": _nullable("number"),
                "archiveDueAt": _NULLABLE_TIMESTAMP,
                "archived": {"type": "boolean"},
                "archivedAt": _NULLABLE_TIMESTAMP,
                "transcriptPath": _nullable("string"),
            }
        ),
        "ToolCall": {
            "type": "object",
            "properties": {
                "id": {"type": "string"},
                "name": {"type": "string"},
                "arguments": {"type": "object"},
                "rawArguments": _nullable("string"),
                "argumentsError": {"type": "string"},
            },
            "required": ["id", "name", "arguments"],
        },
        # Transcript lines may gain optional keys; a reader ignores the ones it does not know.
        "Message": {
            "type": "object",
            "properties": {
                "id": _nullable("string"),
                "timestamp": _nullable("string"),
                "role": {"type": "string", "enum": ["user", "assistant", "tool"]},
                "content": {"type": "string"},
                "toolCalls": {"type": "array", "items": _ref("ToolCall")},
                "toolCallId": {"type": "string"},
                "toolName": {"type": "string"},
                "isError": {"type": "boolean"},
                "model": {"type": "string"},
                "usage": _ref("Usage"),
            },
            "required": ["id", "timestamp", "role", "content"],
        },
        "InvokeRequest": _object(
            {
                "tool": {"type": "string", "minLength": 1, "examples": ["sessions_list"]},
                "args": {"type": "object", "description": "the tool's arguments (default {})"},
                "sessionKey": {
                    "type": "string",
                    "description": "run as if called from this session "
                    "(default: the default agent's main session)",
                    "examples": ["agent:main:main"],
                },
            },
            optional=("args", "sessionKey"),
        ),
        "Readiness": _object(
            {
                "status": {"type": "string", "enum": ["ready", "starting"]},
                "channels": {
                    "type": "object",
                    "additionalProperties": {"type": "boolean"},
                    "description": "each enabled channel's connection state, by name",
                },
            }
        ),
        "InvokeResult": _object(
            {
                "ok": {"type": "boolean", "description": "false when the tool reported an error"},
                "result": {"type": "object"},
            }
        ),
    }


def _json(schema: Schema, description: str) -> Schema:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _error(description: str) -> Schema:
    return _json(_ref("Error"), description)


def _responses(ok: tuple[str, Schema], *errors: tuple[int, str]) -> dict[str, Any]:
    status, body = ok
    out: dict[str, Any] = {status: body}
    for code, description in errors:
        out[str(code)] = _error(description)
    out["401"] = {"$ref": "#/components/responses/Unauthorized"}
    # Every route refuses other sites' pages and, without a token, other host names.
    out.setdefault("403", _error("A request from another site's page (forbidden_origin)"))
    out["421"] = _error("Host is not the gateway's own address, no token set (host_not_allowed)")
    return out


def _query(name: str, schema: Schema, description: str) -> Schema:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "schema": schema,
        "description": description,
    }


def _path(name: str, description: str) -> Schema:
    # A path segment: anything but '/', which would end it.
    schema = {"type": "string", "minLength": 1, "pattern": "^[^/]+$"}
    return {
        "name": name,
        "in": "path",
        "required": True,
        "schema": schema,
        "description": description,
    }


_PUBLIC: Final[list[Schema]] = []  # an operation's `security: []` overrides the default


def _paths(*, slack_events: bool) -> dict[str, Any]:
    flag = {"type": "boolean", "default": False}
    paths: dict[str, Any] = {
        "/healthz": {
            "get": {
                "operationId": "healthz",
                "summary": "Liveness: the process serves requests",
                "security": _PUBLIC,
                "responses": {
                    "200": _json(_object({"status": {"const": "ok"}}), "The gateway process is up")
                },
            }
        },
        "/readyz": {
            "get": {
                "operationId": "readyz",
                "summary": "Readiness: every enabled channel is connected",
                "security": _PUBLIC,
                "responses": {
                    "200": _json(_ref("Readiness"), "Every enabled channel is connected"),
                    "503": _json(_ref("Readiness"), "Some enabled channel is not connected yet"),
                },
            }
        },
        "/v1/tools/invoke": {
            "post": {
                "operationId": "invokeTool",
                "summary": "Run a tool as if called from a session",
                "description": "A sessions_spawn announces to that session's chat and thread, "
                "as last recorded for it.",
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": _ref("InvokeRequest")}},
                },
                "responses": _responses(
                    ("200", _json(_ref("InvokeResult"), "The tool ran")),
                    (400, "Bad body, session key or tool arguments; `field` names the input"),
                    (
                        403,
                        "The session's agent may not use this tool (tool_not_allowed), or the "
                        "request came from another site's page (forbidden_origin)",
                    ),
                    (404, "Unknown tool, agent or session"),
                    (413, "The body is over 1 MiB (body_too_large)"),
                    (415, "The body is not application/json (unsupported_media_type)"),
                ),
            }
        },
        "/v1/runs": {
            "get": {
                "operationId": "listRuns",
                "summary": "Sub-agent runs, newest first",
                "parameters": [
                    _query(
                        "status",
                        {"type": "string"},
                        "comma-separated statuses: " + ", ".join(RUN_STATUSES),
                    ),
                    _query("sessionKey", {"type": "string"}, "only runs this session spawned"),
                    _query(
                        "limit",
                        {"type": "integer", "minimum": 1, "maximum": MAX_RUNS_LIMIT, "default": 50},
                        "at most this many runs",
                    ),
                ],
                "responses": _responses(
                    (
                        "200",
                        _json(
                            _object({"runs": {"type": "array", "items": _ref("Run")}}), "The runs"
                        ),
                    ),
                    (400, "A bad query parameter (invalid_parameter)"),
                ),
            }
        },
        "/v1/runs/{runId}": {
            "get": {
                "operationId": "getRun",
                "summary": "One run: status, timestamps, usage, cost, announce, transcript",
                "parameters": [_path("runId", "the run's id")],
                "responses": _responses(
                    ("200", _json(_ref("Run"), "The run")), (404, "No such run (run_not_found)")
                ),
            }
        },
        "/v1/runs/{runId}/abort": {
            "post": {
                "operationId": "abortRun",
                "summary": "Stop a queued or running run; it is announced as cancelled",
                "parameters": [_path("runId", "the run's id")],
                "responses": _responses(
                    ("202", _json(_ref("Run"), "Stopping; the run as it was")),
                    (404, "No such run (run_not_found)"),
                    (409, "The run has already finished (run_finished)"),
                    (503, "Sub-agents are not available (unavailable)"),
                ),
            }
        },
        "/v1/sessions": {
            "get": {
                "operationId": "listSessions",
                "summary": "Sessions, most recently updated first",
                "parameters": [
                    _query("includeSubagents", flag, "include sub-agent sessions"),
                    _query("includeArchived", flag, "include archived sessions"),
                ],
                "responses": _responses(
                    (
                        "200",
                        _json(
                            _object({"sessions": {"type": "array", "items": _ref("Session")}}),
                            "The sessions",
                        ),
                    ),
                    (400, "A bad query parameter (invalid_parameter)"),
                ),
            }
        },
        "/v1/sessions/{sessionKey}/history": {
            "get": {
                "operationId": "sessionHistory",
                "summary": "The last messages of a session, oldest first",
                "parameters": [
                    _path("sessionKey", "e.g. agent:main:main (':' may be percent-encoded)"),
                    _query(
                        "limit",
                        {
                            "type": "integer",
                            "minimum": 1,
                            "maximum": MAX_HISTORY_LIMIT,
                            "default": DEFAULT_HISTORY_LIMIT,
                        },
                        "at most this many messages",
                    ),
                    _query("includeTools", flag, "include tool calls and results"),
                ],
                "responses": _responses(
                    (
                        "200",
                        _json(
                            _object(
                                {
                                    "sessionKey": {"type": "string"},
                                    "sessionId": {"type": "string"},
                                    "archived": {"type": "boolean"},
                                    "messages": {"type": "array", "items": _ref("Message")},
                                }
                            ),
                            "The session's history",
                        ),
                    ),
                    (400, "A malformed session key or query parameter"),
                    (404, "No such session (session_not_found)"),
                ),
            }
        },
        "/metrics": {
            "get": {
                "operationId": "metrics",
                "summary": "Prometheus metrics (text exposition format 0.0.4)",
                "responses": {
                    "200": {
                        "description": "The metrics",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    },
                    "401": {"$ref": "#/components/responses/Unauthorized"},
                },
            }
        },
        OPENAPI_PATH: {
            "get": {
                "operationId": "openapi",
                "summary": "This document",
                "responses": {
                    "200": _json({"type": "object"}, "The OpenAPI 3.1 document"),
                    "401": {"$ref": "#/components/responses/Unauthorized"},
                },
            }
        },
    }
    if slack_events:
        paths[SLACK_EVENTS_PATH] = {
            "post": {
                "operationId": "slackEvents",
                "summary": "Slack's Events API request URL (Slack HTTP mode)",
                "description": "Authenticated by Slack's request signature, not the token. "
                "Bodies and answers are Slack's Events API protocol.",
                "security": _PUBLIC,
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {"schema": {"type": "object"}},
                        "application/x-www-form-urlencoded": {"schema": {"type": "object"}},
                    },
                },
                "responses": {"default": {"description": "Slack's Events API protocol"}},
            }
        }
    return paths


def openapi_document(*, slack_events: bool = False) -> dict[str, Any]:
    """The OpenAPI 3.1 document of the HTTP API.

    ``slack_events`` adds ``POST /slack/events``, which exists only while Slack runs in
    HTTP mode. Every operation but the public ones requires the bearer token (or, where a
    browser cannot set headers, ``?token=``); its 401 answer is documented on each.
    """
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Herald gateway API",
            "version": _version(),
            "description": "Sub-agent runs, sessions and tools of a Herald gateway. Errors "
            'share one shape, {"error": {"code", "message", "field"?}}, and `code` is stable.',
        },
        "security": [{"bearerAuth": []}, {"tokenQuery": []}],
        "paths": _paths(slack_events=slack_events),
        "components": {
            "securitySchemes": {
                "bearerAuth": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "gateway.auth.token (required when it is set)",
                },
                "tokenQuery": {
                    "type": "apiKey",
                    "in": "query",
                    "name": "token",
                    "description": "the same token, for browsers' WebSocket and EventSource",
                },
            },
            "responses": {
                "Unauthorized": {
                    "description": "A token is configured and the request lacks it (unauthorized)",
                    "headers": {
                        "WWW-Authenticate": {
                            "schema": {"type": "string"},
                            "description": 'Bearer realm="herald"',
                        }
                    },
                    "content": {"application/json": {"schema": _ref("Error")}},
                }
            },
            "schemas": _schemas(),
        },
    }


def _version() -> str:
    try:
        return version("herald-gateway")
    except PackageNotFoundError:  # a source tree that is not installed
        return "0+unknown"


def has_route(app: web.Application, path: str) -> bool:
    """Whether ``app``'s router has a resource at exactly ``path``."""
    return any(resource.canonical == path for resource in app.router.resources())


@functools.cache
def _served(slack_events: bool) -> bytes:
    return orjson.dumps(openapi_document(slack_events=slack_events))


async def serve_document(request: web.Request, _: None) -> web.Response:
    """``GET /openapi.json``: the document for the app that serves it (``/slack/events``
    appears when that app has the route)."""
    body = _served(has_route(request.app, SLACK_EVENTS_PATH))
    return web.Response(body=body, content_type="application/json")
