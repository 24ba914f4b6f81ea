"""The session store: records and transcripts in step, history, usage, archive by rename."""

from __future__ import annotations

import asyncio
import os
import re
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest

from gateway.llm import ChatMessage, ToolCall, Usage
from gateway.sessions import (
    InvalidIdError,
    SessionArchivedError,
    SessionKey,
    SessionKeyError,
    SessionNotFoundError,
    SessionStore,
)
from gateway.state import Origin
from tests.gateway.sessions.support import opened_store

ARCHIVED_NAME = re.compile(
    r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    r"\.jsonl\.deleted\.\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d\.\d{3}Z$"
)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SessionStore]:
    async with opened_store(tmp_path / "state") as opened:
        yield opened


def _lines(path: Path) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


async def test_ensure_creates_the_row_and_the_header(store: SessionStore, tmp_path: Path) -> None:
    record = await store.ensure("agent:main:main", label="home", model="demo/scripted")
    assert (record.kind, record.agent_id, record.label, record.model) == (
        "main",
        "main",
        "home",
        "demo/scripted",
    )
    path = store.transcript_path(record)
    assert path == (
        tmp_path / "state" / "agents" / "main" / "sessions" / f"{record.session_id}.jsonl"
    )
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    (header,) = _lines(path)
    assert header["type"] == "session"
    assert header["version"] == 1
    assert (header["id"], header["key"], header["agentId"], header["parentSessionKey"]) == (
        record.session_id,
        "agent:main:main",
        "main",
        None,
    )
    assert await store.ensure("agent:main:main") == record


async def test_concurrent_ensures_create_one_session(store: SessionStore) -> None:
    key = SessionKey.subagent("main")
    records = await asyncio.gather(
        *(store.ensure(key, parent_key="agent:main:main") for _ in range(10))
    )
    assert len({r.session_id for r in records}) == 1
    files = list(store.transcript_path(records[0]).parent.iterdir())
    assert len(files) == 1
    assert len(_lines(files[0])) == 1
    assert _lines(files[0])[0]["parentSessionKey"] == "agent:main:main"
    assert records[0].kind == "subagent"


