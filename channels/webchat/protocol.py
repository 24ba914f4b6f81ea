"""The web chat's WebSocket protocol: JSON text frames, parsed and validated here.

Client → server::

    {"type": "hello", "clientId": "<id>"}     first frame; the id matches CLIENT_ID_PATTERN
    {"type": "message", "text": "<text>"}     a person's message (1 … MAX_TEXT_BYTES UTF-8)
    {"type": "jobs"}                          asks for this chat's scheduled jobs
    {"type": "unschedule", "jobId": "<id>"}   cancels one of them (not a declared one)

Server → client::

    {"type": "ready", "clientId": "<id>"}     answer to hello; the replay follows it
    {"type": "message", "kind": "user|reply|announce|notice", "text": …,
     "runId": <str|null>, "id": "<unique>", "ts": <Unix seconds>}
    {"type": "run", "runId": …, "name": …, "status": …, "ts": <Unix seconds>,
     "parentRunId": <str|null>, "depth": <int ≥ 1>, "batchId": <str|null>,
     "sessionKey": <str|null>, "createdAt": <Unix seconds|null>, "task": <str|null>,
     "model": <str|null>, "startedAt": <Unix seconds|null>, "endedAt": <Unix seconds|null>}
                                              a run's status, its place in the tree, what
                                              it was asked and its runtime so far;
                                              the page reads its transcript from
                                              GET /v1/sessions/{sessionKey}/history
    {"type": "typing", "on": <bool>}
    {"type": "delta", "turnId": "<id>", "text": <str>}
                                              more of a reply being written: append
                                              ``text``; with ``"reset": true`` show
                                              ``text`` in place of the turn's text so far
                                              (a tool status line, or a page that joined
                                              mid-turn); with ``"end": true`` the turn is
                                              over. A ``message`` whose ``id`` equals the
                                              ``turnId`` is the final reply: it takes the
                                              growing text's place.
    {"type": "jobs", "jobs": [{"jobId": …, "label": <str|null>, "task": …,
     "trigger": {"cron": …, "timezone": …} | {"every": "15m"} | {"at": <ISO-8601>},
     "nextRunAt": <Unix seconds|null>, "paused": <bool>, "declared": <bool>}, …]}
                                              this chat's jobs (created here or aimed
                                              here), soonest first: the answer to a
                                              ``jobs`` frame, and to every page of the
                                              client after an ``unschedule``
    {"type": "error", "code": "<stable code>", "message": "<for people>"}
                                              a refused ``unschedule`` (codes
                                              ``job_not_found``, ``job_declared``) also
                                              carries its ``"jobId"``;
                                              ``jobs_unavailable``: jobs cannot be read
                                              now (the gateway is starting): ask again

An invalid frame is answered with an error frame and the connection stays open.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal, TypeGuard

import orjson

from channels.base import RunUpdate

if TYPE_CHECKING:  # the jobs module answers frames, so it imports this one
    from channels.webchat.jobs import ChatJob

#: Client ids the page generates (a UUID); the gateway normalises them further for session keys.
CLIENT_ID_PATTERN: Final = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
#: Longest accepted message text, in UTF-8 bytes; the page enforces it too.
MAX_TEXT_BYTES: Final = 32 * 1024
#: Longest WebSocket frame; aiohttp closes the socket (1009) above it. JSON escaping can
#: grow text up to 6× (``\\u0000``), so this leaves room above MAX_TEXT_BYTES.
MAX_FRAME_BYTES: Final = 6 * MAX_TEXT_BYTES + 1024
#: Longest job id an ``unschedule`` frame may name (the gateway's ids are far shorter).
MAX_JOB_ID_CHARS: Final = 200
#: Characters of a run's task in its frame: the card shows a line or two, the run's
#: transcript has the rest, and every run frame is kept in the client's history file.
RUN_TASK_CHARS: Final = 500

ErrorCode = Literal[
    "bad_json",
    "bad_frame",
    "bad_client_id",
    "hello_first",
    "already_hello",
    "empty",
    "too_long",
    "unavailable",
    "job_not_found",
    "job_declared",
    "jobs_unavailable",
]
MessageKind = Literal["user", "reply", "announce", "notice"]


class FrameError(Exception):
    """A client frame the server refuses; becomes an error frame, the socket stays open."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code: ErrorCode = code

    def frame(self) -> str:
        """The error frame to send back."""
        return error_frame(self.code, str(self))


@dataclass(frozen=True, slots=True)
class Hello:
    client_id: str


@dataclass(frozen=True, slots=True)
class UserText:
    text: str


@dataclass(frozen=True, slots=True)
class ListJobs:
    pass


