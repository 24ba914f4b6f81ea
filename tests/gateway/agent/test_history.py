"""The conversation a chat turn sends: kept in memory (with its prompt meter) for recent
sessions and read back from the transcript otherwise, compactions applied."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.agent.context_window import PromptMeter
from gateway.agent.history import HistoryCache
from gateway.llm import ChatMessage, ToolCall, Usage
from gateway.sessions import SessionStore
from tests.gateway.sessions.support import opened_store


def user(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=text)


def assistant(text: str, *calls: str) -> ChatMessage:
    return ChatMessage(
        role="assistant", content=text, tool_calls=tuple(ToolCall(c, "ls") for c in calls)
    )


def tool(call_id: str) -> ChatMessage:
    return ChatMessage(role="tool", content="[]", tool_call_id=call_id, tool_name="ls")


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SessionStore]:
    async with opened_store(tmp_path / "state") as opened:
        yield opened


async def test_a_session_not_in_memory_is_read_from_its_transcript(store: SessionStore) -> None:
    session = await store.ensure("agent:main:memory:channel:c1")
    for message in (user("hello"), assistant("hi")):
        await store.append_message(session, message)
    cache = HistoryCache(store)
    history, meter = await cache.take(session.key)
    assert history == [user("hello"), assistant("hi")]
    assert meter.covered == 0  # nothing reported yet: the first call is estimated


async def test_a_kept_history_is_handed_to_the_next_turn_once(store: SessionStore) -> None:
    session = await store.ensure("agent:main:memory:channel:c1")
    await store.append_message(session, user("on disk"))
    cache = HistoryCache(store)
    meter = PromptMeter()
    meter.observe(Usage(input=40, output=2), 1)
    cache.keep(session.key, [user("in memory")], meter)
    assert await cache.take(session.key) == ([user("in memory")], meter)
    # The turn owns it now: a second take (no keep in between) reads the transcript.
    assert (await cache.take(session.key))[0] == [user("on disk")]


async def test_a_forgotten_session_reads_its_transcript_again(store: SessionStore) -> None:
    session = await store.ensure("agent:main:memory:channel:c1")
    await store.append_message(session, user("on disk"))
    cache = HistoryCache(store)
    cache.keep(session.key, [user("in memory")], PromptMeter())
    cache.forget(session.key)
    cache.forget("agent:main:memory:channel:never-kept")
    assert len(cache) == 0
    assert (await cache.take(session.key))[0] == [user("on disk")]


async def test_the_least_recently_kept_sessions_leave_memory_first(store: SessionStore) -> None:
    sessions = [await store.ensure(f"agent:main:memory:channel:c{n}") for n in range(3)]
    for session in sessions:
        await store.append_message(session, user(f"disk {session.key[-2:]}"))
    cache = HistoryCache(store, sessions=2)
    cache.keep(sessions[0].key, [user("mem c0")], PromptMeter())
    cache.keep(sessions[1].key, [user("mem c1")], PromptMeter())
    cache.keep(sessions[0].key, [user("mem c0 again")], PromptMeter())  # c0 is now the newest
    cache.keep(sessions[2].key, [user("mem c2")], PromptMeter())  # c1 leaves
    assert len(cache) == 2
    assert (await cache.take(sessions[1].key))[0] == [user("disk c1")]
    assert (await cache.take(sessions[0].key))[0] == [user("mem c0 again")]
    assert (await cache.take(sessions[2].key))[0] == [user("mem c2")]


async def test_a_transcript_with_a_compaction_reads_back_as_the_compacted_history(
    store: SessionStore,
) -> None:
    session = await store.ensure("agent:main:memory:channel:c1")
    old = [user("q1"), assistant("", "t1"), tool("t1"), assistant("a1"), user("q2")]
    for message in old:
        await store.append_message(session, message)
    summary = user("[summary] q1 was answered")
    await store.append_event(session, "compaction", {"mode": "summary", "keep": 1})
    await store.append_message(session, summary, meta={"kind": "compaction", "keep": 1})
    await store.append_message(session, assistant("a2"))
    history, _ = await HistoryCache(store).take(session.key)
    assert history == [summary, user("q2"), assistant("a2")]
