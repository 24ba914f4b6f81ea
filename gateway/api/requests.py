"""What a client sends: the invoke body and each route's path and query parameters.

The route table (:mod:`gateway.api.routes`) names one of these models per route; the
router validates the request against it before the handler runs, and ``/openapi.json``
describes the request from it. A parameters model holds both kinds: a field whose name
appears in the path template (``{runId}``) is a path parameter, every other field a query
parameter.

Query strings are text, so parameter fields parse text themselves: booleans are
``true``/``false``/``1``/``0`` (any case; empty is false), integers are what ``int()``
reads. Unknown query parameters are ignored (``?token=`` is the auth middleware's).
"""

from __future__ import annotations

from typing import Annotated, Any, Final

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainValidator
from pydantic.alias_generators import to_camel
from pydantic.json_schema import SkipJsonSchema
from pydantic_core import PydanticCustomError

from gateway.sessions import (
    DEFAULT_HISTORY_LIMIT,
    MAX_HISTORY_LIMIT,
    SessionKey,
    SessionKeyError,
    SessionRefError,
    parse_ref,
)
from gateway.state import RUN_STATUSES, RunStatus

MAX_RUNS_LIMIT: Final = 500
DEFAULT_RUNS_LIMIT: Final = 50
#: Transcript records per request: a page of a long session, not the whole of it.
MAX_TRANSCRIPT_LIMIT: Final = 5000
DEFAULT_TRANSCRIPT_LIMIT: Final = 500

#: Documented shape of a path segment: anything but '/', which would end it. Only
#: documented: the router has already cut the segment, and a percent-encoded '/' inside
#: one is the handler's to refuse (as an unknown id or a malformed key).
_SEGMENT: Final[dict[str, Any]] = {"minLength": 1, "pattern": "^[^/]+$"}
_TRUE: Final = frozenset({"true", "1"})
_FALSE: Final = frozenset({"false", "0"})


def _session_key(value: object) -> SessionKey:
    if not isinstance(value, str):
        raise PydanticCustomError("string_type", "Input should be a valid string")
    try:
        return SessionKey.parse(value)
    except SessionKeyError as exc:
        # The error type is the API's error code (see gateway.api.routing).
        raise PydanticCustomError("invalid_session_key", exc.reason) from None


def _session_ref(value: object) -> str:
    if not isinstance(value, str):
        raise PydanticCustomError("string_type", "Input should be a valid string")
    try:
        parse_ref(value)
    except (SessionKeyError, SessionRefError) as exc:
        raise PydanticCustomError("invalid_session_key", exc.reason) from None
    return value


def _flag(value: object) -> object:
    if not isinstance(value, str):
        return value
    if value == "":
        return False
    text = value.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise PydanticCustomError("bool_parsing", "Input should be true or false")


def _integer(value: object) -> object:
    # int()'s reading, not pydantic's: "2.0" is not an integer here.
    if not isinstance(value, str):
        return value
    try:
        return int(value)
    except ValueError:
        raise PydanticCustomError("int_parsing", "Input should be a valid integer") from None


def _blank_is(default: int) -> BeforeValidator:
    return BeforeValidator(lambda value: default if value == "" else _integer(value))


def _statuses(value: object) -> object:
    if not isinstance(value, str):
        return value
    return [part.strip() for part in value.split(",") if part.strip()] if value else None


#: A session key, parsed (a malformed one is an ``invalid_session_key`` error).
SessionKeyField = Annotated[SessionKey, PlainValidator(_session_key, json_schema_input_type=str)]
#: A session key, or another reference to a session: its id, a run's id, or a transcript's
#: file name (:func:`gateway.sessions.parse_ref`); a malformed one is ``invalid_session_key``.
SessionRefField = Annotated[str, PlainValidator(_session_ref, json_schema_input_type=str)]
Flag = Annotated[bool, BeforeValidator(_flag)]
QueryInt = Annotated[int, BeforeValidator(_integer)]


class InvokeRequest(BaseModel):
    """A tool to run, its arguments, and the session to run it from."""

    # Strict: JSON types are taken as they are (no "5" for 5); unknown keys are refused.
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", strict=True, frozen=True
    )

    tool: str = Field(min_length=1, examples=["sessions_list"])
    args: dict[str, Any] = Field(
        default_factory=dict, description="the tool's arguments (default {})"
    )
    # Optional but never null: the validator sees an explicit null, never the default.
    session_key: Annotated[
        SessionKey | None, PlainValidator(_session_key, json_schema_input_type=str)
    ] = Field(
        default=None,
        description="run as if called from this session "
        "(default: the default agent's main session)",
        examples=["agent:main:main"],
    )
    to: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="run as if called from the chat this chat target names, in that chat's "
        "own session: slack:C0123[/<thread ts>], discord:<channel id>, webchat:<clientId> "
        "(a sessions_spawn announces there); not with sessionKey",
        examples=["slack:C0123456789"],
    )


class Params(BaseModel):
    """Base of the path and query parameter models."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True
    )


class RunsQuery(Params):
    status: Annotated[
        tuple[RunStatus, ...] | None, BeforeValidator(_statuses, json_schema_input_type=str)
    ] = Field(default=None, description=f"comma-separated statuses: {', '.join(RUN_STATUSES)}")
    session_key: str | SkipJsonSchema[None] = Field(
        default=None, description="only runs this session spawned"
    )
    limit: QueryInt = Field(
        default=DEFAULT_RUNS_LIMIT, ge=1, le=MAX_RUNS_LIMIT, description="at most this many runs"
    )


class RunPath(Params):
    run_id: str = Field(description="the run's id", json_schema_extra=_SEGMENT)


class JobPath(Params):
    job_id: str = Field(description="the job's id", json_schema_extra=_SEGMENT)


class SessionsQuery(Params):
    include_subagents: Flag = Field(default=False, description="include sub-agent sessions")
    include_archived: Flag = Field(default=False, description="include archived sessions")


class HistoryParams(Params):
    # Declared first: a malformed key is reported before any query parameter.
    session_key: SessionRefField = Field(
        description="a session key, e.g. agent:main:main (':' may be percent-encoded); or "
        "the session's id, a run's id, or a transcript's file name, archived or not",
        json_schema_extra=_SEGMENT,
    )
    limit: Annotated[int, _blank_is(DEFAULT_HISTORY_LIMIT)] = Field(
        default=DEFAULT_HISTORY_LIMIT,
        ge=1,
        le=MAX_HISTORY_LIMIT,
        description="at most this many messages",
    )
    include_tools: Flag = Field(default=False, description="include tool calls and results")


class TranscriptParams(Params):
    session_key: SessionKeyField = Field(
        description="e.g. agent:main:main (':' may be percent-encoded)",
        json_schema_extra=_SEGMENT,
    )
    limit: Annotated[int, _blank_is(DEFAULT_TRANSCRIPT_LIMIT)] = Field(
        default=DEFAULT_TRANSCRIPT_LIMIT,
        ge=1,
        le=MAX_TRANSCRIPT_LIMIT,
        description="at most this many records, the newest before `before`",
    )
    before: QueryInt | SkipJsonSchema[None] = Field(
        default=None,
        ge=0,
        description="end of the window (a record index, exclusive; default: the end)",
    )
