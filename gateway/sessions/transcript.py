"""The transcript format: building lines, reading them back, repairing a torn tail.

One JSON object per line, UTF-8, serialised with orjson. Line 1 is the header::

    {"type":"session","version":1,"id":<sessionId>,"key":<sessionKey>,"agentId":…,
     "parentSessionKey":…|null,"timestamp":"2026-01-31T14:55:37.123Z"}

Then message lines::

    {"type":"message","id":…,"timestamp":…,"message":{"role":"user"|"assistant"|"tool",
     "content":…,"toolCalls"?:[{"id","name","arguments"}],"toolCallId"?,"toolName"?,
     "isError"?,"model"?,"usage"?:{"input","output","cacheRead","cacheWrite","total"}}}

and event lines, always this shape (the name apart from its data, so data keys can never
clash with the line's own keys)::

    {"type":"event","id":…,"timestamp":…,"event":"spawned"|"announce"|"status"|…,"data":{…}}

A tool call whose arguments were not a JSON object also carries ``rawArguments`` and
``argumentsError``. A message written by the gateway rather than a person or the model
carries ``meta`` (``{"kind": "subagent_completion", …}``); a compaction's summary carries
``{"kind": "compaction", "keep": N, …}``: from that line on, the conversation is the summary
followed by the N messages before it (the ones it did not replace).

Timestamps are UTC ISO-8601 with milliseconds and ``Z``; line ids are random 16-hex-digit
strings, unique within a transcript.

Readers tolerate a torn last line (a crash mid-write): it is reported, not raised. A
complete line that does not parse (possible only after outside edits) is skipped and
reported by number. :func:`repair_transcript` truncates a torn tail so the next append
starts on a fresh line; the writer runs it when it first opens a file.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import orjson

from gateway.llm import ChatMessage, ToolCall, Usage

log = logging.getLogger(__name__)

TRANSCRIPT_VERSION: Final = 1
#: The content of a tool result Herald makes up for a call whose result was never recorded.
INTERRUPTED_TOOL_RESULT: Final = "error: no result was recorded for this call (interrupted)"
#: ``meta.kind`` of a message that replaces the older part of the conversation.
COMPACTION_KIND: Final = "compaction"
_TAIL_CHUNK: Final = 64 * 1024
_ts_cache: tuple[int, str] = (-1, "")


def optional_iso(at: float | None) -> str | None:
    """:func:`iso_timestamp` of ``at``, or None when there is no time."""
    return iso_timestamp(at) if at is not None else None


def iso_timestamp(at: float | None = None) -> str:
    """``2026-01-31T14:55:37.123Z`` for ``at`` (epoch seconds; default now)."""
    global _ts_cache
    now = time.time() if at is None else at
    # Round to the millisecond first: 1769871337.123 is stored as …337.12299990654.
    seconds, millis = divmod(round(now * 1000), 1000)
    # Formatting the date dominates the cost of a line; it changes once a second.
    cached_seconds, prefix = _ts_cache
    if cached_seconds != seconds:
        prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
        _ts_cache = (seconds, prefix)
    return f"{prefix}.{millis:03d}Z"


def new_line_id() -> str:
    """A line id: 64 random bits as hex (unique within a transcript; not a secret)."""
    return f"{random.getrandbits(64):016x}"


def encode_line(record: Mapping[str, Any]) -> bytes:
    """One transcript line: the record as orjson bytes plus ``\\n``."""
    return orjson.dumps(record, default=_json_default, option=orjson.OPT_APPEND_NEWLINE)


def _json_default(value: object) -> object:
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def header_record(
    *,
    session_id: str,
    key: str,
    agent_id: str,
    parent_key: str | None,
    at: float | None = None,
) -> dict[str, Any]:
    """The header line (line 1) of a transcript, keys in the pinned order."""
    return {
        "type": "session",
        "version": TRANSCRIPT_VERSION,
        "id": session_id,
        "key": key,
        "agentId": agent_id,
        "parentSessionKey": parent_key,
        "timestamp": iso_timestamp(at),
    }


def tool_call_json(call: ToolCall) -> dict[str, Any]:
    """``{"id","name","arguments"}`` (+ raw text and error when the arguments were bad)."""
    out: dict[str, Any] = {"id": call.id, "name": call.name, "arguments": call.arguments}
    if call.arguments_error is not None:
        out["rawArguments"] = call.raw_arguments
        out["argumentsError"] = call.arguments_error
    return out


def message_record(
    message: ChatMessage,
    *,
    model: str | None = None,
    usage: Usage | None = None,
    at: float | None = None,
    meta: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A message line for ``message``; ``model``/``usage`` annotate an assistant reply, and
    ``meta`` says what wrote a message the person did not (a sub-agent completion, say)."""
    body: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        body["toolCalls"] = [tool_call_json(c) for c in message.tool_calls]
    if message.tool_call_id is not None:
        body["toolCallId"] = message.tool_call_id
    if message.tool_name is not None:
        body["toolName"] = message.tool_name
    if message.is_error:
        body["isError"] = True
    if model is not None:
        body["model"] = model
    if usage is not None:
        body["usage"] = usage.to_json()
    line = {"type": "message", "id": new_line_id(), "timestamp": iso_timestamp(at), "message": body}
    if meta:
        line["meta"] = dict(meta)
    return line


