"""The conversation a chat turn sends: trimmed to a bound without orphaning tool results,
kept in memory for recent sessions and read back from the transcript otherwise."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.agent.history import HistoryCache, trim_history
from gateway.llm import ChatMessage, ToolCall
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


def test_a_short_history_is_kept_whole() -> None:
    history = [user("a"), assistant("b")]
    assert trim_history(history, limit=2) is history


def test_a_long_history_keeps_its_tail_from_a_user_message() -> None:
    history = [
        user("q1"),
        assistant("", "t1"),
        tool("t1"),
        assistant("a1"),
        user("q2"),
        assistant("", "t2"),
        tool("t2"),
        assistant("a2"),
    ]
    # The last 5 start with a tool result whose call would be cut off: start at "q2".
    assert trim_history(history, limit=5) == history[4:]
    assert trim_history(history, limit=4) == history[4:]
    assert trim_history(history, limit=7) == history[4:]


def test_a_tail_without_a_user_message_keeps_only_the_last_message() -> None:
    history = [user("q"), assistant("", "t1"), tool("t1"), assistant("", "t2"), tool("t2")]
    assert trim_history(history, limit=3) == [tool("t2")]


async def test_a_session_not_in_memory_is_read_from_its_transcript(store: SessionStore) -> None:
    session = await store.ensure("agent:main:memory:channel:c1")
    for message in (user("hello"), assistant("hi")):
        await store.append_message(session, message)
    cache = HistoryCache(store)
    assert await cache.take(session.key) == [user("hello"), assistant("hi")]


async def test_a_kept_history_is_handed_to_the_next_turn_once(store: SessionStore) -> None:
    session = await store.ensure("agent:main:memory:channel:c1")
    await store.append_message(session, user("on disk"))
    cache = HistoryCache(store)
    cache.keep(session.key, [user("in memory")])
    assert await cache.take(session.key) == [user("in memory")]
    # The turn owns it now: a second take (no keep in between) reads the transcript.
    assert await cache.take(session.key) == [user("on disk")]


async def test_a_forgotten_session_reads_its_transcript_again(store: SessionStore) -> None:
    session = await store.ensure("agent:main:memory:channel:c1")
    await store.append_message(session, user("on disk"))
    cache = HistoryCache(store)
    cache.keep(session.key, [user("in memory")])
    cache.forget(session.key)
    cache.forget("agent:main:memory:channel:never-kept")
    assert len(cache) == 0
    assert await cache.take(session.key) == [user("on disk")]


async def test_the_least_recently_kept_sessions_leave_memory_first(store: SessionStore) -> None:
    sessions = [await store.ensure(f"agent:main:memory:channel:c{n}") for n in range(3)]
    for session in sessions:
        await store.append_message(session, user(f"disk {session.key[-2:]}"))
    cache = HistoryCache(store, sessions=2)
    cache.keep(sessions[0].key, [user("mem c0")])
    cache.keep(sessions[1].key, [user("mem c1")])
    cache.keep(sessions[0].key, [user("mem c0 again")])  # c0 is now the most recent
    cache.keep(sessions[2].key, [user("mem c2")])  # c1 leaves
    assert len(cache) == 2
    assert await cache.take(sessions[1].key) == [user("disk c1")]
    assert await cache.take(sessions[0].key) == [user("mem c0 again")]
    assert await cache.take(sessions[2].key) == [user("mem c2")]


async def test_kept_histories_are_trimmed(store: SessionStore) -> None:
    session = await store.ensure("agent:main:memory:channel:c1")
    cache = HistoryCache(store)
    long = [message for n in range(300) for message in (user(f"q{n}"), assistant(f"a{n}"))]
    cache.keep(session.key, long)
    kept = await cache.take(session.key)
    assert len(kept) == 200
    assert kept == long[-200:]
