"""Session titles: where a session lives and the first words of its first message."""

from __future__ import annotations

from pathlib import Path

import orjson

from gateway.sessions.titles import HEAD_BYTES, TranscriptHead, read_head, session_title
from gateway.state import Origin, SessionKind, SessionRecord


def record(key: str, **fields: object) -> SessionRecord:
    kind: SessionKind = "subagent" if ":subagent:" in key else "main"
    return SessionRecord(
        key=key,
        session_id="s",
        agent_id="main",
        kind=kind,
        created_at=0,
        updated_at=0,
        **fields,  # type: ignore[arg-type]
    )


def write(path: Path, *lines: dict[str, object]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    return path


def message(role: str, content: str, **extra: object) -> dict[str, object]:
    return {"type": "message", "message": {"role": role, "content": content, **extra}}


def test_the_head_gives_the_first_message_and_the_first_reply_s_model(tmp_path: Path) -> None:
    path = write(
        tmp_path / "t.jsonl",
        {"type": "session", "id": "s"},
        {**message("user", "[sub-agent completion] …"), "meta": {"kind": "subagent_completion"}},
        {**message("user", "deploy status?"), "meta": {"inbound": "7"}},
        message("assistant", "All green.", model="openai/gpt-4o-mini"),
    )
    assert read_head(path) == TranscriptHead("deploy status?", "openai/gpt-4o-mini")
    assert read_head(tmp_path / "missing.jsonl") == TranscriptHead()
    assert read_head(None) == TranscriptHead()


def test_only_the_head_of_a_long_transcript_is_read(tmp_path: Path) -> None:
    filler = message("user", "x" * (HEAD_BYTES * 2))
    path = write(tmp_path / "t.jsonl", filler, message("user", "after the head"))
    assert read_head(path) == TranscriptHead()  # the cut first line is not guessed at


def test_titles_say_where_and_how_it_began() -> None:
    slack = Origin("slack", "default", "C0123", thread_id="1700.1", chat_type="channel")
    words = "please look into why the nightly deploy failed again last night"
    assert (
        session_title(record("agent:main:slack:channel:c0123", origin=slack), TranscriptHead(words))
        == "Slack channel C0123 (thread) — please look into why the nightly deploy failed…"
    )
    dm = Origin("discord", "default", "42", chat_type="dm")
    assert session_title(record("agent:main:discord:dm:42", origin=dm), TranscriptHead()) == (
        "Discord DM 42"
    )
    web = Origin("webchat", "default", "ab12", chat_type="dm")
    assert session_title(record("agent:main:webchat:ab12", origin=web), TranscriptHead("hi")) == (
        "Web chat — hi"
    )
    child = record("agent:main:subagent:1", label="tea")
    assert session_title(child, TranscriptHead("Write a short history of tea")) == (
        "Sub-agent tea — Write a short history of tea"
    )
    assert session_title(record("agent:main:main"), TranscriptHead()) == "Main session"
    long_word = "y" * 100
    title = session_title(record("agent:main:main"), TranscriptHead(long_word))
    assert title.endswith("…")
    assert len(title) < 80
