"""Sizing a conversation against its model's context window, and where it may be cut."""

from __future__ import annotations

import dataclasses
import math

import orjson

from gateway.agent.context_window import (
    ESTIMATE_MARGIN,
    ContextPolicy,
    PromptMeter,
    block_starts,
    cap_messages,
    fixed_tokens,
    message_tokens,
    messages_tokens,
    plan_cut,
    recent_turns_start,
    text_tokens,
)
from gateway.llm import ChatMessage, ModelRequest, ToolCall, ToolSpec, Usage
from gateway.settings import HeraldSettings


def user(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=text)


def assistant(text: str, *calls: str) -> ChatMessage:
    return ChatMessage(
        role="assistant", content=text, tool_calls=tuple(ToolCall(c, "ls") for c in calls)
    )


def tool(call_id: str, content: str = "[]") -> ChatMessage:
    return ChatMessage(role="tool", content=content, tool_call_id=call_id, tool_name="ls")


def settings(**models: dict[str, object]) -> HeraldSettings:
    return HeraldSettings.model_validate(
        {
            "agent": {"compaction": {"mode": "truncate", "reserveTokens": 1000}},
            "models": {"providers": models},
        }
    )


def test_known_openai_and_anthropic_models_get_their_context_window() -> None:
    config = settings(
        openai={"api": "openai-completions", "models": [{"id": "gpt-4o-mini"}, {"id": "x"}]},
        anthropic={"api": "anthropic-messages", "models": [{"id": "claude-sonnet-4-5"}]},
        local={"api": "openai-completions", "models": [{"id": "gpt-4o", "contextWindow": 8192}]},
        demo={"api": "scripted", "models": [{"id": "scripted"}, {"id": "gpt-4o"}]},
    )
    assert ContextPolicy.of(config, "openai/gpt-4o-mini").window == 128_000
    assert ContextPolicy.of(config, "anthropic/claude-sonnet-4-5").window == 200_000
    # A configured window wins; unknown ids and the scripted provider have none.
    assert ContextPolicy.of(config, "local/gpt-4o").window == 8192
    assert ContextPolicy.of(config, "openai/x").window is None
    assert ContextPolicy.of(config, "demo/gpt-4o").window is None
    assert ContextPolicy.of(config, "nowhere/x").window is None
    policy = ContextPolicy.of(config, "local/gpt-4o")
    assert (policy.mode, policy.reserve_tokens, policy.keep_recent_turns) == ("truncate", 1000, 4)
    assert policy.max_result_chars == 20_000


def test_the_budget_leaves_room_for_the_larger_of_the_reserve_and_the_reply_limit() -> None:
    policy = ContextPolicy(window=10_000, reserve_tokens=1000)
    assert policy.budget(max_tokens=512) == 9000
    assert policy.budget(max_tokens=4096) == 5904
    assert ContextPolicy().budget(max_tokens=512) is None


def test_the_default_reserve_is_a_quarter_of_a_small_window_and_the_reply_fits_beside() -> None:
    # reserveTokens null: the smaller of 4,000 and a quarter of the window.
    assert ContextPolicy(window=200_000).reserve() == 4000
    assert ContextPolicy(window=4096).reserve() == 1024
    assert ContextPolicy().reserve() == 4000
    assert ContextPolicy(window=4096, reserve_tokens=300).reserve() == 300
    # The model's maxTokens (4,096 by default) and the reserve do not both fit a 4,096
    # window: a call asks for the reserve, and the prompt keeps three quarters.
    small = ContextPolicy(window=4096)
    assert small.reply_tokens(4096) == 1024
    assert small.budget(small.reply_tokens(4096)) == 3072
    assert small.reply_tokens(512) == 512
    # Where both fit, the model's limit stands (as before).
    large = ContextPolicy(window=128_000)
    assert large.reply_tokens(4096) == 4096
    assert large.budget(4096) == 128_000 - 4096
    assert ContextPolicy().reply_tokens(4096) == 4096


def test_the_fixed_part_counts_the_system_prompt_and_each_tool_as_sent() -> None:
    schema = {"type": "object", "properties": {"path": {"type": "string"}}}
    tools = tuple(ToolSpec(f"tool_{n}", "Does a thing. " * 20, schema) for n in range(12))
    request = ModelRequest(model="m", system="s" * 400, messages=(), tools=tools)
    wire = sum(
        len(orjson.dumps({"type": "function", "function": dataclasses.asdict(t)})) for t in tools
    )
    assert fixed_tokens(request) >= 100 + wire // 4


