"""The openai-completions provider against a fake Chat Completions server on loopback."""

from __future__ import annotations

import socket
from collections.abc import Callable

import pytest

from gateway.llm import ChatMessage, ModelRequest, ToolCall, Usage
from gateway.providers import (
    OpenAIProvider,
    ProviderConnectionError,
    ProviderError,
    ProviderResponseError,
    ProviderTimeoutError,
)
from tests.fakes.openai import FakeOpenAI
from tests.gateway.providers.conftest import LS_TOOL, Sleeps, user_request

MakeOpenAI = Callable[..., OpenAIProvider]


async def test_text_reply_and_exact_request(
    openai_fake: FakeOpenAI, make_openai: MakeOpenAI
) -> None:
    openai_fake.reply_text("Hello there!", prompt_tokens=21, completion_tokens=4)
    reply = await make_openai().complete(user_request("hi", max_tokens=256))

    assert reply.text == "Hello there!"
    assert reply.tool_calls == ()
    assert reply.usage == Usage(input=21, output=4)
    assert reply.model == "gpt-4o-mini"
    assert reply.stop_reason == "stop"
    [sent] = openai_fake.requests
    assert sent.path == "/v1/chat/completions"
    assert sent.authorized
    assert sent.headers["Authorization"] == "Bearer ***"
    assert sent.headers["Content-Type"] == "application/json"
    assert sent.body == {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hi"},
        ],
        "max_tokens": 256,
    }


async def test_tool_call_round_trip(openai_fake: FakeOpenAI, make_openai: MakeOpenAI) -> None:
    provider = make_openai()
    openai_fake.reply_tool_calls([("call_abc", "ls", {"path": "docs"})], text="Let me look.")
    first = await provider.complete(user_request("what is in docs?", tools=(LS_TOOL,)))

    assert first.text == "Let me look."
    assert first.stop_reason == "tool_calls"
    assert first.tool_calls == (
        ToolCall(
            id="call_abc", name="ls", arguments={"path": "docs"}, raw_arguments='{"path":"docs"}'
        ),
    )

    openai_fake.reply_text("docs holds README.md.")
    follow_up = user_request(
        "what is in docs?",
        tools=(LS_TOOL,),
        messages=(
            ChatMessage(role="user", content="what is in docs?"),
            ChatMessage(role="assistant", content="", tool_calls=first.tool_calls),
            ChatMessage(role="tool", content="README.md", tool_call_id="call_abc", tool_name="ls"),
        ),
    )
    second = await provider.complete(follow_up)

    assert second.text == "docs holds README.md."
    sent = openai_fake.requests[1].body
    assert sent["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "what is in docs?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_abc",
                    "type": "function",
                    "function": {"name": "ls", "arguments": '{"path":"docs"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_abc", "content": "README.md"},
    ]
    assert sent["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "ls",
                "description": "List a folder of your workspace.",
                "parameters": LS_TOOL.parameters,
            },
        }
    ]


async def test_cached_tokens_are_a_subset_of_prompt_tokens(
    openai_fake: FakeOpenAI, make_openai: MakeOpenAI
) -> None:
    openai_fake.reply_text("ok", prompt_tokens=1000, completion_tokens=50, cached_tokens=800)
    reply = await make_openai().complete(user_request())
    assert reply.usage == Usage(input=1000, output=50, cache_read=800, cache_write=0)
    assert reply.usage.total == 1050


async def test_429_waits_retry_after_then_succeeds(
    openai_fake: FakeOpenAI, make_openai: MakeOpenAI, sleeps: Sleeps
) -> None:
    openai_fake.reply_error(429, "Rate limit reached", kind="requests", retry_after="2")
    openai_fake.reply_text("finally")
    reply = await make_openai().complete(user_request())
    assert reply.text == "finally"
    assert sleeps.delays == [2.0]
    assert len(openai_fake.requests) == 2


async def test_retry_after_ms_is_preferred(
    openai_fake: FakeOpenAI, make_openai: MakeOpenAI, sleeps: Sleeps
) -> None:
    openai_fake.reply_error(429, "slow down", retry_after="1", headers={"retry-after-ms": "250"})
    openai_fake.reply_text("ok")
    await make_openai().complete(user_request())
    assert sleeps.delays == [0.25]


