"""Compaction's promises, over random conversations and random context windows.

A session's conversation (user questions, tool rounds, answers) grows in batches; before
each would-be model call :func:`gateway.agent.compaction.fit` runs, on the real session
store and transcript writer, with the offline scripted provider writing the summaries.
After every fit:

- the request fits the budget, unless all that is left is the newest block (a message, or
  a tool call with its results), which is never cut;
- every tool call is followed by all its results and every result follows its call;
- the last ``keepRecentTurns`` turns are kept whole, unless they alone (with the summary at
  the longest it may be) would not fit;
- the transcript is the same bytes as before plus appended lines, and the conversation
  read back from it is the very list the turn goes on with.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gateway.agent import ContextPolicy, PromptMeter, StoreSink, TurnSetup
from gateway.agent.compaction import (
    fit,
    is_compaction_message,
    summary_message,
    summary_tokens,
    truncation_message,
)
from gateway.agent.context_window import (
    ESTIMATE_MARGIN,
    block_starts,
    estimated,
    fixed_tokens,
    messages_tokens,
    recent_turns_start,
)
from gateway.agent.setup import build_request
from gateway.catalog import build_tools
from gateway.llm import ChatMessage, ToolCall
from gateway.providers import ScriptedProvider, load_script
from gateway.settings import HeraldSettings
from gateway.tools import ToolContext, ToolRegistry
from tests.gateway.sessions.support import opened_store

KEY = "agent:main:memory:channel:c1"
SCRIPT = {
    "rules": [{"match": r"^\[compaction\]", "reply": "Earlier: questions asked and answered."}],
    "default": {"reply": "unused"},
}


@dataclass(frozen=True)
class Turn:
    question: int
    #: Each tool round: the lengths of its results (one call per result).
    rounds: tuple[tuple[int, ...], ...]
    answer: int | None


turns = st.builds(
    Turn,
    question=st.integers(0, 400),
    rounds=st.lists(
        st.lists(st.integers(0, 600), min_size=1, max_size=3).map(tuple), max_size=3
    ).map(tuple),
    answer=st.one_of(st.none(), st.integers(0, 300)),
)


def messages_of(batch: list[Turn], ids: Iterator[int]) -> list[ChatMessage]:
    """The messages of ``batch``; its last turn is open (no answer yet), as before a call."""
    out: list[ChatMessage] = []
    for index, turn in enumerate(batch):
        out.append(ChatMessage(role="user", content=f"q{next(ids)} " + "x" * turn.question))
        for results in turn.rounds:
            calls = tuple(ToolCall(f"c{next(ids)}", "ls", {"path": "."}) for _ in results)
            out.append(ChatMessage(role="assistant", content="", tool_calls=calls))
            out += [
                ChatMessage(role="tool", content="r" * size, tool_call_id=c.id, tool_name="ls")
                for c, size in zip(calls, results, strict=True)
            ]
        if turn.answer is not None and index < len(batch) - 1:
            out.append(ChatMessage(role="assistant", content=f"a{next(ids)} " + "y" * turn.answer))
    return out


def pairs_intact(history: list[ChatMessage]) -> bool:
    """Every tool call answered right after it, every result answering the call before."""
    open_calls: set[str] = set()
    for message in history:
        if message.role == "tool":
            if message.tool_call_id not in open_calls:
                return False
            open_calls.discard(message.tool_call_id or "")
            continue
        if open_calls:
            return False
        open_calls = {call.id for call in message.tool_calls}
    return not open_calls


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> ScriptedProvider:
    path = tmp_path_factory.mktemp("script") / "script.json"
    path.write_bytes(orjson.dumps(SCRIPT))
    return ScriptedProvider("test", load_script(path))


@pytest.fixture(scope="module")
def registry() -> ToolRegistry:
    return build_tools(HeraldSettings())


async def play(
    directory: Path,
    provider: ScriptedProvider,
    registry: ToolRegistry,
    policy: ContextPolicy,
    batches: list[list[Turn]],
) -> None:
    async with opened_store(directory) as store:
        session = await store.ensure(KEY)
        path = store.transcript_path(session)
        sink = StoreSink(store, session)
        context = ToolContext(
            agent_id="main", session_key=KEY, workspace=directory, settings=HeraldSettings()
        )
        setup = TurnSetup(
            provider=provider,
            model_id="m",
            max_tokens=256,
            system="Be brief.",
            tools=frozenset({"ls"}),
            max_iterations=5,
            tool_context=context,
            context=policy,
        )
        budget = policy.budget(setup.max_tokens)
        assert budget is not None
        fixed = fixed_tokens(build_request(setup, registry, []))
        ids = itertools.count()
        history: list[ChatMessage] = []
        meter = PromptMeter()
        for batch in batches:
            for message in messages_of(batch, ids):
                history.append(message)
                await sink.message(message)
            await store.sync(session)
            before = path.read_bytes()
            original = list(history)
            done = await fit(setup, registry, history, sink, meter)
            event(f"compacted: {done is not None}")
            await store.sync(session)
            after = path.read_bytes()

            # The transcript only grew, by the event and the message of a compaction.
            assert after.startswith(before)
            assert after[len(before) :].count(b"\n") == (2 if done else 0)
            # Read back, it is the conversation the turn goes on with.
            assert await store.chat_messages(KEY) == history
            assert pairs_intact(history)

            size = fixed + messages_tokens(history)
            head = 1 if is_compaction_message(original[0]) else 0
            body = original[head:]
            last_block = original[head + block_starts(body)[-1] :]
            if done is None:
                assert history == original
                assert size <= budget or len(block_starts(body)) <= 1
                continue
            assert is_compaction_message(history[0])
            assert history[0] == (truncation_message() if policy.mode == "truncate" else history[0])
            # It fits, or all that is left is the newest block.
            assert size <= budget or history[1:] == last_block
            # The recent turns are kept whole, unless they alone could not fit.
            recent = body[recent_turns_start(body, policy.keep_recent_turns) :]
            replacement = estimated(
                [summary_message("") if policy.mode == "summary" else truncation_message()]
            )
            if policy.mode == "summary":
                replacement += summary_tokens(budget)
            event(f"recent turns kept whole: {history[-len(recent) :] == recent}")
            if history[-len(recent) :] != recent:
                kept = math.ceil(messages_tokens(recent) * ESTIMATE_MARGIN)
                assert fixed + replacement + kept > budget
            assert history[1:] == original[len(original) - done.kept :]


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    batches=st.lists(st.lists(turns, min_size=1, max_size=10), min_size=1, max_size=3),
    reserve=st.integers(0, 1500),
    room=st.integers(150, 12_000),
    keep=st.integers(1, 5),
    mode=st.sampled_from(["summary", "truncate"]),
)
def test_compaction_fits_keeps_pairs_and_recent_turns_and_only_appends(
    provider: ScriptedProvider,
    registry: ToolRegistry,
    batches: list[list[Turn]],
    reserve: int,
    room: int,
    keep: int,
    mode: str,
) -> None:
    policy = ContextPolicy(
        window=max(reserve, 256) + room,
        mode="summary" if mode == "summary" else "truncate",
        reserve_tokens=reserve,
        keep_recent_turns=keep,
    )
    directory = Path(tempfile.mkdtemp(prefix="herald-compaction-"))
    try:
        asyncio.run(play(directory, provider, registry, policy, batches))
    finally:
        shutil.rmtree(directory, ignore_errors=True)