def test_estimates_count_text_and_tool_calls() -> None:
    assert text_tokens("") == 0
    assert text_tokens("abcde") == 2
    plain = message_tokens(user("x" * 40))
    assert plain == 4 + 10
    called = message_tokens(
        ChatMessage(role="assistant", content="", tool_calls=(ToolCall("c", "ls", {"p": 1}),))
    )
    assert called > message_tokens(assistant(""))
    assert messages_tokens([user("x" * 40), user("x" * 40)]) == 2 * plain


def test_the_meter_adds_estimates_of_new_messages_to_the_reported_prompt() -> None:
    history = [user("x" * 400)]
    meter = PromptMeter()
    # Estimated messages (not the server's figure, nor the fixed part) count the margin more.
    assert meter.estimate(history, lambda: 50) == 50 + margin(message_tokens(history[0]))
    history.append(assistant("ok"))
    meter.observe(Usage(input=900, output=30), len(history))
    assert meter.estimate(history, lambda: 50) == 930
    history.append(user("y" * 40))
    assert meter.estimate(history, lambda: 50) == 930 + margin(message_tokens(history[-1]))
    # No figure from the server, or a cut conversation: back to estimating the whole.
    meter.observe(Usage(), len(history))
    assert meter.estimate(history, lambda: 50) == 50 + margin(messages_tokens(history))
    meter.observe(Usage(input=900, output=30), len(history))
    del history[:2]
    assert meter.estimate(history, lambda: 50) == 50 + margin(messages_tokens(history))


def margin(tokens: int) -> int:
    return math.ceil(tokens * ESTIMATE_MARGIN)


HISTORY = [
    user("q1"),  # 0
    assistant("", "t1", "t2"),  # 1
    tool("t1"),  # 2
    tool("t2"),  # 3
    assistant("a1"),  # 4
    user("q2"),  # 5
    assistant("", "t3"),  # 6
    tool("t3"),  # 7
    assistant("a2"),  # 8
    user("q3"),  # 9
]


def test_cuts_are_never_between_a_tool_call_and_its_results() -> None:
    assert block_starts(HISTORY) == [0, 1, 4, 5, 6, 8, 9]
    assert recent_turns_start(HISTORY, 2) == 5
    assert recent_turns_start(HISTORY, 3) == 0
    assert recent_turns_start(HISTORY, 9) == 0
    # A compaction replaced q2: what is left of its turn is older than the last one.
    remnant = HISTORY[6:]
    assert recent_turns_start(remnant, 1) == 3
    assert recent_turns_start(remnant, 2) == 0


def test_a_cut_keeps_the_recent_turns_unless_they_alone_do_not_fit() -> None:
    kept = plan_cut(HISTORY, keep_recent_turns=2, budget=None, overhead=0)
    assert kept == 5
    assert plan_cut(HISTORY, keep_recent_turns=2, budget=10_000, overhead=0) == 5
    # Too little room for both recent turns: the cut moves on, block by block.
    tail = margin(messages_tokens(HISTORY[6:]))
    assert plan_cut(HISTORY, keep_recent_turns=2, budget=tail, overhead=0) == 6
    # Nothing fits: the last block is kept all the same.
    assert plan_cut(HISTORY, keep_recent_turns=2, budget=1, overhead=0) == 9
    # Fewer turns than kept whole: a compaction still cuts past the first message.
    assert plan_cut(HISTORY, keep_recent_turns=9, budget=10_000, overhead=0) == 1
    assert plan_cut([user("only")], keep_recent_turns=1, budget=1, overhead=0) == 0


def test_an_unknown_window_keeps_the_newest_messages_from_a_user_message() -> None:
    assert cap_messages(HISTORY, limit=10) == 0
    assert cap_messages(HISTORY, limit=6) == 5
    assert cap_messages(HISTORY, limit=4) == 9
    # No user message in reach: the last one before it, so the request still starts there.
    assert cap_messages(HISTORY[:9], limit=3) == 5
    assert cap_messages(HISTORY[5:9], limit=3) == 0
    # No user message at all: a block start, never a tool result.
    assert cap_messages(HISTORY[6:9], limit=2) == 2
    assert cap_messages([assistant("", "t"), tool("t"), tool("t")], limit=1) == 0