@dataclass(frozen=True, slots=True)
class Unschedule:
    job_id: str


ClientFrame = Hello | UserText | ListJobs | Unschedule


def valid_client_id(value: object) -> TypeGuard[str]:
    """True when ``value`` is a client id the web chat accepts."""
    return isinstance(value, str) and CLIENT_ID_PATTERN.fullmatch(value) is not None


def parse_client_frame(data: str) -> ClientFrame:
    """Parse and validate one client text frame; raises :class:`FrameError` when invalid."""
    try:
        raw: Any = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise FrameError("bad_json", "the frame is not valid JSON") from None
    if not isinstance(raw, dict):
        raise FrameError("bad_frame", "a frame is a JSON object")
    kind = raw.get("type")
    if kind == "hello":
        client_id = raw.get("clientId")
        if not valid_client_id(client_id):
            raise FrameError("bad_client_id", "clientId must match [A-Za-z0-9_-]{1,64}")
        return Hello(client_id)
    if kind == "message":
        text = raw.get("text")
        if not isinstance(text, str):
            raise FrameError("bad_frame", "a message frame needs a string 'text'")
        if not text.strip():
            raise FrameError("empty", "the message is empty")
        if len(text.encode("utf-8", "surrogatepass")) > MAX_TEXT_BYTES:
            raise FrameError("too_long", f"the message is longer than {MAX_TEXT_BYTES} bytes")
        return UserText(text)
    if kind == "jobs":
        return ListJobs()
    if kind == "unschedule":
        job_id = raw.get("jobId")
        if not isinstance(job_id, str) or not job_id or len(job_id) > MAX_JOB_ID_CHARS:
            raise FrameError("bad_frame", "an unschedule frame needs a string 'jobId'")
        return Unschedule(job_id)
    raise FrameError(
        "bad_frame", "unknown frame type; expected 'hello', 'message', 'jobs' or 'unschedule'"
    )


def _dump(frame: dict[str, Any]) -> str:
    return orjson.dumps(frame).decode()


def message_frame(
    kind: MessageKind, text: str, *, message_id: str, ts: float, run_id: str | None = None
) -> str:
    """A chat message for the page: the person's own (``user``) or the agent's."""
    return _dump(
        {"type": "message", "kind": kind, "text": text, "runId": run_id, "id": message_id, "ts": ts}
    )


def run_frame(update: RunUpdate, ts: float) -> str:
    """A sub-agent run's current status and its place in the tree of runs."""
    return _dump(
        {
            "type": "run",
            "runId": update.run_id,
            "name": update.name,
            "status": update.status,
            "ts": ts,
            "parentRunId": update.parent_run_id,
            "depth": update.depth,
            "batchId": update.batch_id,
            "sessionKey": update.session_key,
            "createdAt": update.created_at,
            "task": _clip(update.task, RUN_TASK_CHARS),
            "model": update.model,
            "startedAt": update.started_at,
            "endedAt": update.ended_at,
        }
    )


def _clip(text: str | None, limit: int) -> str | None:
    if text is None or len(text) <= limit:
        return text
    return text[: limit - 1] + "…"


def ready_frame(client_id: str) -> str:
    return _dump({"type": "ready", "clientId": client_id})


def typing_frame(on: bool) -> str:
    return _dump({"type": "typing", "on": on})


def delta_frame(turn_id: str, text: str, *, reset: bool = False, end: bool = False) -> str:
    """More of a reply being written (see the module docstring for ``reset`` and ``end``)."""
    frame: dict[str, Any] = {"type": "delta", "turnId": turn_id, "text": text}
    if reset:
        frame["reset"] = True
    if end:
        frame["end"] = True
    return _dump(frame)


def jobs_frame(jobs: Sequence[ChatJob]) -> str:
    """The chat's scheduled jobs, soonest next run first (those that will not run last)."""
    ordered = sorted(jobs, key=lambda j: (j.next_run_at is None, j.next_run_at or 0, j.job_id))
    return _dump(
        {
            "type": "jobs",
            "jobs": [
                {
                    "jobId": job.job_id,
                    "label": _clip(job.label, RUN_TASK_CHARS),
                    "task": _clip(job.task, RUN_TASK_CHARS),
                    "trigger": dict(job.trigger),
                    "nextRunAt": job.next_run_at,
                    "paused": job.paused,
                    "declared": job.declared,
                }
                for job in ordered
            ],
        }
    )


def error_frame(code: ErrorCode, message: str, *, job_id: str | None = None) -> str:
    frame: dict[str, Any] = {"type": "error", "code": code, "message": message}
    if job_id is not None:
        frame["jobId"] = job_id
    return _dump(frame)
