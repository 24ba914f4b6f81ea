"""Windows and last messages of transcripts, read from where they lie in the file."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.sessions import lines as lines_module
from gateway.sessions import parse_transcript
from gateway.sessions.reading import TranscriptReader


def _line(n: int, size: int = 0) -> dict[str, Any]:
    role = ("user", "assistant", "tool")[n % 3]
    body: dict[str, Any] = {"role": role, "content": f"m{n}" + "x" * size}
    if role == "tool":
        body["toolCallId"] = f"c{n}"
    return {"type": "message", "id": f"{n:016x}", "message": body}


def _write(path: Path, records: list[dict[str, Any]], tail: bytes = b"") -> None:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records) + tail)


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    # Many marks and many block edges even in a small file.
    monkeypatch.setattr(lines_module, "BLOCK_BYTES", 97)


async def test_every_window_is_the_slice_a_whole_parse_gives(tmp_path: Path) -> None:
    rng = random.Random(7)
    path = tmp_path / "t.jsonl"
    records = [{"type": "session", "id": "s"}] + [_line(n, rng.randrange(80)) for n in range(60)]
    _write(path, records)
    reader = TranscriptReader()
    whole = parse_transcript(path.read_bytes()).records
    for _ in range(80):
        limit = rng.randrange(1, 20)
        before = rng.choice([None, rng.randrange(0, 70)])
        span, window = await reader.window(path, limit=limit, before=before)
        end = len(whole) if before is None else min(before, len(whole))
        start = max(0, end - limit)
        assert (span.start, span.end, span.total) == (start, end, len(whole))
        assert window == whole[start:end]


async def test_a_file_that_grew_was_replaced_or_was_cut_is_read_as_it_is_now(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.jsonl"
    records = [_line(n) for n in range(30)]
    _write(path, records)
    reader = TranscriptReader()
    assert (await reader.window(path, limit=2))[1] == records[28:]
    more = [_line(n) for n in range(30, 45)]
    with path.open("ab") as file:
        file.write(b"".join(orjson.dumps(r) + b"\n" for r in more))
    span, window = await reader.window(path, limit=3)
    assert (span.total, window) == (45, more[-3:])
    replacement = tmp_path / "new.jsonl"
    _write(replacement, records[:5])
    os.replace(replacement, path)
    span, window = await reader.window(path, limit=50)
    assert (span.total, window) == (5, records[:5])
    with path.open("r+b") as file:
        file.truncate(len(orjson.dumps(records[0])) + 1)
    span, window = await reader.window(path, limit=50)
    assert (span.total, window) == (1, records[:1])


async def test_a_torn_tail_is_left_out_a_bad_line_keeps_its_place(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    records = [_line(n) for n in range(4)]
    path.write_bytes(
        b"".join(orjson.dumps(r) + b"\n" for r in records[:2])
        + b"not json\n"
        + orjson.dumps(records[2])
        + b"\n"
        + b'{"type":"mess'
    )
    span, window = await TranscriptReader().window(path, limit=10)
    assert (span.total, span.torn_bytes, span.bad_lines) == (4, len(b'{"type":"mess'), [3])
    assert window == [records[0], records[1], None, records[2]]
    # A last line that only lacks its newline is a record.
    path.write_bytes(orjson.dumps(records[0]) + b"\n" + orjson.dumps(records[1]))
    span, window = await TranscriptReader().window(path, limit=1)
    assert (span.start, span.total, span.torn_bytes, window) == (1, 2, 0, [records[1]])


async def test_a_missing_file_is_an_empty_window_and_has_no_messages(tmp_path: Path) -> None:
    reader = TranscriptReader()
    span, window = await reader.window(tmp_path / "gone.jsonl", limit=5)
    assert (span.total, window) == (0, [])
    assert await reader.last_messages(tmp_path / "gone.jsonl", limit=5, include_tools=True) == []


async def test_last_messages_read_backwards_skip_tools_events_and_summaries(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.jsonl"
    records: list[dict[str, Any]] = [{"type": "session", "id": "s"}]
    for n in range(40):
        records.append(_line(n, n))
        records.append({"type": "event", "id": f"e{n}", "event": "status", "data": {}})
    summary = _line(99)
    summary["meta"] = {"kind": "compaction", "keep": 2}
    records.insert(-4, summary)
    _write(path, records, tail=b"not json")
    reader = TranscriptReader()
    got = await reader.last_messages(path, limit=5, include_tools=False)
    messages = [r for r in records if r["type"] == "message" and r is not summary]
    wanted = [r for r in messages if r["message"]["role"] != "tool"][-5:]
    assert [m["id"] for m in got] == [r["id"] for r in wanted]
    assert got[-1]["content"] == wanted[-1]["message"]["content"]
    with_tools = await reader.last_messages(path, limit=3, include_tools=True)
    assert [m["id"] for m in with_tools] == [r["id"] for r in messages[-3:]]
