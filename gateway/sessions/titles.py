"""A session's title, for people: where it lives and how it began.

``Web chat — research the history of the telegraph…``, ``Slack channel C0123 (thread) —
deploy status?``, ``Sub-agent tea — Write a short history of tea``: the chat (from the
session's origin, else its key) and the first words of its first message. The first message
and the model of the first reply come from the head of the transcript, read up to
:data:`HEAD_BYTES` (a title costs a small read, never the whole file).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

import orjson

from gateway.state import SessionRecord

#: How much of a transcript is read for its first message: the header, the user's first
#: line and usually the first reply fit.
HEAD_BYTES: Final = 16 * 1024
#: Words of the first message a title keeps.
TITLE_WORDS: Final = 8
#: Characters of the first message a title keeps at most (a paste of one long word).
TITLE_CHARS: Final = 60
CHANNEL_NAMES: Final = {"slack": "Slack", "discord": "Discord", "webchat": "Web chat"}


@dataclass(frozen=True, slots=True)
class TranscriptHead:
    """What a transcript's first lines say: its first user message and first reply's model."""

    first_message: str | None = None
    model: str | None = None


def read_head(path: Path | None) -> TranscriptHead:
    """The first user message and model in the first :data:`HEAD_BYTES` of ``path``
    (nothing when there is no file, or nothing there yet)."""
    if path is None:
        return TranscriptHead()
    try:
        with path.open("rb") as file:
            data = file.read(HEAD_BYTES)
    except OSError:
        return TranscriptHead()
    first: str | None = None
    model: str | None = None
    for raw in data.split(b"\n")[:-1] if len(data) == HEAD_BYTES else data.split(b"\n"):
        try:
            line = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        body = line.get("message") if isinstance(line, dict) else None
        meta = line.get("meta") if isinstance(line, dict) else None
        # A message with a meta kind (a completion, a summary) is not a person's words; a
        # person's carries at most its inbound row's id.
        if not isinstance(body, dict) or (isinstance(meta, dict) and meta.get("kind")):
            continue
        if first is None and body.get("role") == "user" and isinstance(body.get("content"), str):
            first = body["content"]
        if model is None and body.get("role") == "assistant" and isinstance(body.get("model"), str):
            model = body["model"]
        if first is not None and model is not None:
            break
    return TranscriptHead(first, model)


def place(record: SessionRecord) -> str:
    """Where the session lives, in words."""
    if record.kind == "subagent":
        return f"Sub-agent {record.label}" if record.label else "Sub-agent"
    origin = record.origin
    if origin is None:
        # agent:<id>:<channel>:… names its chat even before the chat's origin is recorded.
        channel = record.key.split(":")[2] if record.key.count(":") >= 2 else ""
        if channel in CHANNEL_NAMES:
            return CHANNEL_NAMES[channel]
        return "Main session" if record.key.endswith(":main") else record.key
    channel = CHANNEL_NAMES.get(origin.channel, origin.channel.capitalize())
    if origin.channel == "webchat":
        return channel
    where = "DM" if origin.chat_type == "dm" else "channel"
    thread = " (thread)" if origin.thread_id and origin.chat_type != "dm" else ""
    return f"{channel} {where} {origin.chat_id}{thread}"


def first_words(text: str) -> str:
    """The first :data:`TITLE_WORDS` words of ``text`` on one line, ``…`` when cut."""
    words = text.split()
    shown = " ".join(words[:TITLE_WORDS])
    if len(shown) > TITLE_CHARS:
        shown = shown[: TITLE_CHARS - 1].rstrip()
        return shown + "…"
    return shown + ("…" if len(words) > TITLE_WORDS else "")


def session_title(record: SessionRecord, head: TranscriptHead) -> str:
    """``<place> — <first words>``, or the place alone before any message."""
    where = place(record)
    if head.first_message and head.first_message.strip():
        return f"{where} — {first_words(head.first_message)}"
    return where