def event_record(
    name: str, data: Mapping[str, Any] | None = None, *, at: float | None = None
) -> dict[str, Any]:
    """An event line: ``{"type":"event","id","timestamp","event":name,"data":{…}}``."""
    return {
        "type": "event",
        "id": new_line_id(),
        "timestamp": iso_timestamp(at),
        "event": name,
        "data": dict(data or {}),
    }


@dataclass(frozen=True, slots=True)
class TranscriptContents:
    """What a transcript holds, with what could not be read.

    ``torn_bytes`` is the size of an unparseable last fragment (a crash mid-write), 0 when
    the file ends cleanly; ``bad_lines`` are 1-based numbers of complete lines that did not
    parse as JSON objects.
    """

    records: list[dict[str, Any]]
    torn_bytes: int = 0
    bad_lines: tuple[int, ...] = field(default=())

    @property
    def header(self) -> dict[str, Any] | None:
        first = self.records[0] if self.records else None
        return first if first is not None and first.get("type") == "session" else None

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The message lines (whole records, ``message`` inside)."""
        return [r for r in self.records if r.get("type") == "message"]


def parse_transcript(data: bytes) -> TranscriptContents:
    """Parse transcript bytes, tolerating a torn last line and skipping bad lines."""
    lines = data.split(b"\n")
    tail = lines.pop()
    records: list[dict[str, Any]] = []
    bad: list[int] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        parsed = _loads_object(line)
        if parsed is None:
            bad.append(number)
        else:
            records.append(parsed)
    torn = 0
    if tail.strip():
        # A whole object that only lacks its newline is kept; anything else was cut short.
        parsed = _loads_object(tail)
        if parsed is None:
            torn = len(tail)
        else:
            records.append(parsed)
    return TranscriptContents(records, torn, tuple(bad))


def _loads_object(line: bytes) -> dict[str, Any] | None:
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def read_transcript(path: Path) -> TranscriptContents:
    """Read and parse a transcript file (blocking; for the CLI and worker threads)."""
    with open(path, "rb") as file:
        contents = parse_transcript(file.read())
    _report(path, contents)
    return contents


async def aread_transcript(path: Path) -> TranscriptContents:
    """Read and parse a transcript file without blocking the event loop.

    A worker thread runs :func:`read_transcript` whole: cancelling the caller cannot strand
    an open file there (aiofiles leaks the file object when its ``open`` is cancelled).
    """
    return await asyncio.to_thread(read_transcript, path)


def read_lines(path: Path) -> list[dict[str, Any]]:
    """The records of a transcript; a torn last line or bad lines are logged, not raised."""
    return read_transcript(path).records


def _report(path: Path, contents: TranscriptContents) -> None:
    if contents.torn_bytes:
        log.warning("transcript %s: torn last line (%d bytes) ignored", path, contents.torn_bytes)
    if contents.bad_lines:
        log.warning("transcript %s: unreadable lines skipped: %s", path, contents.bad_lines)


def repair_transcript(path: Path) -> int:
    """Make ``path`` end on a line boundary; return how many torn bytes were cut off.

    A last line that is a whole JSON object without its newline gets the newline instead.
    A missing file is fine (0). Blocking: call it from a worker thread.
    """
    try:
        file = open(path, "r+b")  # noqa: SIM115 - the with below closes it
    except FileNotFoundError:
        return 0
    with file:
        size = file.seek(0, os.SEEK_END)
        if size == 0:
            return 0
        file.seek(size - 1)
        if file.read(1) == b"\n":
            return 0
        keep = _last_newline_end(file, size)
        file.seek(keep)
        tail = file.read()
        if _loads_object(tail) is not None:
            file.write(b"\n")
            log.warning("transcript %s: completed a last line that lacked its newline", path)
            return 0
        file.truncate(keep)
    log.warning("transcript %s: cut a torn last line of %d bytes", path, size - keep)
    return size - keep


def _last_newline_end(file: Any, size: int) -> int:
    """Offset just after the last ``\\n`` in ``file`` (0 if there is none)."""
    end = size
    while end > 0:
        start = max(0, end - _TAIL_CHUNK)
        file.seek(start)
        chunk: bytes = file.read(end - start)
        index = chunk.rfind(b"\n")
        if index >= 0:
            return start + index + 1
        end = start
    return 0


def chat_messages_from_records(
    records: Iterable[Mapping[str, Any]], *, close_dangling: bool = True
) -> list[ChatMessage]:
    """Rebuild the model conversation from transcript records.

    Message lines become :class:`ChatMessage` in order; headers and events are skipped. With
    ``close_dangling`` (the default) the result is the conversation a turn sends, always
    valid for a provider: a tool call whose result was never recorded (the gateway stopped
    mid-call) gets an error result :data:`INTERRUPTED_TOOL_RESULT` right after its turn, a
    tool result that answers no open call is dropped, and a compaction's message replaces
    everything before the messages it kept (:data:`COMPACTION_KIND`). Without it, every
    message line is returned as written.
    """
    if not close_dangling:
        messages = (chat_message_from_json(r.get("message") or {}) for r in _messages(records))
        return [message for message in messages if message is not None]
    fold = ConversationFold()
    fold.feed(records)
    return fold.conversation()


def _messages(records: Iterable[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
    return (record for record in records if record.get("type") == "message")


class ConversationFold:
    """The conversation a turn sends, built record by record: :meth:`feed` the records in
    order (all at once, or as the transcript grows), ask :meth:`conversation` at any point.
    What :func:`chat_messages_from_records` returns for the records fed so far."""

    __slots__ = ("_out", "_pending")

    def __init__(self) -> None:
        self._out: list[ChatMessage] = []
        #: Tool calls whose result has not been recorded yet: id → tool name.
        self._pending: dict[str, str] = {}

    def feed(self, records: Iterable[Mapping[str, Any]]) -> None:
        out, pending = self._out, self._pending
        for record in _messages(records):
            message = chat_message_from_json(record.get("message") or {})
            if message is None:
                continue
            if message.role == "tool":
                if message.tool_call_id in pending:
                    pending.pop(message.tool_call_id)
                    out.append(message)
                continue
            out.extend(_interrupted(pending))
            pending.clear()
            keep = _compaction_keep(record)
            if keep is not None:
                out[:] = [message, *out[max(0, len(out) - keep) :]] if keep else [message]
                continue
            out.append(message)
            pending.update((c.id, c.name) for c in message.tool_calls)

    def copy(self) -> ConversationFold:
        """A fold that goes on from here independently of this one."""
        twin = ConversationFold()
        twin._out = self._out.copy()
        twin._pending = self._pending.copy()
        return twin

    def conversation(self) -> list[ChatMessage]:
        """The conversation so far (a new list), calls still open closed as interrupted."""
        return [*self._out, *_interrupted(self._pending)]


def _interrupted(pending: Mapping[str, str]) -> list[ChatMessage]:
    return [
        ChatMessage(
            role="tool",
            content=INTERRUPTED_TOOL_RESULT,
            tool_call_id=call_id,
            tool_name=name,
            is_error=True,
        )
        for call_id, name in pending.items()
    ]


def _compaction_keep(record: Mapping[str, Any]) -> int | None:
    """How many earlier messages a compaction line keeps; None for any other line."""
    meta = record.get("meta")
    if not isinstance(meta, Mapping) or meta.get("kind") != COMPACTION_KIND:
        return None
    keep = meta.get("keep")
    return keep if isinstance(keep, int) and keep >= 0 else 0


def is_compaction_record(record: Mapping[str, Any]) -> bool:
    """Whether a transcript line is a compaction's summary or note."""
    return _compaction_keep(record) is not None