async def test_5xx_backs_off_exponentially_then_succeeds(
    openai_fake: FakeOpenAI, make_openai: MakeOpenAI, sleeps: Sleeps
) -> None:
    openai_fake.reply_error(500, "The server had an error")
    openai_fake.reply_raw(b"<html>502 Bad Gateway</html>", status=502, content_type="text/html")
    openai_fake.reply_text("recovered")
    reply = await make_openai().complete(user_request())
    assert reply.text == "recovered"
    first, second = sleeps.delays
    # Default policy: 0.5 s then 1 s, each jittered down by at most half.
    assert 0.25 <= first <= 0.5
    assert 0.5 <= second <= 1.0


async def test_retries_are_bounded(
    openai_fake: FakeOpenAI, make_openai: MakeOpenAI, sleeps: Sleeps
) -> None:
    for _ in range(4):
        openai_fake.reply_error(503, "overloaded")
    with pytest.raises(ProviderError) as caught:
        await make_openai(max_retries=2).complete(user_request())
    error = caught.value
    assert error.status == 503
    assert error.attempts == 3
    assert len(openai_fake.requests) == 3
    assert len(sleeps.delays) == 2
    assert str(error) == (
        "openai/gpt-4o-mini: HTTP 503 Service Unavailable: overloaded (after 3 attempts)"
    )


async def test_wrong_key_is_a_clear_401_without_the_key(
    openai_fake: FakeOpenAI, make_openai: MakeOpenAI
) -> None:
    key = "sk-wrong-secret-0123456789"
    with pytest.raises(ProviderError) as caught:
        await make_openai(api_key=key).complete(user_request())
    error = caught.value
    assert error.status == 401
    assert not error.retryable
    assert len(openai_fake.requests) == 1
    assert not openai_fake.requests[0].authorized
    assert str(error).startswith(
        "openai/gpt-4o-mini: HTTP 401 Unauthorized: Incorrect API key provided"
    )
    assert key not in str(error)
    assert key not in repr(error)


async def test_key_echoed_by_the_server_is_scrubbed(
    openai_fake: FakeOpenAI, make_openai: MakeOpenAI
) -> None:
    key = openai_fake.api_key
    assert key is not None
    openai_fake.reply_error(400, f"key {key} may not use tools", kind="invalid_request_error")
    with pytest.raises(ProviderError) as caught:
        await make_openai().complete(user_request())
    assert str(caught.value) == (
        "openai/gpt-4o-mini: HTTP 400 Bad Request: key *** may not use tools"
    )
    assert caught.value.error_type == "invalid_request_error"


async def test_404_names_provider_model_and_status(
    openai_fake: FakeOpenAI, make_openai: MakeOpenAI
) -> None:
    openai_fake.reply_error(
        404,
        "The model `gpt-9` does not exist or you do not have access to it.",
        kind="invalid_request_error",
        code="model_not_found",
    )
    with pytest.raises(ProviderError) as caught:
        await make_openai().complete(user_request(model="gpt-9"))
    assert str(caught.value) == (
        "openai/gpt-9: HTTP 404 Not Found: "
        "The model `gpt-9` does not exist or you do not have access to it."
    )
    assert len(openai_fake.requests) == 1


async def test_exhausted_quota_429_is_not_retried(
    openai_fake: FakeOpenAI, make_openai: MakeOpenAI
) -> None:
    openai_fake.reply_error(429, "You exceeded your current quota", kind="insufficient_quota")
    with pytest.raises(ProviderError) as caught:
        await make_openai().complete(user_request())
    assert caught.value.status == 429
    assert not caught.value.retryable
    assert len(openai_fake.requests) == 1


async def test_hang_times_out_is_retried_then_fails(
    openai_fake: FakeOpenAI, make_openai: MakeOpenAI
) -> None:
    openai_fake.hang()
    openai_fake.hang()
    with pytest.raises(ProviderTimeoutError) as caught:
        await make_openai(timeout_seconds=0.2, max_retries=1).complete(user_request())
    assert caught.value.attempts == 2
    assert str(caught.value) == "openai/gpt-4o-mini: no answer within 0.2s (after 2 attempts)"
    assert len(openai_fake.requests) == 2


async def test_one_hang_then_success(openai_fake: FakeOpenAI, make_openai: MakeOpenAI) -> None:
    openai_fake.hang()
    openai_fake.reply_text("back")
    reply = await make_openai(timeout_seconds=0.2).complete(user_request())
    assert reply.text == "back"


