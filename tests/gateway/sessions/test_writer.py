"""The transcript writer: whole lines under concurrency, modes, repair, errors, close."""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.files import DIR_MODE
from gateway.sessions import TranscriptWriteError, TranscriptWriter, TranscriptWriterClosedError
from gateway.sessions.paths import FILE_MODE

WriterFactory = Callable[..., TranscriptWriter]


@pytest.fixture
async def make_writer() -> AsyncIterator[WriterFactory]:
    made: list[TranscriptWriter] = []

    def make(**options: Any) -> TranscriptWriter:
        writer = TranscriptWriter(**options)
        made.append(writer)
        return writer

    yield make
    for writer in made:
        await writer.aclose()


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_new_files_are_0600_in_new_0700_directories(
    make_writer: WriterFactory, tmp_path: Path
) -> None:
    writer = make_writer()
    path = tmp_path / "state" / "agents" / "main" / "sessions" / "s.jsonl"
    await writer.append(path, {"type": "event"}, wait=True)
    assert _mode(path) == FILE_MODE
    for directory in (path.parent, path.parent.parent, tmp_path / "state"):
        assert _mode(directory) == DIR_MODE


async def test_many_tasks_writing_big_lines_never_interleave(
    make_writer: WriterFactory, tmp_path: Path
) -> None:
    # A small pending bound makes some appends wait for their own write as well.
    writer = make_writer(max_pending_bytes=512 * 1024)
    path = tmp_path / "t.jsonl"
    tasks, per_task = 24, 12

    async def producer(task: int) -> None:
        for seq in range(per_task):
            size = 1000 + (task * 7919 + seq * 104729) % 300_000  # up to ~300 kB
            await writer.append(path, {"task": task, "seq": seq, "pad": "x" * size})
            if seq % 3 == 0:
                await asyncio.sleep(0)

    await asyncio.gather(*(producer(t) for t in range(tasks)))
    await writer.flush()
    lines = path.read_bytes().split(b"\n")
    assert lines.pop() == b""
    records = [orjson.loads(line) for line in lines]  # raises if any line were mixed
    assert len(records) == tasks * per_task
    for task in range(tasks):
        seqs = [r["seq"] for r in records if r["task"] == task]
        assert seqs == list(range(per_task))  # each producer's lines stay in order


async def test_wait_returns_after_the_bytes_reached_the_file(
    make_writer: WriterFactory, tmp_path: Path
) -> None:
    writer = make_writer()
    path = tmp_path / "t.jsonl"
    await writer.write(path, b'{"a":1}\n', wait=True)
    assert path.read_bytes() == b'{"a":1}\n'


async def test_flush_waits_for_queued_lines(make_writer: WriterFactory, tmp_path: Path) -> None:
    writer = make_writer()
    path = tmp_path / "t.jsonl"
    for n in range(100):
        await writer.append(path, {"n": n})
    await writer.flush()
    assert len(path.read_bytes().splitlines()) == 100


async def test_first_open_cuts_a_torn_tail(make_writer: WriterFactory, tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"n":0}\n{"n":1,"cut')
    writer = make_writer()
    await writer.append(path, {"n": 2}, wait=True)
    assert path.read_bytes() == b'{"n":0}\n{"n":2}\n'


async def test_failed_write_reaches_waiter_and_next_flush(
    make_writer: WriterFactory, tmp_path: Path
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    bad = blocker / "t.jsonl"
    writer = make_writer()
    with pytest.raises(OSError, match="directory"):
        await writer.append(bad, {"n": 1}, wait=True)
    await writer.append(bad, {"n": 2})
    with pytest.raises(TranscriptWriteError) as info:
        await writer.flush()
    assert [path for path, _ in info.value.failures] == [bad, bad]
    await writer.flush()  # failures are reported once
    good = tmp_path / "ok.jsonl"
    await writer.append(good, {"n": 3}, wait=True)  # the writer keeps working
    assert good.read_bytes() == b'{"n":3}\n'


async def test_quiet_flush_leaves_failures_for_the_reporting_one(
    make_writer: WriterFactory, tmp_path: Path
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    writer = make_writer()
    await writer.append(blocker / "t.jsonl", {"n": 1})
    await writer.flush(report=False)
    with pytest.raises(TranscriptWriteError):
        await writer.flush()


async def test_release_lets_a_renamed_file_be_left_alone(
    make_writer: WriterFactory, tmp_path: Path
) -> None:
    writer = make_writer()
    path = tmp_path / "t.jsonl"
    await writer.append(path, {"n": 1})
    await writer.release([path])
    moved = tmp_path / "t.jsonl.deleted.x"
    os.rename(path, moved)
    await writer.append(path, {"n": 2}, wait=True)
    assert moved.read_bytes() == b'{"n":1}\n'
    assert path.read_bytes() == b'{"n":2}\n'


async def test_descriptor_cache_is_bounded(make_writer: WriterFactory, tmp_path: Path) -> None:
    writer = make_writer(max_open_files=2)
    for n in range(5):
        await writer.append(tmp_path / f"{n}.jsonl", {"n": n})
    await writer.append(tmp_path / "0.jsonl", {"n": 9}, wait=True)
    assert "files=2" in repr(writer)
    assert (tmp_path / "0.jsonl").read_bytes() == b'{"n":0}\n{"n":9}\n'


async def test_data_must_be_whole_lines(make_writer: WriterFactory, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="whole lines"):
        await make_writer().write(tmp_path / "t.jsonl", b'{"a":1}')


async def test_close_writes_what_was_queued_and_refuses_more(tmp_path: Path) -> None:
    writer = TranscriptWriter()
    path = tmp_path / "t.jsonl"
    for n in range(50):
        await writer.append(path, {"n": n})
    await writer.aclose()
    await writer.aclose()
    assert writer.closed
    assert len(path.read_bytes().splitlines()) == 50
    with pytest.raises(TranscriptWriterClosedError):
        await writer.append(path, {"n": 99})


async def test_close_of_an_unused_writer(tmp_path: Path) -> None:
    writer = TranscriptWriter()
    await writer.aclose()
    assert "closed" in repr(writer)