async def test_a_lookup_that_missed_before_a_creation_finished_does_not_create_again(
    store: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second caller's lookup starts before the first caller's row exists and returns
    after that creation has finished and left the in-flight table: it must find the row."""
    key = str(SessionKey.subagent("main"))
    real_get = store.db.sessions.get
    created = asyncio.Event()
    calls = 0

    async def get(text: str) -> object:
        nonlocal calls
        calls += 1
        call = calls
        found = await real_get(text)
        if call == 2:  # the second caller's lookup: stale by the time it returns
            await created.wait()
            await asyncio.sleep(0)  # the creation task's done callback runs
            return None
        return found

    monkeypatch.setattr(store.db.sessions, "get", get)
    first = asyncio.create_task(store.ensure(key))
    await asyncio.sleep(0)
    second = asyncio.create_task(store.ensure(key))
    record = await first
    created.set()
    assert (await second).session_id == record.session_id
    files = list(store.transcript_path(record).parent.iterdir())
    assert files == [store.transcript_path(record)]


async def test_a_session_another_process_created_first_leaves_no_orphan_transcript(
    store: SessionStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = await store.ensure("agent:main:main")
    async with opened_store(tmp_path / "state") as other:

        async def missed(text: str) -> None:  # its lookup ran before the row was written
            return None

        monkeypatch.setattr(other.db.sessions, "get", missed)
        assert (await other.ensure("agent:main:main")).session_id == record.session_id
    files = list(store.transcript_path(record).parent.iterdir())
    assert files == [store.transcript_path(record)]


async def test_ensure_checks_its_arguments(store: SessionStore) -> None:
    with pytest.raises(SessionKeyError):
        await store.ensure("agent:main:../../x")
    with pytest.raises(InvalidIdError):
        await store.ensure("agent:main:main", agent_id="ops")
    with pytest.raises(InvalidIdError):
        await store.ensure("agent:main:main", kind="subagent")
    with pytest.raises(SessionKeyError):
        await store.ensure(str(SessionKey.subagent("main")), parent_key="not a key")
    assert await store.list(include_subagents=True, include_archived=True) == []


async def test_messages_and_events_reach_the_transcript_and_history(
    store: SessionStore,
) -> None:
    record = await store.ensure("agent:main:webchat:tab1")
    call = ToolCall(id="c1", name="read", arguments={"path": "a"})
    await store.append_message(record, ChatMessage(role="user", content="read a"))
    await store.append_message(
        record,
        ChatMessage(role="assistant", content="", tool_calls=(call,)),
        model="demo/scripted",
        usage=Usage(10, 2),
    )
    await store.append_message(
        record, ChatMessage(role="tool", content="hello", tool_call_id="c1", tool_name="read")
    )
    await store.append_event(record, "status", {"state": "running"})
    await store.append_message(record, ChatMessage(role="assistant", content="It says hello."))

    plain = await store.history(record.key)
    assert [(m["role"], m["content"]) for m in plain] == [
        ("user", "read a"),
        ("assistant", "It says hello."),
    ]
    full = await store.history(record.key, include_tools=True)
    assert [m["role"] for m in full] == ["user", "assistant", "tool", "assistant"]
    assert full[1]["toolCalls"] == [{"id": "c1", "name": "read", "arguments": {"path": "a"}}]
    assert full[1]["model"] == "demo/scripted"
    assert full[1]["usage"]["total"] == 12
    assert all({"id", "timestamp"} <= m.keys() for m in full)
    assert [m["role"] for m in await store.history(record.key, limit=2, include_tools=True)] == [
        "tool",
        "assistant",
    ]
    assert [m.role for m in await store.chat_messages(record.key)] == [
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    contents = await store.read(record.key)
    assert [r["type"] for r in contents.records] == [
        "session",
        "message",
        "message",
        "message",
        "event",
        "message",
    ]


async def test_history_limits_and_unknown_keys(store: SessionStore) -> None:
    await store.ensure("agent:main:main")
    for bad in (0, 1001):
        with pytest.raises(ValueError, match="limit"):
            await store.history("agent:main:main", limit=bad)
    with pytest.raises(SessionNotFoundError):
        await store.history("agent:main:webchat:nobody")


async def test_usage_origin_and_listing(store: SessionStore) -> None:
    main = await store.ensure("agent:main:main")
    child = await store.ensure(SessionKey.subagent("main"), parent_key=main.key)
    await store.add_usage(main.key, Usage(100, 10), 0.002)
    totals = await store.add_usage(main.key, Usage(50, 5, cache_read=40), 0.001)
    assert totals.usage == Usage(150, 15, 40, 0)
    assert totals.cost_usd == pytest.approx(0.003)
    origin = Origin("slack", "T1", "C1", "1712345678.123456", "channel")
    assert (await store.set_origin(main.key, origin)).origin == origin
    assert [r.key for r in await store.list()] == [main.key]
    listed = await store.list(include_subagents=True)
    assert {r.key for r in listed} == {main.key, child.key}
    info = store.describe(totals)
    assert info["usage"] == {
        "input": 150,
        "output": 15,
        "cacheRead": 40,
        "cacheWrite": 0,
        "total": 165,
    }
    assert info["transcriptPath"] == os.fspath(store.transcript_path(totals))
    assert info["archived"] is False


async def test_archive_renames_in_place_and_keeps_the_record(store: SessionStore) -> None:
    child = await store.ensure(SessionKey.subagent("main"), parent_key="agent:main:main")
    await store.append_message(child, ChatMessage(role="user", content="task"))
    await store.add_usage(child.key, Usage(7, 3), 0.5)
    live = store.transcript_path(child)

    archived = await store.archive(child.key)

    assert archived is not None
    assert archived.parent == live.parent
    assert ARCHIVED_NAME.match(archived.name), archived.name
    assert archived.name.startswith(f"{child.session_id}.jsonl.deleted.")
    assert not live.exists()
    assert len(_lines(archived)) == 2  # the queued line was written before the rename
    assert await store.list(include_subagents=True) == []
    record = await store.require(child.key)
    assert record.archived
    assert record.archived_path == os.fspath(archived)
    assert record.usage == Usage(7, 3)
    assert record.cost_usd == pytest.approx(0.5)
    assert [m["content"] for m in await store.history(child.key)] == ["task"]
    assert store.describe(record)["transcriptPath"] == os.fspath(archived)
    assert await store.archive(child.key) == archived  # twice is fine
    with pytest.raises(SessionArchivedError):
        await store.append_message(child, ChatMessage(role="user", content="late"))
    with pytest.raises(SessionArchivedError):
        await store.append_event(record, "status")


async def test_renew_gives_the_key_a_fresh_session_and_archives_the_old(
    store: SessionStore,
) -> None:
    old = await store.ensure("agent:main:memory:dm:u1", origin=Origin("memory", "a", "u1"))
    await store.append_message(old, ChatMessage(role="user", content="before"))
    await store.add_usage(old.key, Usage(7, 3), 0.5)
    live = store.transcript_path(old)

    archived = await store.renew(old.key)

    new = await store.require(old.key)
    assert new.session_id != old.session_id
    assert (new.key, new.origin, new.archived) == (old.key, old.origin, False)
    assert new.usage == Usage(7, 3)  # the chat's totals carry on
    assert new.cost_usd == pytest.approx(0.5)
    assert await store.get_by_id(old.session_id) is None
    # The old transcript, renamed in place with the line queued before the renewal.
    assert archived is not None
    assert archived.parent == live.parent
    assert archived.name.startswith(f"{old.session_id}.jsonl.deleted.")
    assert not live.exists()
    assert [r["type"] for r in _lines(archived)] == ["session", "message"]
    assert _lines(archived)[1]["message"] == {"role": "user", "content": "before"}
    # The new transcript: a header of its own, and nothing of the old conversation.
    header = _lines(store.transcript_path(new))[0]
    assert (header["id"], header["key"]) == (new.session_id, old.key)
    assert await store.chat_messages(old.key) == []
    # A record from before the renewal cannot write into the archived file.
    with pytest.raises(SessionArchivedError):
        await store.append_message(old, ChatMessage(role="user", content="late"))
    await store.append_message(new, ChatMessage(role="user", content="after"))
    assert [m["content"] for m in await store.history(old.key)] == ["after"]
    assert [s.key for s in await store.list()] == [old.key]


async def test_history_leaves_out_compaction_summaries(store: SessionStore) -> None:
    session = await store.ensure("agent:main:main")
    await store.append_message(session, ChatMessage(role="user", content="q1"))
    summary = ChatMessage(role="user", content="[summary] q1")
    await store.append_message(session, summary, meta={"kind": "compaction", "keep": 0})
    await store.append_message(session, ChatMessage(role="user", content="q2"))
    assert [m["content"] for m in await store.history(session.key)] == ["q1", "q2"]
    assert await store.chat_messages(session.key) == [
        summary,
        ChatMessage(role="user", content="q2"),
    ]


async def test_an_archived_or_unknown_session_cannot_be_renewed(store: SessionStore) -> None:
    child = await store.ensure(SessionKey.subagent("main"), parent_key="agent:main:main")
    await store.archive(child.key)
    with pytest.raises(SessionArchivedError):
        await store.renew(child.key)
    with pytest.raises(SessionNotFoundError):
        await store.renew("agent:main:memory:dm:nobody")


async def test_archive_of_a_missing_file_is_recorded(store: SessionStore) -> None:
    record = await store.ensure(SessionKey.subagent("main"))
    store.transcript_path(record).unlink()
    assert await store.archive(record.key) is None
    again = await store.require(record.key)
    assert again.archived
    assert again.archived_path is None
    assert (await store.read(record.key)).records == []


async def test_archive_finds_a_rename_the_database_missed(store: SessionStore) -> None:
    record = await store.ensure(SessionKey.subagent("main"))
    live = store.transcript_path(record)
    earlier = live.with_name(f"{live.name}.deleted.2026-01-31T14-55-37.123Z")
    os.rename(live, earlier)  # as if the process died between rename and commit
    assert await store.archive(record.key) == earlier


async def test_archive_many_skips_unknown_keys(store: SessionStore) -> None:
    a = await store.ensure(SessionKey.subagent("main"))
    b = await store.ensure(SessionKey.subagent("main"))
    await store.archive(b.key)
    results = await store.archive_many([a.key, b.key, "agent:main:webchat:ghost"])
    assert set(results) == {a.key, b.key}
    assert all(path is not None and ARCHIVED_NAME.match(path.name) for path in results.values())
    with pytest.raises(SessionNotFoundError):
        await store.archive("agent:main:webchat:ghost")


async def test_sessions_survive_a_restart(tmp_path: Path) -> None:
    state = tmp_path / "state"
    async with opened_store(state) as first:
        record = await first.ensure("agent:main:main")
        await first.append_message(record, ChatMessage(role="user", content="remember me"))
    async with opened_store(state) as second:
        assert await second.ensure("agent:main:main") == record
        assert [m.content for m in await second.chat_messages(record.key)] == ["remember me"]


async def test_archive_due_takes_only_sessions_whose_time_came(store: SessionStore) -> None:
    due, later, unset = [await store.ensure(SessionKey.subagent("main")) for _ in range(3)]
    await store.db.sessions.set_archive_due(due.key, 100.0)
    await store.db.sessions.set_archive_due(later.key, 300.0)
    results = await store.archive_due(200.0)
    assert list(results) == [due.key]
    assert not (await store.require(later.key)).archived
    assert not (await store.require(unset.key)).archived


async def test_an_adopted_session_begins_its_transcript_with_its_first_line(
    store: SessionStore,
) -> None:
    record = store.new_record(SessionKey.subagent("main"), parent_key="agent:main:main", label="x")
    await store.db.sessions.create(record)  # the caller's own write (a spawn's, with its run)
    store.adopt(record)
    path = store.transcript_path(record)
    await store.flush()
    assert not path.exists()  # nothing written when it was taken in
    assert await store.get(record.key) == record
    await store.append_event(record, "status", {"n": 1})
    await store.sync(record)
    header, event = _lines(path)
    assert (header["type"], header["id"], header["key"]) == (
        "session",
        record.session_id,
        record.key,
    )
    assert header["parentSessionKey"] == "agent:main:main"
    assert (event["type"], event["event"]) == ("event", "status")


async def test_ensure_transcript_writes_the_header_and_first_events_once(
    store: SessionStore,
) -> None:
    record = store.new_record(SessionKey.subagent("main"))
    await store.db.sessions.create(record)
    store.adopt(record)
    first = ("spawned", {"runId": "r1", "task": "t"})
    await asyncio.gather(*(store.ensure_transcript(record, first) for _ in range(3)))
    await store.ensure_transcript(record, first)
    await store.append_event(record, "status")
    await store.sync(record)
    kinds = [(line["type"], line.get("event")) for line in _lines(store.transcript_path(record))]
    assert kinds == [("session", None), ("event", "spawned"), ("event", "status")]


async def test_a_missing_transcript_gets_its_header_back_before_the_next_line(
    tmp_path: Path,
) -> None:
    """A process that never saw the session begun (a restart) finds the file missing (the
    crash came before the header was written) and writes the header first."""
    async with opened_store(tmp_path / "state") as first:
        record = first.new_record(SessionKey.subagent("main"))
        await first.db.sessions.create(record)
        first.adopt(record)
    async with opened_store(tmp_path / "state") as second:
        again = await second.require(record.key)
        await second.append_event(again, "status")
        await second.sync(again)
        kinds = [line["type"] for line in _lines(second.transcript_path(again))]
    assert kinds == ["session", "event"]


async def test_ensure_transcript_refuses_an_archived_session(store: SessionStore) -> None:
    record = store.new_record(SessionKey.subagent("main"))
    await store.db.sessions.create(record)
    store.adopt(record)
    await store.archive(record.key)
    archived = await store.require(record.key)
    with pytest.raises(SessionArchivedError):
        await store.ensure_transcript(archived)
    assert not store.transcript_path(record).exists()
