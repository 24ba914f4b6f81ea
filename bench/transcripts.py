"""Transcript appends: 100,000 messages over 100 sessions against plain ``file.write``.

Run with ``python -m bench.transcripts``. Herald's side is what the runtime calls:
``SessionStore.append_message`` from 100 concurrent tasks (one per session, 1,000 messages
each: user, assistant with a tool call, tool result, assistant reply), then one
``flush()`` so every line has reached the OS before the clock stops. The message objects
are built before timing on both sides.

The baseline is a plain synchronous transcript writer: for each message, the same line
(same format code, so the same bytes but for line ids and timestamps) written with
``file.write`` to files opened once, interleaved across the 100 files as the sessions
were. Files are unbuffered (``buffering=0``): each line is handed to the OS by its own
call, which is Herald's promise for a line too (it is written within one writer cycle; a
crash cannot leave it in a user-space buffer). Rows for information: Herald against writing
the pre-encoded bytes Herald wrote (the bare I/O floor), and Herald when every append
waits for its own write (``wait=True``). Each timing is the best of a few alternating
rounds.

Goal (issue 3): Herald ≤ 2× the baseline.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._common import format_table, row
from gateway.llm import ChatMessage, ToolCall, Usage
from gateway.sessions import SessionKey, SessionStore, encode_line, message_record
from gateway.state import SessionRecord, SqliteStateDB

SESSIONS = 100
PER_SESSION = 1000
ROUNDS = 3
RATIO_GOAL = 2.0


def _messages() -> list[tuple[ChatMessage, str | None, Usage | None]]:
    words = "the quick brown fox jumps over the lazy dog while the gateway keeps notes "
    call = ToolCall(id="call_1", name="read", arguments={"path": "notes/today.md"})
    turn = [
        (ChatMessage(role="user", content=(words * 3)[:200]), None, None),
        (
            ChatMessage(role="assistant", content="", tool_calls=(call,)),
            "demo/scripted",
            Usage(1200, 40, 800, 0),
        ),
        (
            ChatMessage(
                role="tool", content=(words * 6)[:400], tool_call_id="call_1", tool_name="read"
            ),
            None,
            None,
        ),
        (
            ChatMessage(role="assistant", content=(words * 4)[:300]),
            "demo/scripted",
            Usage(1700, 90),
        ),
    ]
    return [turn[n % len(turn)] for n in range(PER_SESSION)]


async def _herald(state: Path, *, wait: bool) -> tuple[float, list[Path]]:
    db = await SqliteStateDB.open(state / "herald.db")
    store = SessionStore(state, db)
    try:
        records = [await store.ensure(SessionKey.webchat("main", f"c{n}")) for n in range(SESSIONS)]
        await store.flush()
        messages = _messages()

        async def session(record: SessionRecord) -> None:
            for message, model, usage in messages:
                await store.append_message(record, message, model=model, usage=usage, wait=wait)

        start = time.perf_counter()
        await asyncio.gather(*(session(r) for r in records))
        await store.flush()
        elapsed = time.perf_counter() - start
        return elapsed, [store.transcript_path(r) for r in records]
    finally:
        await store.aclose()
        await db.close()


def _sync_writer(target: Path) -> float:
    """The plain synchronous writer: format each message, ``file.write`` the line."""
    target.mkdir()
    messages = _messages()
    start = time.perf_counter()
    files = [open(target / f"{n}.jsonl", "ab", buffering=0) for n in range(SESSIONS)]  # noqa: SIM115
    try:
        for message, model, usage in messages:
            for file in files:
                file.write(encode_line(message_record(message, model=model, usage=usage)))
    finally:
        for file in files:
            file.close()
    return time.perf_counter() - start


def _raw_writes(lines: list[list[bytes]], target: Path) -> float:
    """Bare I/O: the bytes Herald wrote, one unbuffered ``file.write`` per line."""
    target.mkdir()
    start = time.perf_counter()
    files = [open(target / f"{n}.jsonl", "ab", buffering=0) for n in range(len(lines))]  # noqa: SIM115
    try:
        for index in range(PER_SESSION):
            for file, session_lines in zip(files, lines, strict=True):
                file.write(session_lines[index])
    finally:
        for file in files:
            file.close()
    return time.perf_counter() - start


def _written_lines(paths: list[Path]) -> list[list[bytes]]:
    out = []
    for path in paths:
        lines = path.read_bytes().splitlines(keepends=True)[1:]  # the header came before timing
        if len(lines) != PER_SESSION:
            raise SystemExit(f"bench.transcripts: {path} has {len(lines)} lines")
        out.append(lines)
    return out


async def _measure() -> list[dict[str, Any]]:
    queued: list[float] = []
    waited: list[float] = []
    plain: list[float] = []
    raw: list[float] = []
    for _ in range(ROUNDS):
        with tempfile.TemporaryDirectory(prefix="herald-bench-") as tmp:
            root = Path(tmp)
            elapsed, paths = await _herald(root / "queued", wait=False)
            queued.append(elapsed)
            plain.append(_sync_writer(root / "plain"))
            raw.append(_raw_writes(_written_lines(paths), root / "raw"))
            elapsed, _ = await _herald(root / "waited", wait=True)
            waited.append(elapsed)
    total = SESSIONS * PER_SESSION
    herald, base = min(queued), min(plain)
    return [
        row(
            f"s, {total:,} appends / {SESSIONS} sessions vs sync write",
            herald,
            base,
            f"ratio <= {RATIO_GOAL}",
        ),
        row("  same, vs writing pre-encoded bytes", herald, min(raw), "(information)"),
        row("  same, each append awaiting its write", min(waited), base, "(information)"),
    ]


def run() -> list[dict[str, Any]]:
    """Run the transcript benchmark and its baselines; return one row per figure."""
    return asyncio.run(_measure())


def main() -> None:
    """Print the benchmark's rows as a small table."""
    print(format_table(run()))


if __name__ == "__main__":
    main()
