"""The transcript format: exact header, message and event lines, torn tails, replay."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson

from gateway.llm import ChatMessage, Role, ToolCall, Usage
from gateway.sessions import (
    chat_messages_from_records,
    event_record,
    header_record,
    iso_timestamp,
    load_chat_messages,
    message_record,
    parse_transcript,
    read_lines,
    repair_transcript,
)
from gateway.sessions.transcript import INTERRUPTED_TOOL_RESULT, encode_line

TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
SID = "1b4e28ba-2fa1-4d2b-883f-0016d3cca427"


def test_timestamps_are_utc_iso_with_millis() -> None:
    assert iso_timestamp(1769871337.123) == "2026-01-31T14:55:37.123Z"
    assert iso_timestamp(0) == "1970-01-01T00:00:00.000Z"
    assert TIMESTAMP.match(iso_timestamp())


def test_header_is_exact() -> None:
    line = encode_line(
        header_record(
            session_id=SID,
            key="agent:main:subagent:" + SID,
            agent_id="main",
            parent_key="agent:main:main",
            at=1769871337.123,
        )
    )
    assert line == (
        b'{"type":"session","version":1,"id":"' + SID.encode() + b'",'
        b'"key":"agent:main:subagent:' + SID.encode() + b'","agentId":"main",'
        b'"parentSessionKey":"agent:main:main","timestamp":"2026-01-31T14:55:37.123Z"}\n'
    )


def test_header_without_parent_has_null() -> None:
    record = header_record(session_id=SID, key="agent:main:main", agent_id="main", parent_key=None)
    assert record["parentSessionKey"] is None
    assert list(record) == [
        "type",
        "version",
        "id",
        "key",
        "agentId",
        "parentSessionKey",
        "timestamp",
    ]


def test_assistant_message_line_carries_tool_calls_model_and_usage() -> None:
    message = ChatMessage(
        role="assistant",
        content="Looking.",
        tool_calls=(ToolCall(id="call_1", name="read", arguments={"path": "a.txt"}),),
    )
    record = message_record(message, model="demo/scripted", usage=Usage(10, 5, 2, 1))
    assert list(record) == ["type", "id", "timestamp", "message"]
    assert record["type"] == "message"
    assert TIMESTAMP.match(record["timestamp"])
    assert record["message"] == {
        "role": "assistant",
        "content": "Looking.",
        "toolCalls": [{"id": "call_1", "name": "read", "arguments": {"path": "a.txt"}}],
        "model": "demo/scripted",
        "usage": {"input": 10, "output": 5, "cacheRead": 2, "cacheWrite": 1, "total": 15},
    }


def test_tool_and_user_lines_carry_only_what_applies() -> None:
    tool = message_record(
        ChatMessage(role="tool", content="nope", tool_call_id="c1", tool_name="read", is_error=True)
    )
    assert tool["message"] == {
        "role": "tool",
        "content": "nope",
        "toolCallId": "c1",
        "toolName": "read",
        "isError": True,
    }
    user = message_record(ChatMessage(role="user", content="hi"))
    assert user["message"] == {"role": "user", "content": "hi"}


def test_bad_tool_arguments_keep_the_raw_text() -> None:
    call = ToolCall(id="c", name="read", raw_arguments="{oops", arguments_error="not JSON")
    record = message_record(ChatMessage(role="assistant", content="", tool_calls=(call,)))
    assert record["message"]["toolCalls"] == [
        {
            "id": "c",
            "name": "read",
            "arguments": {},
            "rawArguments": "{oops",
            "argumentsError": "not JSON",
        }
    ]


def test_event_line_shape() -> None:
    record = event_record("spawned", {"runId": "r1", "path": Path("/x")})
    assert list(record) == ["type", "id", "timestamp", "event", "data"]
    assert record["event"] == "spawned"
    assert orjson.loads(encode_line(record))["data"] == {"runId": "r1", "path": "/x"}


def test_line_ids_differ() -> None:
    ids = {event_record("status")["id"] for _ in range(1000)}
    assert len(ids) == 1000


def test_unicode_and_newlines_stay_on_one_line() -> None:
    line = encode_line(message_record(ChatMessage(role="user", content="héllo\nwörld 🎉\u2028")))
    assert line.count(b"\n") == 1
    assert line.endswith(b"\n")
    assert orjson.loads(line)["message"]["content"] == "héllo\nwörld 🎉\u2028"


def test_torn_last_line_is_tolerated_and_reported() -> None:
    good = encode_line(event_record("status", {"n": 1}))
    contents = parse_transcript(good + good + b'{"type":"mess')
    assert len(contents.records) == 2
    assert contents.torn_bytes == len(b'{"type":"mess')
    assert contents.bad_lines == ()


def test_whole_last_object_without_newline_is_kept() -> None:
    good = encode_line(event_record("status"))
    contents = parse_transcript(good + good.rstrip(b"\n"))
    assert len(contents.records) == 2
    assert contents.torn_bytes == 0


def test_unreadable_middle_lines_are_skipped_and_numbered() -> None:
    good = encode_line(event_record("status"))
    contents = parse_transcript(good + b"garbage\n" + b"[1,2]\n" + good)
    assert len(contents.records) == 2
    assert contents.bad_lines == (2, 3)


def test_read_lines_tolerates_a_torn_file(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    good = encode_line(event_record("status"))
    path.write_bytes(good + b'{"torn"')
    assert len(read_lines(path)) == 1


def test_repair_cuts_a_torn_tail(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    good = encode_line(event_record("status"))
    path.write_bytes(good + good + b'{"type":"message","mess')
    assert repair_transcript(path) == len(b'{"type":"message","mess')
    assert path.read_bytes() == good + good
    assert repair_transcript(path) == 0


def test_repair_completes_a_whole_last_object(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    good = encode_line(event_record("status"))
    path.write_bytes(good + good.rstrip(b"\n"))
    assert repair_transcript(path) == 0
    assert path.read_bytes() == good + good


def test_repair_of_a_file_with_only_a_fragment_empties_it(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"x" * 200_000)  # longer than one backwards read
    assert repair_transcript(path) == 200_000
    assert path.read_bytes() == b""


def test_repair_of_a_missing_file_is_a_no_op(tmp_path: Path) -> None:
    assert repair_transcript(tmp_path / "absent.jsonl") == 0


CONVERSATION = [
    ChatMessage(role="user", content="read a.txt please"),
    ChatMessage(
        role="assistant",
        content="",
        tool_calls=(ToolCall(id="c1", name="read", arguments={"path": "a.txt"}),),
    ),
    ChatMessage(role="tool", content="hello", tool_call_id="c1", tool_name="read"),
    ChatMessage(role="assistant", content="It says hello."),
]


def test_conversation_round_trips_through_records() -> None:
    records = [
        header_record(session_id=SID, key="agent:main:main", agent_id="main", parent_key=None)
    ]
    records += [message_record(m) for m in CONVERSATION]
    records.insert(2, event_record("status", {"state": "running"}))
    lines = b"".join(encode_line(r) for r in records)
    assert chat_messages_from_records(parse_transcript(lines).records) == CONVERSATION


def test_dangling_tool_calls_get_an_interrupted_result() -> None:
    calls = (ToolCall(id="c1", name="read"), ToolCall(id="c2", name="ls"))
    records = [
        message_record(ChatMessage(role="user", content="go")),
        message_record(ChatMessage(role="assistant", content="", tool_calls=calls)),
        message_record(ChatMessage(role="tool", content="ok", tool_call_id="c1", tool_name="read")),
        message_record(ChatMessage(role="user", content="still there?")),
    ]
    out = chat_messages_from_records(records)
    assert [(m.role, m.tool_call_id, m.is_error) for m in out] == [
        ("user", None, False),
        ("assistant", None, False),
        ("tool", "c1", False),
        ("tool", "c2", True),
        ("user", None, False),
    ]
    assert out[3].content == INTERRUPTED_TOOL_RESULT
    assert out[3].tool_name == "ls"


def test_calls_open_at_the_end_are_closed_and_orphan_results_dropped() -> None:
    records = [
        message_record(ChatMessage(role="tool", content="orphan", tool_call_id="zz")),
        message_record(
            ChatMessage(role="assistant", content="", tool_calls=(ToolCall(id="c9", name="x"),))
        ),
    ]
    out = chat_messages_from_records(records)
    assert [(m.role, m.tool_call_id) for m in out] == [("assistant", None), ("tool", "c9")]
    raw = chat_messages_from_records(records, close_dangling=False)
    assert [m.role for m in raw] == ["tool", "assistant"]


def test_a_compaction_replaces_what_it_summarised_when_read_back() -> None:
    def say(role: Role, text: str) -> dict[str, Any]:
        return message_record(ChatMessage(role=role, content=text))

    summary = ChatMessage(role="user", content="[summary] q1 and q2")
    records = [
        say("user", "q1"),
        say("assistant", "a1"),
        say("user", "q2"),
        say("assistant", "a2"),
        say("user", "q3"),
        event_record("compaction", {"keep": 1}),
        message_record(summary, meta={"kind": "compaction", "keep": 1}),
        say("assistant", "a3"),
        say("user", "q4"),
        # A second compaction folds in the first summary: nothing of it is kept.
        message_record(
            ChatMessage(role="user", content="[summary] q1 to q3"),
            meta={"kind": "compaction", "keep": 1},
        ),
    ]
    first = chat_messages_from_records(records[:8])
    assert [m.content for m in first] == ["[summary] q1 and q2", "q3", "a3"]
    assert [m.content for m in chat_messages_from_records(records)] == [
        "[summary] q1 to q3",
        "q4",
    ]
    # Raw, every line is there, as written.
    raw = chat_messages_from_records(records, close_dangling=False)
    assert len(raw) == 9


async def test_load_chat_messages_reads_a_file(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"".join(encode_line(message_record(m)) for m in CONVERSATION) + b'{"tor')
    assert await load_chat_messages(path) == CONVERSATION
