"""The OpenAPI 3.1 document of the HTTP API, generated from the route table and served at
``GET /openapi.json``.

Paths, parameters, request bodies and answers come from the entries of
:data:`gateway.api.routes.ROUTES`; component schemas are pydantic's JSON Schema (draft
2020-12, the dialect of OpenAPI 3.1) of the models the entries name. Tests compare the
document with the app's router both ways and fuzz the running API against it.

What it covers: every route of the gateway's own API, the probes, ``/metrics`` and this
document. What it leaves out, because the channels own them and they are not a JSON API:
the web chat's page (``GET /``), its assets (``GET /static/webchat/…``) and its WebSocket
(``GET /webchat/ws``). ``POST /slack/events`` belongs to Slack too, but operators point
Slack at it, so the document describes it whenever the app serves it (Slack in HTTP mode).

Access: ``/openapi.json`` needs the bearer token like every ``/v1`` route when a token is
set; only ``/healthz``, ``/readyz``, the web chat page and ``/slack/events`` are public.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Final

from aiohttp import web
from pydantic import BaseModel
from pydantic.json_schema import (
    GenerateJsonSchema,
    JsonSchemaMode,
    JsonSchemaValue,
    models_json_schema,
)
from pydantic_core import core_schema

from gateway.api.routing import Reply, Route, error
from gateway.shapes import ERROR_CODES as ERROR_CODES
from gateway.shapes import Announce, Error, ErrorBody, RunChild

OPENAPI_PATH: Final = "/openapi.json"
SLACK_EVENTS_PATH: Final = "/slack/events"
#: Paths served by channels and deliberately left out of the document (see above).
CHANNEL_PATHS: Final = frozenset({"/", "/webchat/ws"})
CHANNEL_PREFIXES: Final = ("/static/",)

REF_TEMPLATE: Final = "#/components/schemas/{model}"
_REF_PREFIX: Final = REF_TEMPLATE.removesuffix("{model}")
_UNAUTHORIZED: Final = {"$ref": "#/components/responses/Unauthorized"}
#: Every protected route refuses other sites' pages and, without a token, other host names.
_FOREIGN_ORIGIN: Final = error("A request from another site's page (forbidden_origin)")
_FOREIGN_HOST: Final = error(
    "Host is not the gateway's own address, no token set (host_not_allowed)"
)
#: Shapes that only ever appear inside one other schema: written in place, not as components.
_INLINE: Final[tuple[type[BaseModel], ...]] = (ErrorBody, Announce, RunChild)

ModelKey = tuple[type[BaseModel], JsonSchemaMode]


class _Generator(GenerateJsonSchema):
    """Pydantic's JSON Schema less what a reader of the document does not need: titles on
    fields, and defaults on answers (the server always writes those keys or leaves them out;
    a default only means something for what a client sends)."""

    def field_title_should_be_set(self, schema: object) -> bool:
        return False

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> JsonSchemaValue:
        if self.mode == "serialization":
            return self.generate_inner(schema["schema"])
        return super().default_schema(schema)


def build_document(
    routes: Sequence[Route[Any]], *, slack_events: bool, mcp_path: str | None = None
) -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``routes``.

    ``slack_events`` adds ``POST /slack/events``, which exists only while Slack runs in
    HTTP mode; ``mcp_path`` adds Herald's MCP endpoint (``mcp.serve``) at that path. Every
    operation but the public ones requires the bearer token (or, where a browser cannot set
    headers, ``?token=``); its 401 answer is documented on each.
    """
    refs, schemas = _components(routes)
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        paths.setdefault(route.path, {})[route.method.lower()] = _operation(route, refs)
    if slack_events:
        paths[SLACK_EVENTS_PATH] = copy.deepcopy(_SLACK_EVENTS)
    if mcp_path is not None:
        paths[mcp_path] = copy.deepcopy(_MCP_ENDPOINT)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Herald gateway API",
            "version": _version(),
            "description": "Sub-agent runs, sessions and tools of a Herald gateway. Errors "
            'share one shape, {"error": {"code", "message", "field"?}}, and `code` is stable.',
        },
        # REST routes take the header only; ``?token=`` is for the web chat's WebSocket
        # handshake, a channel route this document leaves out.
        "security": [{"bearerAuth": []}],
        "paths": paths,
        "components": {
            "securitySchemes": {
                "bearerAuth": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "gateway.auth.token (required when it is set)",
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
                    "content": {"application/json": {"schema": refs[(Error, "serialization")]}},
                }
            },
            "schemas": schemas,
        },
    }


def _components(
    routes: Sequence[Route[Any]],
) -> tuple[Mapping[ModelKey, JsonSchemaValue], dict[str, JsonSchemaValue]]:
    """The ``$ref`` of each model the routes name, and every schema they need by name."""
    wanted: dict[ModelKey, None] = {(Error, "serialization"): None}
    for route in routes:
        if route.body is not None:
            wanted[(route.body, "validation")] = None
        for reply in route.responses.values():
            if isinstance(reply.body, type):
                wanted[(reply.body, "serialization")] = None
    generated, top = models_json_schema(
        list(wanted), ref_template=REF_TEMPLATE, schema_generator=_Generator
    )
    refs = {key: generated[key] for key in wanted}
    schemas: dict[str, JsonSchemaValue] = top.get("$defs", {})
    for model in _INLINE:
        inline = schemas.pop(model.__name__, None)
        if inline is not None:
            inline.pop("title", None)
            ref = REF_TEMPLATE.format(model=model.__name__)
            schemas = {name: _replace_ref(s, ref, inline) for name, s in schemas.items()}
    for schema in schemas.values():
        schema.pop("title", None)  # the component's name says it
    return refs, _reachable(refs.values(), schemas)


