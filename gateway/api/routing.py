"""A route entry of the API, and how the router serves one.

A :class:`Route` says everything the API promises about one operation: method and path,
what the client sends (a JSON body model, or a parameters model for the path and query),
what it gets back by status, and whether it needs the token. The aiohttp routes are made
from the entries (:func:`aiohttp_routes`) and so is ``/openapi.json``
(:mod:`gateway.api.openapi`), so the two cannot disagree.

Serving an entry validates the request first and hands the handler the validated model;
invalid input never reaches a handler and is answered in the API's error shape:

- body: not ``application/json`` → 415 ``unsupported_media_type``; not JSON → 400
  ``invalid_json``; not an object → 400 ``invalid_body``; an unknown key → 400
  ``unknown_field``; a bad value → 400 ``invalid_field`` (or the code a field's validator
  names, e.g. ``invalid_session_key``), ``field`` naming it;
- parameters: a bad value → 400 ``invalid_parameter`` (or the validator's code), ``field``
  naming the parameter.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Generic, Literal, TypeVar

from aiohttp import web
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from gateway.api.errors import json_error
from gateway.shapes import Error, ErrorCode, WireModel

#: What a handler gets: its route's validated body or parameters model, or None.
Inputs = TypeVar("Inputs")

Method = Literal["GET", "POST", "DELETE"]
JsonSchema = dict[str, Any]
#: Error types that field validators raise under the API's own code (see requests.py).
_VALIDATOR_CODES: Final[Mapping[str, ErrorCode]] = {"invalid_session_key": "invalid_session_key"}


@dataclass(frozen=True, slots=True)
class Reply:
    """One documented answer: its description and body (a model, a raw schema or none)."""

    description: str
    body: type[BaseModel] | JsonSchema | None = None
    media_type: str = "application/json"


def answer(model: type[BaseModel], description: str) -> Reply:
    return Reply(description, model)


def error(description: str) -> Reply:
    """An error answer: the :class:`~gateway.shapes.Error` shape."""
    return Reply(description, Error)


@dataclass(frozen=True, slots=True, kw_only=True)
class Route(Generic[Inputs]):
    """One operation of the API.

    ``body`` and ``params`` are exclusive: the handler gets the validated model of whichever
    is set, or None. ``responses`` lists the route's own answers; the answers every route
    shares (401 without the token, 403 from another site's page, 421 for a foreign host
    name) are added by the document. ``public`` routes need no token.
    """

    method: Method
    path: str
    operation_id: str
    summary: str
    handler: Callable[[web.Request, Inputs], Awaitable[web.StreamResponse]]
    responses: Mapping[int, Reply]
    description: str | None = None
    body: type[Inputs] | None = None
    params: type[Inputs] | None = None
    public: bool = False

    def __post_init__(self) -> None:
        if self.body is not None and self.params is not None:
            raise ValueError(f"{self.method} {self.path}: a body or parameters, not both")


def reply(body: WireModel, status: int = 200) -> web.Response:
    """A JSON answer from a response model."""
    return web.Response(text=body.wire_json(), status=status, content_type="application/json")


def aiohttp_routes(routes: Iterable[Route[Any]]) -> list[web.RouteDef]:
    """The aiohttp routes of ``routes`` (a GET also answers HEAD, as aiohttp's do)."""
    defs: list[web.RouteDef] = []
    for route in routes:
        make = {"GET": web.get, "POST": web.post, "DELETE": web.delete}[route.method]
        defs.append(make(route.path, _serve(route)))
    return defs


class _RejectedError(Exception):
    """Invalid input, with the answer that says so."""

    def __init__(self, response: web.Response) -> None:
        super().__init__(response.status)
        self.response = response


def _serve(route: Route[Any]) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def handle(request: web.Request) -> web.StreamResponse:
        try:
            if route.body is not None:
                inputs = await _read_body(request, route.body)
            elif route.params is not None:
                inputs = _read_params(request, route.params)
            else:
                inputs = None
        except _RejectedError as exc:
            return exc.response
        return await route.handler(request, inputs)

    return handle


async def _read_body(request: web.Request, model: type[BaseModel]) -> BaseModel:
    # Only JSON: a browser sends text/plain cross-site without a CORS preflight.
    if request.content_type != "application/json":
        raise _RejectedError(
            json_error(415, "unsupported_media_type", "send the body as application/json", field="")
        )
    try:
        data = await request.json()
    except (ValueError, RecursionError):  # RecursionError: deeply nested JSON
        raise _RejectedError(
            json_error(400, "invalid_json", "the request body is not valid JSON")
        ) from None
    if not isinstance(data, dict):
        raise _RejectedError(
            json_error(400, "invalid_body", "the request body must be a JSON object", field="")
        )
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _RejectedError(_body_error(exc.errors(include_url=False))) from None


def _body_error(errors: list[ErrorDetails]) -> web.Response:
    # Unknown keys first, in name order: the client sent something this API does not have.
    unknown = sorted(str(e["loc"][0]) for e in errors if e["type"] == "extra_forbidden")
    if unknown:
        return json_error(400, "unknown_field", f"unknown field {unknown[0]!r}", field=unknown[0])
    first = errors[0]
    field = ".".join(str(part) for part in first["loc"])
    code = _VALIDATOR_CODES.get(first["type"])
    if code is not None:
        return json_error(400, code, first["msg"], field=field)
    return json_error(400, "invalid_field", f"{field}: {first['msg']}", field=field)


def _read_params(request: web.Request, model: type[BaseModel]) -> BaseModel:
    # The first value of a repeated query parameter; a path segment wins over a query
    # parameter of the same name.
    values = {name: request.query[name] for name in request.query}
    values.update(request.match_info)
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]  # fields in declaration order
        name = str(first["loc"][0])
        code = _VALIDATOR_CODES.get(first["type"])
        message = first["msg"] if code is not None else f"{name}: {first['msg']}"
        raise _RejectedError(
            json_error(400, code or "invalid_parameter", message, field=name)
        ) from None
