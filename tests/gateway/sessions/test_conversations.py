"""A conversation read from a growing transcript: always what a whole read gives, at the
cost of the lines written since the last read."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.llm import ChatMessage, ToolCall
from gateway.sessions.conversations import ConversationReader
from gateway.sessions.transcript import (
    ConversationFold,
    chat_messages_from_records,
    encode_line,
    event_record,
    message_record,
    parse_transcript,
)


def whole(path: Path) -> list[ChatMessage]:
    """What reading the whole file gives."""
    return chat_messages_from_records(parse_transcript(path.read_bytes()).records)


def say(role: Any, text: str, **meta: Any) -> dict[str, Any]:
    return message_record(ChatMessage(role=role, content=text), meta=meta or None)


def call(call_id: str) -> dict[str, Any]:
    calls = (ToolCall(id=call_id, name="ls", arguments={}),)
    return message_record(ChatMessage(role="assistant", content="", tool_calls=calls))


def result(call_id: str) -> dict[str, Any]:
    return message_record(
        ChatMessage(role="tool", content=f"out {call_id}", tool_call_id=call_id, tool_name="ls")
    )


#: Every kind of line a transcript holds: turns, tool calls answered or cut off, results
#: answering nothing, compactions keeping some or none, events, a line that does not parse.
KINDS = ("user", "assistant", "call", "result", "compaction", "event", "garbage")


def line(kind: str, n: int) -> bytes:
    if kind == "garbage":
        return b"{not json\n"
    record = {
        "user": lambda: say("user", f"q{n}"),
        "assistant": lambda: say("assistant", f"a{n}"),
        "call": lambda: call(f"c{n % 4}"),
        "result": lambda: result(f"c{n % 4}"),
        "compaction": lambda: say("user", f"[summary] {n}", kind="compaction", keep=n % 5),
        "event": lambda: event_record("compaction", {"keep": n % 5}),
    }[kind]()
    return encode_line(record)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    lines=st.lists(st.tuples(st.sampled_from(KINDS), st.integers(0, 9)), max_size=40),
    cuts=st.lists(st.integers(0, 4000), max_size=8),
)
def test_each_read_of_a_growing_file_is_a_whole_read(
    tmp_path: Path, lines: list[tuple[str, int]], cuts: list[int]
) -> None:
    # The file grows in pieces cut anywhere (mid-line too), read after each piece.
    data = b"".join(line(kind, n) for kind, n in lines)
    path = tmp_path / "grows.jsonl"
    path.write_bytes(b"")
    reader = ConversationReader()
    written = 0
    for cut in [*sorted(cuts), len(data)]:
        end = min(cut, len(data))
        with path.open("ab") as file:
            file.write(data[written:end])
        written = max(written, end)
        assert reader.read(path) == whole(path)


def test_a_read_parses_only_what_was_written_since(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    first = encode_line(say("user", "first question"))
    path.write_bytes(first + encode_line(say("assistant", "a")))
    reader = ConversationReader()
    assert [m.content for m in reader.read(path)] == ["first question", "a"]
    # Overwrite the first line in place (same size): a reader that went back over it would
    # lose the message; this one never reads it again.
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, b"x" * (len(first) - 1) + b"\n", 0)
    finally:
        os.close(fd)
    with path.open("ab") as file:
        file.write(encode_line(say("user", "second")))
    assert [m.content for m in reader.read(path)] == ["first question", "a", "second"]
    assert [m.content for m in whole(path)] == ["a", "second"]


def test_a_replaced_or_shortened_file_is_read_whole_again(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(encode_line(say("user", "old")) + encode_line(say("assistant", "reply")))
    reader = ConversationReader()
    assert len(reader.read(path)) == 2
    replaced = tmp_path / "new.jsonl"
    replaced.write_bytes(encode_line(say("user", "new")))
    os.replace(replaced, path)  # another inode at the same name
    assert [m.content for m in reader.read(path)] == ["new"]
    with path.open("ab") as file:
        file.write(encode_line(say("assistant", "a longer reply than the file had before")))
    assert len(reader.read(path)) == 2
    os.truncate(path, len(encode_line(say("user", "new"))))  # cut short, same inode
    assert [m.content for m in reader.read(path)] == ["new"]


def test_only_the_last_files_are_kept(tmp_path: Path) -> None:
    reader = ConversationReader(kept=2)
    paths = [tmp_path / f"{n}.jsonl" for n in range(3)]
    for n, path in enumerate(paths):
        path.write_bytes(encode_line(say("user", f"q{n}")))
        reader.read(path)
    assert repr(reader) == "<ConversationReader folds=2/2>"


def test_a_whole_last_line_without_its_newline_counts_as_in_a_whole_read(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(encode_line(say("user", "q")) + encode_line(say("assistant", "a"))[:-1])
    reader = ConversationReader()
    assert [m.content for m in reader.read(path)] == ["q", "a"] == [m.content for m in whole(path)]
    with path.open("ab") as file:  # its newline arrives, then the next line
        file.write(b"\n" + encode_line(say("user", "q2")))
    assert [m.content for m in reader.read(path)] == ["q", "a", "q2"]


def test_a_read_that_failed_half_way_starts_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(encode_line(say("user", "q")))
    reader = ConversationReader()
    reader.read(path)
    with path.open("ab") as file:
        file.write(encode_line(say("assistant", "a")) + encode_line(say("user", "q2")))
    real_feed = ConversationFold.feed

    def feed_one_then_fail(self: ConversationFold, records: Any) -> None:
        real_feed(self, list(records)[:1])
        raise RuntimeError("cut off")

    monkeypatch.setattr(ConversationFold, "feed", feed_one_then_fail)
    with pytest.raises(RuntimeError):
        reader.read(path)
    monkeypatch.setattr(ConversationFold, "feed", real_feed)
    assert reader.read(path) == whole(path)
    assert [m.content for m in whole(path)] == ["q", "a", "q2"]
