"""Streamed model calls (``on_text``) against the fakes' real SSE wire format: the same
reply as a plain call, text handed on as it arrives, retries only before the first text."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from gateway.llm import ToolCall, Usage
from gateway.providers import (
    AnthropicProvider,
    OpenAIProvider,
    ProviderConnectionError,
    ProviderError,
)
from tests.fakes.anthropic import FakeAnthropic
from tests.fakes.openai import FakeOpenAI
from tests.fakes.provider_server import Step, sse
from tests.gateway.providers.conftest import LS_TOOL, user_request

MakeOpenAI = Callable[..., OpenAIProvider]
MakeAnthropic = Callable[..., AnthropicProvider]

STORY = "Once upon a time a small gateway streamed every word it was given to say."


class Heard:
    """An ``on_text`` listener that keeps what it heard, piece by piece."""

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.came = asyncio.Event()

    def __call__(self, text: str) -> None:
        self.pieces.append(text)
        self.came.set()

    @property
    def text(self) -> str:
        return "".join(self.pieces)


# -- OpenAI --------------------------------------------------------------------------------


async def test_openai_text_streams_in_pieces_with_usage_from_the_last_chunk(
    openai_fake: FakeOpenAI, make_openai: MakeOpenAI
) -> None:
    openai_fake.reply_text(STORY, prompt_tokens=40, completion_tokens=17, cached_tokens=8)
    heard = Heard()
    reply = await make_openai().complete(user_request("tell me"), on_text=heard)

    assert reply.text == STORY
    assert heard.text == STORY
    assert len(heard.pieces) > 3
    assert reply.usage == Usage(input=40, output=17, cache_read=8)
    assert reply.stop_reason == "stop"
    [sent] = openai_fake.requests
    assert sent.body["stream"] is True
    assert sent.body["stream_options"] == {"include_usage": True}


async def test_openai_tool_calls_are_assembled_from_their_pieces(
    openai_fake: FakeOpenAI, make_openai: MakeOpenAI
) -> None:
    args = {"path": "docs/some/long/folder", "depth": 2}
    openai_fake.reply_tool_calls(
        [("call_a", "ls", args), ("call_b", "ls", {"path": "src"})], text="Looking."
    )
    heard = Heard()
    reply = await make_openai().complete(user_request("ls", tools=(LS_TOOL,)), on_text=heard)

    assert heard.text == "Looking."
    assert [(c.id, c.name, c.arguments) for c in reply.tool_calls] == [
        ("call_a", "ls", args),
        ("call_b", "ls", {"path": "src"}),
    ]
    assert reply.stop_reason == "tool_calls"
    # The arguments came in several pieces: the fake cut them every 7 characters.
    assert len(reply.tool_calls[0].raw_arguments or "") > 7


async def test_openai_tool_call_pieces_interleaved_by_index(
    openai_fake: FakeOpenAI, make_openai: MakeOpenAI
) -> None:
    def chunk(delta: dict[str, object], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return sse({"id": "c1", "model": "gpt-4o-mini", "choices": [choice]})

    def piece(index: int, **fields: object) -> dict[str, object]:
        return {"tool_calls": [{"index": index, **fields}]}

    events = (
        chunk(piece(0, id="call_0", type="function", function={"name": "ls", "arguments": ""})),
        chunk(piece(1, id="call_1", type="function", function={"name": "ls", "arguments": ""})),
        chunk(piece(1, function={"arguments": '{"path"'})),
        chunk(piece(0, function={"arguments": '{"path":'})),
        chunk(piece(1, function={"arguments": ':"b"}'})),
        chunk(piece(0, function={"arguments": '"a"}'})),
        chunk({}, "tool_calls"),
        sse({"id": "c1", "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 4}}),
        sse("[DONE]"),
    )
    openai_fake.enqueue(Step(events=events))
    reply = await make_openai().complete(user_request("ls"), on_text=Heard())

    assert reply.tool_calls == (
        ToolCall(id="call_0", name="ls", arguments={"path": "a"}, raw_arguments='{"path":"a"}'),
        ToolCall(id="call_1", name="ls", arguments={"path": "b"}, raw_arguments='{"path":"b"}'),
    )
    assert reply.usage == Usage(input=9, output=4)


async def test_openai_text_arrives_before_the_stream_ends(
    openai_fake: FakeOpenAI, make_openai: MakeOpenAI
) -> None:
    gate = asyncio.Event()
    openai_fake.reply_stream(STORY, hold=gate, hold_at=3)
    heard = Heard()
    call = asyncio.create_task(make_openai().complete(user_request(), on_text=heard))
    await asyncio.wait_for(heard.came.wait(), 30)

    assert heard.text
    assert STORY.startswith(heard.text)
    assert heard.text != STORY
    assert not call.done()
    gate.set()
    assert (await asyncio.wait_for(call, 30)).text == STORY


async def test_openai_stream_cut_midway_is_not_retried_and_keeps_what_was_said(
    openai_fake: FakeOpenAI, make_openai: MakeOpenAI
) -> None:
    openai_fake.reply_stream(STORY, cut_at=4)
    heard = Heard()
    with pytest.raises(ProviderConnectionError) as caught:
        await make_openai().complete(user_request(), on_text=heard)

    assert heard.text
    assert STORY.startswith(heard.text)
    assert caught.value.partial == heard.text
    assert not caught.value.retryable
    assert len(openai_fake.requests) == 1


async def test_openai_stream_cut_before_any_text_is_retried(
    openai_fake: FakeOpenAI, make_openai: MakeOpenAI
) -> None:
    openai_fake.reply_stream(STORY, cut_at=1)  # only the role chunk got through
    openai_fake.reply_text(STORY)
    heard = Heard()
    reply = await make_openai().complete(user_request(), on_text=heard)

    assert reply.text == heard.text == STORY
    assert len(openai_fake.requests) == 2


async def test_openai_http_error_before_the_stream_is_retried(
    openai_fake: FakeOpenAI, make_openai: MakeOpenAI
) -> None:
    openai_fake.reply_error(503, "overloaded")
    openai_fake.reply_text("fine now")
    reply = await make_openai().complete(user_request(), on_text=Heard())

    assert reply.text == "fine now"
    assert len(openai_fake.requests) == 2


async def test_openai_server_that_ignores_stream_still_works(
    openai_fake: FakeOpenAI, make_openai: MakeOpenAI
) -> None:
    openai_fake.ignore_stream = True
    openai_fake.reply_tool_calls([("call_x", "ls", {"path": "."})], text="One moment.")
    heard = Heard()
    reply = await make_openai().complete(user_request(), on_text=heard)

    assert heard.pieces == ["One moment."]
    assert reply.text == "One moment."
    assert reply.tool_calls[0].arguments == {"path": "."}


async def test_openai_error_event_inside_the_stream(
    openai_fake: FakeOpenAI, make_openai: MakeOpenAI
) -> None:
    events = (sse({"error": {"message": "The server had an error", "type": "server_error"}}),)
    openai_fake.enqueue(Step(events=events))
    openai_fake.reply_text("recovered")
    reply = await make_openai().complete(user_request(), on_text=Heard())

    assert reply.text == "recovered"  # nothing was shown yet: retried


# -- Anthropic -----------------------------------------------------------------------------


async def test_anthropic_text_streams_with_usage_from_start_and_delta(
    anthropic_fake: FakeAnthropic, make_anthropic: MakeAnthropic
) -> None:
    anthropic_fake.reply_text(STORY, input_tokens=30, output_tokens=18, cache_read=5)
    heard = Heard()
    reply = await make_anthropic().complete(user_request("tell me"), on_text=heard)

    assert reply.text == heard.text == STORY
    assert len(heard.pieces) > 3
    assert reply.usage == Usage(input=35, output=18, cache_read=5)
    assert reply.stop_reason == "end_turn"
    assert anthropic_fake.requests[0].body["stream"] is True


async def test_anthropic_tool_use_input_is_assembled_from_json_pieces(
    anthropic_fake: FakeAnthropic, make_anthropic: MakeAnthropic
) -> None:
    args = {"path": "docs/some/long/folder", "depth": 2}
    anthropic_fake.reply_tool_uses(
        [("toolu_1", "ls", args), ("toolu_2", "ls", {})], text="Let me see."
    )
    heard = Heard()
    reply = await make_anthropic().complete(user_request(tools=(LS_TOOL,)), on_text=heard)

    assert heard.text == "Let me see."
    assert reply.tool_calls == (
        ToolCall(id="toolu_1", name="ls", arguments=args),
        ToolCall(id="toolu_2", name="ls", arguments={}),
    )
    assert reply.stop_reason == "tool_use"


async def test_anthropic_stream_cut_midway_keeps_what_was_said(
    anthropic_fake: FakeAnthropic, make_anthropic: MakeAnthropic
) -> None:
    anthropic_fake.reply_stream(STORY, cut_at=6)
    heard = Heard()
    with pytest.raises(ProviderConnectionError) as caught:
        await make_anthropic().complete(user_request(), on_text=heard)

    assert heard.text
    assert STORY.startswith(heard.text)
    assert heard.text != STORY
    assert caught.value.partial == heard.text
    assert len(anthropic_fake.requests) == 1


async def test_anthropic_overloaded_error_event_after_text_is_final(
    anthropic_fake: FakeAnthropic, make_anthropic: MakeAnthropic
) -> None:
    events = anthropic_fake.to_events(anthropic_fake.message(text=STORY))
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    anthropic_fake.enqueue(Step(events=(*events[:5], sse(error, "error"))))
    heard = Heard()
    with pytest.raises(ProviderError) as caught:
        await make_anthropic().complete(user_request(), on_text=heard)

    assert "Overloaded" in str(caught.value)
    assert caught.value.partial == heard.text != ""
    assert len(anthropic_fake.requests) == 1


async def test_anthropic_server_that_ignores_stream_still_works(
    anthropic_fake: FakeAnthropic, make_anthropic: MakeAnthropic
) -> None:
    anthropic_fake.ignore_stream = True
    anthropic_fake.reply_text("Plain answer.")
    heard = Heard()
    reply = await make_anthropic().complete(user_request(), on_text=heard)

    assert heard.pieces == ["Plain answer."]
    assert reply.text == "Plain answer."
