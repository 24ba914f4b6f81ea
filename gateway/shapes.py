"""The JSON shapes Herald answers with, as pydantic models: runs, sessions, history, errors.

Each shape is written once, here: handlers serialise these models, ``/openapi.json`` carries
their JSON Schema, and the presenters of runs and sessions build them
(:mod:`gateway.subagents.presenter`, :mod:`gateway.sessions.views`) for the API, the CLI's
``--json`` output and the session tools alike.

Conventions:

- camelCase on the wire (``alias_generator=to_camel``); Python code builds models by field
  name.
- Objects are closed (``extra="forbid"``), except transcript messages and tool calls, which
  may gain keys in later transcript versions and pass them through.
- A field without a default is always present, ``null`` when empty. A field that defaults
  to ``None`` is a key that may be absent: it is written only when it was set
  (:meth:`WireModel.wire_json` uses ``exclude_unset``).
- A non-finite number is not JSON; should one reach a response (a row stored before inputs
  had to be finite), it is written as ``null`` rather than as invalid JSON.

It sits low in the layering (it imports only the state and LLM types), so the layers
that present runs and sessions, and the HTTP API above them, all build the same models.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel
from pydantic.json_schema import SkipJsonSchema

from gateway import llm, state
from gateway.state import Cleanup, RunStatus, SessionKind

#: Every ``code`` an API error may carry. Clients branch on these; they never change meaning.
ErrorCode = Literal[
    "unauthorized",
    "invalid_json",
    "invalid_body",
    "unknown_field",
    "invalid_field",
    "invalid_parameter",
    "invalid_session_key",
    "invalid_args",
    "agent_not_found",
    "session_not_found",
    "unknown_tool",
    "tool_not_allowed",
    "run_not_found",
    "run_finished",
    "unavailable",
    # Scheduled jobs: no such job, an id taken (or a declared job's), a declared job cannot
    # be changed through the API, a run now while the previous run is live.
    "job_not_found",
    "job_exists",
    "job_declared",
    "job_busy",
    # Answers of the router and the body reader (no route, wrong method, body over 1 MiB).
    "not_found",
    "method_not_allowed",
    "body_too_large",
    # Browser-side defences (gateway/api/origin.py) and the JSON-only body rule.
    "forbidden_origin",
    "host_not_allowed",
    "unsupported_media_type",
]
ERROR_CODES: Final[tuple[ErrorCode, ...]] = get_args(ErrorCode)

#: ``consumed``: the run's result went to a ``sessions_yield`` follow-up or a ``subagents wait``
#: instead of an announce of its own; ``held``: a wait is holding it; ``nested``: a run below
#: depth 1, whose result goes to the run that spawned it, never to a chat.
AnnounceState = Literal[
    "queued",
    "delivered",
    "failed",
    "uncertain",
    "skipped",
    "no_origin",
    "consumed",
    "held",
    "nested",
]
ANNOUNCE_STATES: Final[tuple[AnnounceState, ...]] = get_args(AnnounceState)
Delivery = Literal["live", "held", "batched", "pending", "delivered", "consumed"]

#: UTC ISO-8601 with milliseconds and ``Z``, as the presenters format it. Kept a string: a
#: datetime would be re-formatted on the way out.
Timestamp = Annotated[str, Field(json_schema_extra={"format": "date-time"})]
Count = Annotated[int, Field(ge=0)]
#: How far down the spawn tree a run is: 1 for a run a person's session spawned.
Depth = Annotated[int, Field(ge=1, description="1 = spawned from a person's session")]


class WireModel(BaseModel):
    """Base of every API body: camelCase keys, built by field name in Python."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        frozen=True,
        ser_json_inf_nan="null",
    )

    def wire(self) -> dict[str, Any]:
        """The JSON object as Python data (for the CLI and the session tools)."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)

    def wire_json(self) -> str:
        """The JSON text of an API answer."""
        return self.model_dump_json(by_alias=True, exclude_unset=True)


class Closed(WireModel):
    """A response object with exactly its declared keys."""

    model_config = ConfigDict(extra="forbid")


class Open(WireModel):
    """A transcript object: declared keys are checked, keys of later versions pass through."""

    model_config = ConfigDict(extra="allow")


class ErrorBody(Closed):
    code: ErrorCode
    message: str
    field: str | SkipJsonSchema[None] = Field(
        default=None, description="JSON path of the offending input ('' = the body)"
    )


class Error(Closed):
    """Every API error: ``{"error": {"code", "message", "field"?}}``; ``code`` is stable."""

    error: ErrorBody


class Usage(Closed):
    input: Count = Field(description="every prompt token, cache reads included")
    output: Count
    cache_read: Count
    cache_write: Count
    total: Count = Field(description="input + output")

    @classmethod
    def of(cls, usage: llm.Usage) -> Usage:
        return cls(
            input=usage.input,
            output=usage.output,
            cache_read=usage.cache_read,
            cache_write=usage.cache_write,
            total=usage.total,
        )


class Origin(Closed):
    """The chat a conversation lives in; ``threadId`` is the provider's raw value."""

    channel: str
    account: str
    chat_id: str
    thread_id: str | None
    chat_type: str | None

    @classmethod
    def of(cls, origin: state.Origin | None) -> Origin | None:
        if origin is None:
            return None
        return cls(
            channel=origin.channel,
            account=origin.account,
            chat_id=origin.chat_id,
            thread_id=origin.thread_id,
            chat_type=origin.chat_type,
        )


