"""The anthropic-messages provider against a fake Messages API server on loopback."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gateway.llm import ChatMessage, ToolCall, Usage
from gateway.providers import (
    AnthropicProvider,
    ProviderError,
    ProviderResponseError,
    ProviderTimeoutError,
)
from tests.fakes.anthropic import FakeAnthropic
from tests.gateway.providers.conftest import LS_TOOL, Sleeps, user_request

MakeAnthropic = Callable[..., AnthropicProvider]
MODEL = "claude-sonnet-4-5"


async def test_text_reply_and_exact_request(
    anthropic_fake: FakeAnthropic, make_anthropic: MakeAnthropic
) -> None:
    anthropic_fake.reply_text("Hello!", input_tokens=12, output_tokens=3)
    reply = await make_anthropic().complete(user_request("hi", model=MODEL, max_tokens=512))

    assert reply.text == "Hello!"
    assert reply.tool_calls == ()
    assert reply.usage == Usage(input=12, output=3)
    assert reply.model == MODEL
    assert reply.stop_reason == "end_turn"
    [sent] = anthropic_fake.requests
    assert sent.path == "/v1/messages"
    assert sent.authorized
    assert sent.headers["x-api-key"] == "***"
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert "Authorization" not in sent.headers
    assert sent.body == {
        "model": MODEL,
        "max_tokens": 512,
        "system": "Be brief.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
    }


async def test_tool_round_trip_merges_results_into_one_user_message(
    anthropic_fake: FakeAnthropic, make_anthropic: MakeAnthropic
) -> None:
    provider = make_anthropic()
    anthropic_fake.reply_tool_uses(
        [("toolu_1", "ls", {"path": "a"}), ("toolu_2", "ls", {"path": "b"})],
        text="Looking at both.",
    )
    first = await provider.complete(user_request("compare a and b", model=MODEL, tools=(LS_TOOL,)))

    assert first.text == "Looking at both."
    assert first.stop_reason == "tool_use"
    assert first.tool_calls == (
        ToolCall(id="toolu_1", name="ls", arguments={"path": "a"}),
        ToolCall(id="toolu_2", name="ls", arguments={"path": "b"}),
    )

    anthropic_fake.reply_text("a has one file; b is missing.")
    await provider.complete(
        user_request(
            model=MODEL,
            tools=(LS_TOOL,),
            messages=(
                ChatMessage(role="user", content="compare a and b"),
                ChatMessage(role="assistant", content=first.text, tool_calls=first.tool_calls),
                ChatMessage(role="tool", content="x.txt", tool_call_id="toolu_1", tool_name="ls"),
                ChatMessage(
                    role="tool",
                    content="b: no such directory",
                    tool_call_id="toolu_2",
                    tool_name="ls",
                    is_error=True,
                ),
            ),
        )
    )
    sent = anthropic_fake.requests[1].body
    assert sent["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "compare a and b"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Looking at both."},
                {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {"path": "a"}},
                {"type": "tool_use", "id": "toolu_2", "name": "ls", "input": {"path": "b"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "x.txt"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": "b: no such directory",
                    "is_error": True,
                },
            ],
        },
    ]
    assert sent["tools"] == [
        {
            "name": "ls",
            "description": "List a folder of your workspace.",
            "input_schema": LS_TOOL.parameters,
        }
    ]


async def test_same_role_messages_are_merged_and_empty_ones_dropped(
    anthropic_fake: FakeAnthropic, make_anthropic: MakeAnthropic
) -> None:
    anthropic_fake.reply_text("ok")
    await make_anthropic().complete(
        user_request(
            model=MODEL,
            system="",
            messages=(
                ChatMessage(role="user", content="first"),
                ChatMessage(role="assistant", content=""),
                ChatMessage(role="user", content="second"),
            ),
        )
    )
    sent = anthropic_fake.requests[0].body
    assert "system" not in sent
    assert sent["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "first"}, {"type": "text", "text": "second"}],
        }
    ]


async def test_tool_results_come_before_text_in_a_merged_user_message(
    anthropic_fake: FakeAnthropic, make_anthropic: MakeAnthropic
) -> None:
    anthropic_fake.reply_text("ok")
    call = ToolCall(id="toolu_9", name="ls", arguments={})
    await make_anthropic().complete(
        user_request(
            model=MODEL,
            messages=(
                ChatMessage(role="user", content="list"),
                ChatMessage(role="assistant", content="", tool_calls=(call,)),
                ChatMessage(role="tool", content="a.txt", tool_call_id="toolu_9"),
                ChatMessage(role="user", content="and now?"),
            ),
        )
    )
    last = anthropic_fake.requests[0].body["messages"][-1]
    assert last == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_9", "content": "a.txt"},
            {"type": "text", "text": "and now?"},
        ],
    }


async def test_usage_adds_cache_tokens_back_into_input(
    anthropic_fake: FakeAnthropic, make_anthropic: MakeAnthropic
) -> None:
    anthropic_fake.reply_text(
        "ok", input_tokens=100, output_tokens=50, cache_read=800, cache_write=200
    )
    reply = await make_anthropic().complete(user_request(model=MODEL))
    assert reply.usage == Usage(input=1100, output=50, cache_read=800, cache_write=200)


async def test_429_and_529_are_retried(
    anthropic_fake: FakeAnthropic, make_anthropic: MakeAnthropic, sleeps: Sleeps
) -> None:
    anthropic_fake.reply_error(
        429, "Number of requests exceeded", kind="rate_limit_error", retry_after="3"
    )
    anthropic_fake.reply_error(529, "Overloaded", kind="overloaded_error")
    anthropic_fake.reply_text("there you go")
    reply = await make_anthropic().complete(user_request(model=MODEL))
    assert reply.text == "there you go"
    assert sleeps.delays[0] == 3.0
    assert len(sleeps.delays) == 2
    assert len(anthropic_fake.requests) == 3


async def test_retries_are_bounded(
    anthropic_fake: FakeAnthropic, make_anthropic: MakeAnthropic
) -> None:
    for _ in range(3):
        anthropic_fake.reply_error(529, "Overloaded", kind="overloaded_error")
    with pytest.raises(ProviderError) as caught:
        await make_anthropic(max_retries=1).complete(user_request(model=MODEL))
    assert str(caught.value) == (
        f"anthropic/{MODEL}: HTTP 529 Overloaded: Overloaded (after 2 attempts)"
    )
    assert caught.value.error_type == "overloaded_error"
    assert anthropic_fake.pending == 1


async def test_wrong_key_is_a_clear_401_without_the_key(
    anthropic_fake: FakeAnthropic, make_anthropic: MakeAnthropic
) -> None:
    key = "sk-ant-wrong-0123456789"
    with pytest.raises(ProviderError) as caught:
        await make_anthropic(api_key=key).complete(user_request(model=MODEL))
    assert str(caught.value) == f"anthropic/{MODEL}: HTTP 401 Unauthorized: invalid x-api-key"
    assert caught.value.error_type == "authentication_error"
    assert key not in repr(caught.value)
    assert len(anthropic_fake.requests) == 1


@pytest.mark.parametrize(
    ("status", "kind", "phrase"),
    [
        (400, "invalid_request_error", "Bad Request"),
        (404, "not_found_error", "Not Found"),
        (403, "permission_error", "Forbidden"),
    ],
)
async def test_client_errors_are_not_retried(
    anthropic_fake: FakeAnthropic,
    make_anthropic: MakeAnthropic,
    status: int,
    kind: str,
    phrase: str,
) -> None:
    anthropic_fake.reply_error(status, "model: claude-nope", kind=kind)
    with pytest.raises(ProviderError) as caught:
        await make_anthropic().complete(user_request(model="claude-nope"))
    assert str(caught.value) == f"anthropic/claude-nope: HTTP {status} {phrase}: model: claude-nope"
    assert not caught.value.retryable
    assert len(anthropic_fake.requests) == 1


async def test_hang_times_out_then_fails(
    anthropic_fake: FakeAnthropic, make_anthropic: MakeAnthropic
) -> None:
    anthropic_fake.hang()
    anthropic_fake.hang()
    with pytest.raises(ProviderTimeoutError) as caught:
        await make_anthropic(timeout_seconds=0.2, max_retries=1).complete(user_request(model=MODEL))
    assert caught.value.retryable
    assert caught.value.attempts == 2


async def test_garbage_and_wrong_shapes_are_clear_errors(
    anthropic_fake: FakeAnthropic, make_anthropic: MakeAnthropic
) -> None:
    provider = make_anthropic()
    anthropic_fake.reply_raw(b'{"type": "message", "content": [')
    with pytest.raises(ProviderResponseError, match="answer is not JSON"):
        await provider.complete(user_request(model=MODEL))
    anthropic_fake.reply_json(["not", "an", "object"])
    with pytest.raises(ProviderResponseError, match="answer is not a JSON object"):
        await provider.complete(user_request(model=MODEL))
    anthropic_fake.reply_json({"type": "message", "content": "oops"})
    with pytest.raises(ProviderResponseError, match="answer has no content list"):
        await provider.complete(user_request(model=MODEL))


async def test_tool_use_with_non_object_input_becomes_a_tool_call_error(
    anthropic_fake: FakeAnthropic, make_anthropic: MakeAnthropic
) -> None:
    anthropic_fake.reply_tool_uses([("toolu_1", "ls", "path=.")])
    reply = await make_anthropic().complete(user_request(model=MODEL, tools=(LS_TOOL,)))
    [call] = reply.tool_calls
    assert call.arguments == {}
    assert call.arguments_error == "input must be a JSON object, got str"
    assert call.raw_arguments == "'path=.'"


async def test_empty_content_is_an_empty_model_reply(
    anthropic_fake: FakeAnthropic, make_anthropic: MakeAnthropic
) -> None:
    anthropic_fake.reply_text(None, output_tokens=0)
    reply = await make_anthropic().complete(user_request(model=MODEL))
    assert reply.text == ""
    assert reply.tool_calls == ()


async def test_base_url_with_version_segment_is_accepted(
    anthropic_fake: FakeAnthropic, make_anthropic: MakeAnthropic
) -> None:
    anthropic_fake.reply_text("ok")
    provider = make_anthropic(base_url=anthropic_fake.base_url + "/v1/")
    assert (await provider.complete(user_request(model=MODEL))).text == "ok"
    assert anthropic_fake.requests[0].path == "/v1/messages"