async def test_garbage_body_is_a_clear_error_not_retried(
    openai_fake: FakeOpenAI, make_openai: MakeOpenAI
) -> None:
    openai_fake.reply_raw(b"<html>captive portal</html>", content_type="text/html")
    with pytest.raises(ProviderResponseError) as caught:
        await make_openai().complete(user_request())
    assert str(caught.value) == (
        "openai/gpt-4o-mini: answer is not JSON: <html>captive portal</html>"
    )
    assert len(openai_fake.requests) == 1


async def test_json_without_choices_is_a_clear_error(
    openai_fake: FakeOpenAI, make_openai: MakeOpenAI
) -> None:
    openai_fake.reply_json({"object": "chat.completion", "choices": []})
    with pytest.raises(ProviderResponseError, match="answer has no choices"):
        await make_openai().complete(user_request())


async def test_malformed_tool_arguments_become_tool_call_errors(
    openai_fake: FakeOpenAI, make_openai: MakeOpenAI
) -> None:
    provider = make_openai()
    openai_fake.reply_tool_calls(
        [
            ("call_1", "ls", '{"path": "do'),
            ("call_2", "ls", "[1, 2]"),
            # Python's json would read these as infinity and NaN; neither is JSON.
            ("call_3", "ls", '{"path": 1e999}'),
            ("call_4", "ls", '{"path": NaN}'),
        ]
    )
    reply = await provider.complete(user_request(tools=(LS_TOOL,)))

    bad_json, not_object, infinite, not_a_number = reply.tool_calls
    for call in (infinite, not_a_number):
        assert call.arguments == {}
        assert (call.arguments_error or "").startswith("arguments are not valid JSON")
    assert bad_json.arguments == {}
    assert bad_json.raw_arguments == '{"path": "do'
    assert bad_json.arguments_error is not None
    assert bad_json.arguments_error.startswith("arguments are not valid JSON")
    assert not_object.arguments_error == "arguments must be a JSON object, got list"

    # The runtime answers each with a tool error; the next request must be valid on the wire.
    openai_fake.reply_text("sorry")
    await provider.complete(
        user_request(
            tools=(LS_TOOL,),
            messages=(
                ChatMessage(role="user", content="hi"),
                ChatMessage(role="assistant", content="", tool_calls=reply.tool_calls),
                ChatMessage(role="tool", content="bad arguments", tool_call_id="call_1"),
                ChatMessage(role="tool", content="bad arguments", tool_call_id="call_2"),
                ChatMessage(role="tool", content="bad arguments", tool_call_id="call_3"),
                ChatMessage(role="tool", content="bad arguments", tool_call_id="call_4"),
            ),
        )
    )
    resent = openai_fake.requests[1].body["messages"][2]["tool_calls"]
    assert [c["function"]["arguments"] for c in resent] == ["{}"] * 4


async def test_empty_reply_is_an_empty_model_reply(
    openai_fake: FakeOpenAI, make_openai: MakeOpenAI
) -> None:
    openai_fake.reply_text(None, completion_tokens=0)
    reply = await make_openai().complete(user_request())
    assert reply.text == ""
    assert reply.tool_calls == ()
    assert reply.usage.output == 0


async def test_refused_connection_is_retried_then_reported(
    make_openai: MakeOpenAI, sleeps: Sleeps
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    provider = make_openai(base_url=f"http://127.0.0.1:{port}/v1", max_retries=1)
    with pytest.raises(ProviderConnectionError) as caught:
        await provider.complete(user_request())
    assert caught.value.attempts == 2
    assert len(sleeps.delays) == 1
    assert str(caught.value).startswith("openai/gpt-4o-mini: connection failed:")


async def test_no_key_sends_no_authorization(make_openai: MakeOpenAI) -> None:
    from tests.fakes.openai import openai_server

    async with openai_server(api_key=None) as keyless:
        keyless.reply_text("local model here")
        provider = make_openai(base_url=keyless.base_url, api_key=None)
        reply = await provider.complete(user_request())
    assert reply.text == "local model here"
    assert "Authorization" not in keyless.requests[0].headers


async def test_output_limit_key_depends_on_host(make_openai: MakeOpenAI) -> None:
    assert make_openai(base_url="https://api.openai.com/v1").limit_key == "max_completion_tokens"
    assert make_openai(base_url="http://localhost:11434/v1").limit_key == "max_tokens"


async def test_closed_provider_refuses_calls(make_openai: MakeOpenAI) -> None:
    provider = make_openai()
    await provider.close()
    await provider.close()
    with pytest.raises(ProviderError, match="provider is closed"):
        await provider.complete(ModelRequest(model="gpt-4o-mini", system="", messages=()))
