"""The stdio reader's line assembly: lines whole below the size where cutting starts, long
strings cut at a whole character or escape however the chunks fall, a line too large
dropped with its request told, for both orders servers write a response's keys in."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from mcp import types

from gateway.mcp.lines import DroppedLine, LineReader, reader_cuts, uncut_length
from gateway.mcp.stdio import dropped_message

#: Characters whose JSON takes 1 to 12 bytes: escapes, 2-4 byte UTF-8, a surrogate pair
#: (written as ``\\ud83d\\ude00`` with ensure_ascii).
ALPHABET = ["a", "z", " ", '"', "\\", "\n", "\t", "é", "€", "😀", "\u2028", "/", "\x01"]


def random_text(rng: random.Random, length: int) -> str:
    return "".join(rng.choice(ALPHABET) for _ in range(length))


def random_document(rng: random.Random) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": rng.randint(0, 1000),
        "result": {
            "content": [
                {"type": "text", "text": random_text(rng, rng.randint(0, 120))}
                for _ in range(rng.randint(1, 4))
            ],
            "n": [rng.randint(-5, 5) for _ in range(3)],
            "flag": rng.random() < 0.5,
        },
    }


def chunks(data: bytes, rng: random.Random) -> list[bytes]:
    out, pos = [], 0
    while pos < len(data):
        size = rng.randint(1, 17)
        out.append(data[pos : pos + size])
        pos += size
    return out


def read_all(reader: LineReader, data: bytes, rng: random.Random) -> list[bytes | DroppedLine]:
    lines: list[bytes | DroppedLine] = []
    for chunk in chunks(data, rng):
        lines += reader.feed(chunk)
    return lines


def strings(value: Any) -> list[str]:
    """Every string of ``value`` (keys included), in order."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (k, *strings(v))]
    if isinstance(value, list):
        return [s for item in value for s in strings(item)]
    return []


@pytest.mark.parametrize("ascii_only", [True, False])
def test_lines_below_the_cutting_size_come_out_whole_however_they_are_chunked(
    ascii_only: bool,
) -> None:
    rng = random.Random(7)
    documents = [random_document(rng) for _ in range(200)]
    data = b"".join(json.dumps(d, ensure_ascii=ascii_only).encode() + b"\n" for d in documents)
    lines = read_all(LineReader(), data, rng)
    assert [json.loads(line) for line in lines if isinstance(line, bytes)] == documents
    assert len(lines) == len(documents)


@pytest.mark.parametrize("ascii_only", [True, False])
def test_long_strings_are_cut_at_a_whole_character_or_escape_with_a_note(
    ascii_only: bool,
) -> None:
    rng = random.Random(11)
    keep = 40
    for _ in range(300):
        document = random_document(rng)
        line = json.dumps(document, ensure_ascii=ascii_only).encode()
        reader = LineReader(large_line_bytes=0, string_keep_bytes=keep)
        (out,) = read_all(reader, line + b"\n", rng)
        assert isinstance(out, bytes)
        cut = json.loads(out)  # still JSON, whatever the cut fell on
        assert [cut["id"], cut["result"]["n"], cut["result"]["flag"]] == [
            document["id"],
            document["result"]["n"],
            document["result"]["flag"],
        ]
        for before, after in zip(strings(document), strings(cut), strict=True):
            sent = json.dumps(before, ensure_ascii=ascii_only)[1:-1].encode()
            if len(sent) <= keep:
                assert after == before
                continue
            ((total, kept),) = reader_cuts(after)
            assert total == len(sent)
            assert kept <= keep
            shown = after[: after.index("\n[cut:")]
            assert before.startswith(shown)
            assert len(json.dumps(shown, ensure_ascii=ascii_only)[1:-1].encode()) == kept
            assert uncut_length(after) == len(shown) + total - kept


def test_a_40_mib_string_keeps_its_first_bytes_only() -> None:
    text = "x" * (40 * 1024 * 1024)
    line = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"text": text}}).encode()
    reader = LineReader()
    lines: list[bytes | DroppedLine] = []
    for pos in range(0, len(line), 65536):
        lines += reader.feed(line[pos : pos + 65536])
    lines += reader.feed(b"\n")
    (out,) = lines
    assert isinstance(out, bytes)
    assert len(out) < 300 * 1024
    shown = json.loads(out)["result"]["text"]
    assert shown.endswith(f"\n[cut: {len(text):,} bytes, showing the first 262,144]")
    assert uncut_length(shown) == len(text)


@pytest.mark.parametrize(
    ("line", "request_id"),
    [
        # The Python SDK's order: the id first.
        (b'{"jsonrpc":"2.0","id":7,"result":{"content":[' + b'{"a":"b"},' * 9999 + b"{}]}}", 7),
        # The TypeScript SDK's order: the result first, the id last.
        (
            b'{"result":{"content":[' + b'{"a":"b"},' * 9999 + b'{}]},"jsonrpc":"2.0","id":"r-1"}',
            "r-1",
        ),
        # A request of the server's: not an answer to any of ours.
        (b'{"jsonrpc":"2.0","id":7,"method":"x","params":{"v":[' + b"1," * 99999 + b"1]}}", None),
    ],
)
def test_a_line_past_the_limit_is_dropped_and_its_request_told(
    line: bytes, request_id: int | str | None
) -> None:
    reader = LineReader(max_line_bytes=4096)
    lines = read_all(reader, line + b'\n{"jsonrpc":"2.0","id":8,"result":{}}\n', random.Random(3))
    dropped, after = lines
    assert isinstance(dropped, DroppedLine)
    assert dropped.size == len(line)
    assert len(dropped.head) <= 512
    assert len(dropped.tail) <= 512
    assert isinstance(after, bytes)
    assert json.loads(after)["id"] == 8  # the next line is whole
    told = dropped_message(dropped, 4096)
    if request_id is None:
        assert isinstance(told, ValueError)
        return
    assert not isinstance(told, Exception)
    error = told.message
    assert isinstance(error, types.JSONRPCError)
    assert error.id == request_id
    assert f"{len(line):,} bytes" in error.error.message
