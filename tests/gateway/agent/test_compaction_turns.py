"""Compaction inside the turn loop, against wire-level fakes of both vendors that refuse an
oversize prompt with their real error bodies; and tool results cut in the request only.

The gateway's own providers talk to the fakes, so what is checked is what went over the
wire: how many prompts were refused, what the retry sent, what the summary call sent.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from pydantic import SecretStr

from gateway.agent import ContextPolicy, TurnSetup, run_turn
from gateway.catalog import build_tools
from gateway.llm import ChatMessage, Provider
from gateway.providers import AnthropicProvider, ContextWindowExceededError, OpenAIProvider
from gateway.settings import HeraldSettings, ModelConfig, ProviderConfig
from gateway.tools import ToolContext, ToolRegistry
from tests.fakes.anthropic import FakeAnthropic, anthropic_server
from tests.fakes.openai import FakeOpenAI, openai_server
from tests.fakes.provider_server import Step, prompt_tokens
from tests.gateway.agent.test_turn import RecordingSink

WINDOW = 3000
SUMMARY = "Summary: twenty-four questions about the weather, all answered."
ANSWER = "The latest answer."

Fake = FakeOpenAI | FakeAnthropic


def user_texts(body: Any) -> list[str]:
    """The text of each user message of either vendor's request body (tool results aside)."""
    texts: list[str] = []
    for message in body["messages"]:
        if message["role"] != "user":
            continue
        content = message["content"]
        if isinstance(content, str):
            texts.append(content)
            continue
        texts.append("".join(b.get("text", "") for b in content if b.get("type") == "text"))
    return texts


def is_summary_call(body: Any) -> bool:
    return user_texts(body)[-1].startswith("[compaction]")


def answer(fake: Fake, text: str) -> Step:
    if isinstance(fake, FakeOpenAI):
        return fake.text_step(text)
    return Step(body=orjson.dumps(fake.message(text=text)))


@pytest.fixture(params=["openai", "anthropic"])
async def vendor(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Fake, Provider]]:
    """A fake that refuses prompts over :data:`WINDOW` tokens, and the gateway's provider
    for it (no retries); the fake answers summary calls with :data:`SUMMARY`."""
    server = openai_server() if request.param == "openai" else anthropic_server()
    async with server as fake:
        fake.context_window = WINDOW
        fake.responder = lambda body: answer(fake, SUMMARY if is_summary_call(body) else ANSWER)
        config = ProviderConfig(
            api="openai-completions" if request.param == "openai" else "anthropic-messages",
            base_url=fake.base_url,
            api_key=SecretStr(fake.api_key or ""),
            models=[ModelConfig(id=fake.model)],
            max_retries=0,
        )
        provider: OpenAIProvider | AnthropicProvider = (
            OpenAIProvider("fake", config)
            if request.param == "openai"
            else AnthropicProvider("fake", config)
        )
        try:
            yield fake, provider
        finally:
            await provider.close()


@pytest.fixture
def registry() -> ToolRegistry:
    return build_tools(HeraldSettings())


def make_setup(
    provider: Provider, model: str, workspace: Path, policy: ContextPolicy, **fields: Any
) -> TurnSetup:
    context = ToolContext(
        agent_id="main",
        session_key="agent:main:main",
        workspace=workspace,
        settings=HeraldSettings(),
    )
    options: dict[str, Any] = {"tools": frozenset(), "max_tokens": 256, **fields}
    return TurnSetup(
        provider=provider,
        model_id=model,
        system="Be brief.",
        max_iterations=5,
        tool_context=context,
        context=policy,
        **options,
    )


def long_history() -> list[ChatMessage]:
    """24 answered turns (about 4,000 of the fakes' tokens), then the new question."""
    history: list[ChatMessage] = []
    for n in range(24):
        history.append(ChatMessage(role="user", content=f"question {n}: " + "q" * 300))
        history.append(ChatMessage(role="assistant", content=f"answer {n}: " + "a" * 300))
    history.append(ChatMessage(role="user", content="the latest question"))
    return history


async def test_a_refused_prompt_is_compacted_and_retried_once(
    vendor: tuple[Fake, Provider], registry: ToolRegistry, tmp_path: Path
) -> None:
    fake, provider = vendor
    # The gateway does not know this model's window: only the refusal tells it.
    policy = ContextPolicy(mode="summary", reserve_tokens=500, keep_recent_turns=2)
    sink = RecordingSink()
    history = long_history()
    outcome = await run_turn(
        make_setup(provider, fake.model, tmp_path, policy), registry, history, sink
    )

    assert (outcome.text, outcome.ended_by) == (ANSWER, "reply")
    calls = [r.body for r in fake.requests if not is_summary_call(r.body)]
    summaries = [r.body for r in fake.requests if is_summary_call(r.body)]
    # One refusal (over the window), one retry that fits; the summary calls fit too.
    assert [prompt_tokens(body) > WINDOW for body in calls] == [True, False]
    assert summaries
    assert all(prompt_tokens(body) <= WINDOW for body in summaries)
    ((name, data),) = sink.events
    assert (name, data["reason"], data["mode"]) == ("compaction", "refused", "summary")
    # The retry: the summary first, then the last two turns whole (the new one included).
    retried = "\n".join(user_texts(calls[1]))
    assert retried.startswith("[Summary of the earlier part")
    assert SUMMARY in retried
    assert retried.replace("\n", "").endswith("question 23: " + "q" * 300 + "the latest question")
    assert "question 22: " not in retried
    # The transcript got the summary with its meta, then the reply.
    compacted = [m for m, meta in zip(sink.messages, sink.metas, strict=False) if meta]
    assert sink.metas == [{"kind": "compaction", "mode": "summary", "keep": data["keep"]}]
    assert compacted[0].content.startswith("[Summary of the earlier part")
    assert history[0] == sink.messages[0]
    assert history[-1] == ChatMessage(role="assistant", content=ANSWER)