class Announce(Closed):
    state: AnnounceState | None
    error: str | None
    text: str | None


class Run(Closed):
    """A sub-agent run: status, timestamps, usage, cost, announce and transcript."""

    run_id: str
    status: RunStatus
    label: str | None
    task: str
    agent_id: str
    requester_agent_id: str
    parent_session_key: str | None
    parent_run_id: str | None = Field(description="the run whose session spawned this one")
    depth: Depth
    batch_id: str | None = Field(description="the sessions_yield batch the run belongs to")
    job_id: str | None = Field(
        default=None, description="the scheduled job whose occurrence this run is"
    )
    occurrence_at: Timestamp | None = Field(
        default=None, description="the due time of that occurrence (one run per job and time)"
    )
    delivery: Delivery = Field(
        description="who has the run's result: live, held (a wait), batched, pending (on its"
        " way to the requester), delivered (in its conversation) or consumed"
    )
    child_session_key: str
    child_session_id: str
    model: str | None = Field(description="<provider>/<model id>")
    model_applied: bool
    cleanup: Cleanup
    run_timeout_seconds: float = Field(ge=0)
    origin: Origin | None
    created_at: Timestamp
    started_at: Timestamp | None
    ended_at: Timestamp | None
    runtime_seconds: float | None
    usage: Usage
    cost_usd: float | None = Field(description="estimated USD; null without a price")
    result: str | None
    error: str | None
    announce: Announce
    transcript_path: str | None = Field(description="where the transcript is now")
    archived_at: Timestamp | None = Field(
        default=None,
        description="when the run's session was archived (its transcript renamed), or null",
    )


class RunChild(Closed):
    """A run spawned by another run, in brief."""

    run_id: str
    label: str | None
    status: RunStatus
    depth: Depth


class RunDetail(Run):
    """One run, with the runs its session spawned (oldest first)."""

    children: list[RunChild]


class RunList(Closed):
    runs: list[Run]


class Session(Closed):
    """A session of the index, with where its transcript is now."""

    key: str
    #: For people: where the session lives and the first words of its first message.
    title: str
    session_id: str
    agent_id: str
    kind: SessionKind
    parent_key: str | None
    label: str | None
    model: str | None
    origin: Origin | None
    created_at: Timestamp
    updated_at: Timestamp
    usage: Usage
    cost_usd: float | None
    archive_due_at: Timestamp | None
    archived: bool
    archived_at: Timestamp | None
    transcript_path: str | None


class SessionList(Closed):
    sessions: list[Session]


class ToolCall(Open):
    id: str
    name: str
    arguments: dict[str, Any]
    raw_arguments: str | None = None
    arguments_error: str | SkipJsonSchema[None] = None


class Message(Open):
    """One transcript message; the optional keys appear only where the message has them."""

    id: str | None
    timestamp: str | None
    role: llm.Role
    content: str
    tool_calls: list[ToolCall] | SkipJsonSchema[None] = None
    tool_call_id: str | SkipJsonSchema[None] = None
    tool_name: str | SkipJsonSchema[None] = None
    is_error: bool | SkipJsonSchema[None] = None
    model: str | SkipJsonSchema[None] = None
    usage: Usage | SkipJsonSchema[None] = None


class History(Closed):
    session_key: str
    session_id: str
    archived: bool
    archived_at: Timestamp | None = Field(description="when the session was archived, or null")
    transcript_path: str | None = Field(description="where the transcript is now")
    messages: list[Message]


class TranscriptRecord(Open):
    """One transcript line as written: the ``session`` header, a ``message`` (its body under
    ``message``) or an ``event`` (``event`` and ``data``); every key of the line is kept."""

    type: str
    id: str | SkipJsonSchema[None] = None
    timestamp: str | SkipJsonSchema[None] = None


class Transcript(Closed):
    """A window of a session's transcript: records ``start`` … ``start + len(records) - 1``
    of ``total`` (0-based line records, oldest first)."""

    session: Session
    records: list[TranscriptRecord]
    start: Count = Field(description="index of the first record returned")
    total: Count = Field(description="records in the whole transcript")
    torn_bytes: Count = Field(description="size of a torn last line left out (a crash)")
    bad_lines: list[int] = Field(
        description="1-based numbers of the window's lines that did not parse (each is an "
        "`unknown` record in its place)"
    )


class InvokeResult(Closed):
    ok: bool = Field(description="false when the tool reported an error")
    result: dict[str, Any]


class Health(Closed):
    status: Literal["ok"]


class Readiness(Closed):
    status: Literal["ready", "starting"]
    channels: dict[str, bool] = Field(
        description="each enabled channel, by name: true when it does its part here "
        "(connected, or standing by while another replica holds its connection)"
    )
    channel_states: dict[str, Literal["connected", "standby", "disconnected"]] = Field(
        description="each enabled channel's connection, by name: `standby` when another "
        "replica of the cluster holds its one inbound connection (Discord's gateway) and "
        "this one only sends"
    )
    storage: Literal["ok", "full"] = Field(
        description="`full` while the disk refuses the state's writes (the state directory's, "
        "or on PostgreSQL the database server's)"
    )
    database: Literal["ok", "unavailable"] | None = Field(
        None, description="the shared PostgreSQL state database; null on SQLite"
    )
    mcp: dict[str, str] | None = Field(
        None,
        description="each enabled MCP server's state, by name: `ready`, `starting` or "
        "`failed: <reason>` (never makes the gateway unready: chats still work); null "
        "without MCP servers",
    )