def _reachable(
    roots: Iterable[JsonSchemaValue], schemas: dict[str, JsonSchemaValue]
) -> dict[str, JsonSchemaValue]:
    """The schemas ``roots`` refer to, directly or not. Pydantic also defines the types
    that custom validators replace (a parsed session key), which nothing refers to."""
    names: set[str] = set()
    pending: list[Any] = list(roots)
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith(_REF_PREFIX):
                name = ref.removeprefix(_REF_PREFIX)
                if name not in names:
                    names.add(name)
                    pending.append(schemas[name])
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)
    return {name: schema for name, schema in schemas.items() if name in names}


def _replace_ref(node: Any, ref: str, schema: JsonSchemaValue) -> Any:
    if isinstance(node, dict):
        if node.get("$ref") == ref:
            # Keep what annotates the reference (a description, say) beside the schema.
            return {**copy.deepcopy(schema), **{k: v for k, v in node.items() if k != "$ref"}}
        return {key: _replace_ref(value, ref, schema) for key, value in node.items()}
    if isinstance(node, list):
        return [_replace_ref(item, ref, schema) for item in node]
    return node


def _operation(route: Route[Any], refs: Mapping[ModelKey, JsonSchemaValue]) -> dict[str, Any]:
    operation: dict[str, Any] = {"operationId": route.operation_id, "summary": route.summary}
    if route.description:
        operation["description"] = route.description
    if route.public:
        operation["security"] = []  # overrides the document's default requirement
    if route.params is not None:
        operation["parameters"] = _parameters(route, route.params)
    if route.body is not None:
        schema = refs[(route.body, "validation")]
        operation["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": schema}},
        }
    responses = {str(status): _reply(reply, refs) for status, reply in route.responses.items()}
    if not route.public:
        responses["401"] = dict(_UNAUTHORIZED)
        responses.setdefault("403", _reply(_FOREIGN_ORIGIN, refs))
        responses["421"] = _reply(_FOREIGN_HOST, refs)
    operation["responses"] = responses
    return operation


def _parameters(route: Route[Any], model: type[BaseModel]) -> list[dict[str, Any]]:
    """One parameter per field: in the path when the template names it, else in the query."""
    schema = model.model_json_schema(mode="validation", schema_generator=_Generator)
    if "$defs" in schema:
        raise ValueError(f"{route.path}: parameters must be plain values, not objects")
    required = set(schema.get("required", ()))
    parameters: list[dict[str, Any]] = []
    for name, field_schema in schema["properties"].items():
        field_schema = dict(field_schema)
        description = field_schema.pop("description", None)
        if field_schema.get("default", 0) is None:
            del field_schema["default"]  # absent, not null: a query string has no null
        in_path = f"{{{name}}}" in route.path
        parameter: dict[str, Any] = {
            "name": name,
            "in": "path" if in_path else "query",
            "required": in_path or name in required,
            "schema": field_schema,
        }
        if description is not None:
            parameter["description"] = description
        parameters.append(parameter)
    return parameters


def _reply(reply: Reply, refs: Mapping[ModelKey, JsonSchemaValue]) -> dict[str, Any]:
    out: dict[str, Any] = {"description": reply.description}
    if reply.body is not None:
        schema = (
            copy.deepcopy(reply.body)
            if isinstance(reply.body, dict)
            else refs[(reply.body, "serialization")]
        )
        out["content"] = {reply.media_type: {"schema": schema}}
    return out


#: Channel-owned, so not in the route table: bodies and answers are Slack's protocol.
_SLACK_EVENTS: Final[dict[str, Any]] = {
    "post": {
        "operationId": "slackEvents",
        "summary": "Slack's Events API request URL (Slack HTTP mode)",
        "description": "Authenticated by Slack's request signature, not the token. "
        "Bodies and answers are Slack's Events API protocol.",
        "security": [],
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


_MCP_ENDPOINT: Final[dict[str, Any]] = {
    "post": {
        "operationId": "mcp",
        "summary": "Herald's MCP endpoint (Streamable HTTP, stateless, JSON answers)",
        "description": "Bodies and answers are MCP's JSON-RPC messages: initialize, "
        "tools/list, tools/call of spawn, runs_list, run_get, run_wait, run_abort, "
        "sessions_list and session_history. Send `Accept: application/json, "
        "text/event-stream`.",
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"type": "object"}}},
        },
        "responses": {
            "default": {"description": "MCP's JSON-RPC answer"},
            "401": {"$ref": "#/components/responses/Unauthorized"},
        },
    }
}


def _version() -> str:
    try:
        return version("herald-gateway")
    except PackageNotFoundError:  # a source tree that is not installed
        return "0+unknown"


def has_route(app: web.Application, path: str) -> bool:
    """Whether ``app``'s router has a resource at exactly ``path``."""
    return any(resource.canonical == path for resource in app.router.resources())