async def test_without_compaction_the_refusal_fails_the_turn(
    vendor: tuple[Fake, Provider], registry: ToolRegistry, tmp_path: Path
) -> None:
    fake, provider = vendor
    sink = RecordingSink()
    with pytest.raises(ContextWindowExceededError) as caught:
        await run_turn(
            make_setup(provider, fake.model, tmp_path, ContextPolicy(mode="off")),
            registry,
            long_history(),
            sink,
        )
    assert caught.value.limit == WINDOW
    assert len(fake.requests) == 1
    assert sink.events == []


async def test_a_known_window_is_compacted_before_the_call(
    vendor: tuple[Fake, Provider], registry: ToolRegistry, tmp_path: Path
) -> None:
    fake, provider = vendor
    policy = ContextPolicy(window=WINDOW, mode="truncate", reserve_tokens=500, keep_recent_turns=3)
    sink = RecordingSink()
    history = long_history()
    outcome = await run_turn(
        make_setup(provider, fake.model, tmp_path, policy), registry, history, sink
    )
    assert outcome.text == ANSWER
    # Nothing was refused: the one request was cut to fit before it was sent.
    ((body),) = [r.body for r in fake.requests]
    assert prompt_tokens(body) <= WINDOW
    ((name, data),) = sink.events
    assert (name, data["reason"], data["mode"]) == ("compaction", "window", "truncate")
    sent = "".join(user_texts(body))
    kept = "".join(m.content for m in long_history()[-5::2])  # the last three questions
    assert sent.startswith("[Earlier messages of this conversation were left out")
    assert sent.endswith(kept)
    assert "question 21: " not in sent


async def test_a_long_tool_result_is_cut_in_the_request_and_whole_in_the_transcript(
    registry: ToolRegistry, tmp_path: Path
) -> None:
    (tmp_path / "big.txt").write_text("0123456789" * 600, encoding="utf-8")
    async with openai_server() as fake:
        config = ProviderConfig(
            api="openai-completions",
            base_url=fake.base_url,
            api_key=SecretStr(fake.api_key or ""),
            models=[ModelConfig(id=fake.model)],
            max_retries=0,
        )
        provider = OpenAIProvider("fake", config)
        policy = ContextPolicy(max_result_chars=500)
        setup = make_setup(provider, fake.model, tmp_path, policy, tools=frozenset({"read"}))
        fake.reply_tool_calls([("c1", "read", {"path": "big.txt"})])
        fake.reply_text("read it")
        fake.reply_text("still know it")
        try:
            sink = RecordingSink()
            history = [ChatMessage(role="user", content="read big.txt")]
            await run_turn(setup, registry, history, sink)
            # The next turn starts from the transcript's lines, where the result is whole.
            again = [*sink.messages, ChatMessage(role="user", content="and again?")]
            await run_turn(setup, registry, again, RecordingSink())
        finally:
            await provider.close()
    whole = next(m for m in sink.messages if m.role == "tool")
    assert len(whole.content) >= 6000
    sent = [
        [m["content"] for m in r.body["messages"] if m["role"] == "tool"] for r in fake.requests
    ]
    assert sent[0] == []
    assert sent[1] == sent[2]
    (cut,) = sent[1]
    assert cut.startswith(whole.content[:500])
    assert whole.content[:501] not in cut
    assert "[… cut: the result has" in cut
    assert "The full output is kept in the session transcript." in cut
    assert len(cut) < 700


async def test_a_model_of_unknown_window_gets_the_newest_messages(
    registry: ToolRegistry, tmp_path: Path
) -> None:
    async with openai_server() as fake:
        config = ProviderConfig(
            api="openai-completions",
            base_url=fake.base_url,
            api_key=SecretStr(fake.api_key or ""),
            models=[ModelConfig(id=fake.model)],
            max_retries=0,
        )
        provider = OpenAIProvider("fake", config)
        fake.reply_text("ok")
        history: list[ChatMessage] = []
        for n in range(150):
            history.append(ChatMessage(role="user", content=f"q{n}"))
            history.append(ChatMessage(role="assistant", content=f"a{n}"))
        history.append(ChatMessage(role="user", content="last"))
        sink = RecordingSink()
        try:
            await run_turn(
                make_setup(provider, fake.model, tmp_path, ContextPolicy(mode="summary")),
                registry,
                history,
                sink,
            )
        finally:
            await provider.close()
    sent = fake.requests[0].body["messages"][1:]
    assert len(sent) == 199  # the newest 200 at most, from a user message
    assert (sent[0]["content"], sent[-1]["content"]) == ("q51", "last")
    assert sink.events == []  # nothing recorded: the transcript has it all