def chat_message_from_json(body: Mapping[str, Any]) -> ChatMessage | None:
    """One ``message`` object of a transcript line as a :class:`ChatMessage` (None if unusable)."""
    role = body.get("role")
    if role not in ("user", "assistant", "tool"):
        return None
    content = body.get("content")
    text = content if isinstance(content, str) else orjson.dumps(content).decode()
    calls = tuple(
        ToolCall(
            id=str(c.get("id", "")),
            name=str(c.get("name", "")),
            arguments=dict(c.get("arguments") or {}),
            raw_arguments=c.get("rawArguments"),
            arguments_error=c.get("argumentsError"),
        )
        for c in body.get("toolCalls") or ()
        if isinstance(c, dict)
    )
    return ChatMessage(
        role=role,
        content=text,
        tool_calls=calls,
        tool_call_id=body.get("toolCallId"),
        tool_name=body.get("toolName"),
        is_error=bool(body.get("isError", False)),
    )


async def load_chat_messages(path: Path, *, close_dangling: bool = True) -> list[ChatMessage]:
    """The conversation stored in the transcript at ``path`` (see
    :func:`chat_messages_from_records`), read without blocking the loop."""
    contents = await aread_transcript(path)
    return chat_messages_from_records(contents.records, close_dangling=close_dangling)
