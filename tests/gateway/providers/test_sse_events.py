"""Server-sent events of streamed model calls, however they are cut and however large.

Through the OpenAI and Anthropic fakes over loopback: an event of exactly
:data:`MAX_EVENT_BYTES` assembles into the reply; one byte more fails the call with
:class:`StreamEventTooLargeError` (not retried, the text already shown kept), and so does an
oversized event whose end never comes, as soon as the limit is passed. A stream cut into
arbitrary pieces, with CRLF, LF or CR line ends, gives the same reply. The splitter itself,
fed the pieces one by one, gives the same events as the whole body (a property test).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import SecretStr

from gateway.llm import Usage
from gateway.providers import (
    AnthropicProvider,
    OpenAIProvider,
    StreamEventTooLargeError,
)
from gateway.providers._sse import MAX_EVENT_BYTES, EventSplitter, SseEvent
from gateway.settings import ModelConfig, ProviderConfig
from tests.fakes.anthropic import FakeAnthropic
from tests.fakes.openai import FakeOpenAI, openai_server
from tests.fakes.provider_server import Step, sse
from tests.gateway.providers.conftest import user_request

MakeOpenAI = Callable[..., OpenAIProvider]
MakeAnthropic = Callable[..., AnthropicProvider]
#: Text with characters of two, three and four UTF-8 bytes, so cuts fall inside them.
STORY = "A naïve gateway — 東京 to Zürich 🚀 — streamed every word it was given to say."


class Heard:
    """An ``on_text`` listener that keeps what it heard."""

    def __init__(self) -> None:
        self.pieces: list[str] = []

    def __call__(self, text: str) -> None:
        self.pieces.append(text)

    @property
    def text(self) -> str:
        return "".join(self.pieces)


def openai_delta(content: str, finish: str | None = None) -> bytes:
    delta = {"content": content} if content or finish is None else {}
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return sse({"id": "c1", "model": "gpt-4o-mini", "choices": [choice]})


def anthropic_delta(text: str) -> bytes:
    delta = {"type": "text_delta", "text": text}
    return sse({"type": "content_block_delta", "index": 0, "delta": delta}, "content_block_delta")


def sized(make: Callable[[str], bytes], size: int) -> tuple[bytes, str]:
    """An event made by ``make`` whose lines are exactly ``size`` bytes, and its text."""
    overhead = len(make("")) - len(b"\n\n")
    text = "x" * (size - overhead)
    event = make(text)
    assert len(event) - len(b"\n\n") == size
    return event, text


def openai_stream(*middle: bytes) -> tuple[bytes, ...]:
    """A Chat Completions stream around ``middle``: the role chunk, then the finish, the
    usage and ``[DONE]``."""
    role = sse({"id": "c1", "choices": [{"index": 0, "delta": {"role": "assistant"}}]})
    usage = sse({"id": "c1", "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 4}})
    return (role, *middle, openai_delta("", "stop"), usage, sse("[DONE]"))


def anthropic_stream(fake: FakeAnthropic, *middle: bytes) -> tuple[bytes, ...]:
    """The fake's own stream of an empty text block, ``middle`` in place of its deltas."""
    events = fake.to_events(fake.message(text=""))
    starts = [i for i, e in enumerate(events) if e.startswith(b"event: content_block_start")]
    cut = starts[0] + 1
    return (*events[:cut], *middle, *events[cut:])


# -- the size limit -------------------------------------------------------------------------


async def test_openai_an_event_of_the_largest_size_assembles(
    openai_fake: FakeOpenAI, make_openai: MakeOpenAI
) -> None:
    event, text = sized(openai_delta, MAX_EVENT_BYTES)
    openai_fake.enqueue(Step(events=openai_stream(openai_delta("Hello "), event)))
    heard = Heard()
    reply = await make_openai().complete(user_request(), on_text=heard)

    assert reply.text == heard.text == "Hello " + text
    assert reply.usage == Usage(input=9, output=4)


async def test_openai_an_event_one_byte_over_fails_the_call_and_is_not_retried(
    openai_fake: FakeOpenAI, make_openai: MakeOpenAI
) -> None:
    event, _ = sized(openai_delta, MAX_EVENT_BYTES + 1)
    openai_fake.enqueue(Step(events=openai_stream(openai_delta("Hello "), event)))
    openai_fake.reply_text("a retry would answer this")
    heard = Heard()
    with pytest.raises(StreamEventTooLargeError) as caught:
        await make_openai().complete(user_request(), on_text=heard)

    assert str(caught.value) == (
        f"openai/gpt-4o-mini: a stream event exceeded {MAX_EVENT_BYTES} bytes, the most one "
        "event may carry (no model's event is that large)"
    )
    assert caught.value.limit == MAX_EVENT_BYTES
    assert caught.value.partial == heard.text == "Hello "
    assert len(openai_fake.requests) == 1


async def test_an_oversized_event_fails_before_its_end_arrives(
    openai_fake: FakeOpenAI, make_openai: MakeOpenAI
) -> None:
    # The server sends more than the limit of one event, then never ends it: the call fails
    # at once rather than hold the event (or wait for the timeout).
    head = b"data: " + b"x" * (MAX_EVENT_BYTES + 64 * 1024)
    never = asyncio.Event()
    openai_fake.enqueue(Step(events=(head, b"\n\n"), hold=never, hold_at=1))
    with pytest.raises(StreamEventTooLargeError):
        await make_openai().complete(user_request(), on_text=Heard())
    assert len(openai_fake.requests) == 1


async def test_anthropic_the_largest_event_assembles_and_one_byte_more_fails(
    anthropic_fake: FakeAnthropic, make_anthropic: MakeAnthropic
) -> None:
    largest, text = sized(anthropic_delta, MAX_EVENT_BYTES)
    over, _ = sized(anthropic_delta, MAX_EVENT_BYTES + 1)
    anthropic_fake.enqueue(Step(events=anthropic_stream(anthropic_fake, largest)))
    anthropic_fake.enqueue(Step(events=anthropic_stream(anthropic_fake, over)))
    provider = make_anthropic()

    reply = await provider.complete(user_request(), on_text=Heard())
    assert reply.text == text
    with pytest.raises(StreamEventTooLargeError) as caught:
        await provider.complete(user_request(), on_text=Heard())
    assert f"exceeded {MAX_EVENT_BYTES} bytes" in str(caught.value)
    assert str(caught.value).startswith("anthropic/gpt-4o-mini: ")
    assert len(anthropic_fake.requests) == 2


# -- arbitrary cuts -------------------------------------------------------------------------

LINE_ENDS = st.sampled_from(["\n", "\r\n", "\r"])


def with_line_ends(body: bytes, end: str) -> bytes:
    return body.replace(b"\n", end.encode())


def cut(body: bytes, points: list[int]) -> tuple[bytes, ...]:
    """``body`` cut at ``points`` (positions, any order, repeats allowed)."""
    marks = sorted({0, len(body), *(p % (len(body) + 1) for p in points)})
    return tuple(body[a:b] for a, b in itertools.pairwise(marks))


def crlf_splits(body: bytes) -> list[int]:
    """Every point between a CR and its LF."""
    return [i + 1 for i in range(len(body) - 1) if body[i : i + 2] == b"\r\n"]


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    end=LINE_ENDS,
    points=st.lists(st.integers(min_value=0, max_value=10_000), max_size=40),
    split_every_crlf=st.booleans(),
)
async def test_a_stream_cut_anywhere_gives_the_same_reply(
    end: str, points: list[int], split_every_crlf: bool
) -> None:
    async with openai_server() as fake:
        fake_events = fake.to_events(fake.completion(content=STORY))
        body = with_line_ends(b"".join(fake_events), end)
        if split_every_crlf:
            points = [*points, *crlf_splits(body)]
        fake.enqueue(Step(events=cut(body, points)))
        config = ProviderConfig(
            api="openai-completions",
            base_url=fake.base_url,
            api_key=SecretStr(fake.api_key or ""),
            models=[ModelConfig(id="gpt-4o-mini")],
            timeout_seconds=5,
            max_retries=0,
        )
        provider = OpenAIProvider("openai", config)
        try:
            heard = Heard()
            reply = await provider.complete(user_request(), on_text=heard)
        finally:
            await provider.close()
    assert reply.text == heard.text == STORY


# -- the splitter, piece by piece -----------------------------------------------------------

#: Field text: anything but line ends (multi-byte characters included).
FIELD_TEXT = st.text(
    st.characters(exclude_categories=["Cs"], exclude_characters="\r\n"), max_size=30
)
EVENTS = st.lists(
    st.tuples(
        st.one_of(st.none(), st.sampled_from(["delta", "ping", "message_stop"])),
        st.lists(FIELD_TEXT, min_size=0, max_size=3),
        st.booleans(),
    ),
    max_size=8,
)


def encode(events: list[tuple[str | None, list[str], bool]], end: str) -> bytes:
    """The events as an SSE body (with a comment line where asked; an empty value as a
    bare ``data`` line, a field without a colon)."""
    lines: list[str] = []
    for name, data, comment in events:
        if comment:
            lines.append(": keep-alive")
        if name is not None:
            lines.append(f"event: {name}")
        lines += [f"data: {value}" if value else "data" for value in data]
        lines.append("")
    return "".join(line + end for line in lines).encode()


def expected(events: list[tuple[str | None, list[str], bool]]) -> list[SseEvent]:
    return [SseEvent(name or "message", "\n".join(data)) for name, data, _ in events if data]


@settings(max_examples=400)
@given(events=EVENTS, end=LINE_ENDS, points=st.lists(st.integers(min_value=0), max_size=30))
def test_the_splitter_gives_the_same_events_however_the_body_is_cut(
    events: list[tuple[str | None, list[str], bool]], end: str, points: list[int]
) -> None:
    body = encode(events, end)
    splitter = EventSplitter("p", "m")
    got = [event for piece in cut(body, points) for event in splitter.feed(piece)]
    assert got == expected(events)


@settings(max_examples=200)
@given(
    size=st.integers(min_value=len("data: "), max_value=64),
    extra=st.integers(min_value=0, max_value=3),
    end=LINE_ENDS,
    points=st.lists(st.integers(min_value=0), max_size=10),
)
def test_the_splitter_takes_events_up_to_its_limit_and_refuses_longer(
    size: int, extra: int, end: str, points: list[int]
) -> None:
    # An event of `size` bytes (one data line, without its line end) against a limit at or
    # above its size, and one below; the short event after it shows the splitter went on.
    value = "x" * (size - len("data: "))
    body = f"data: {value}{end}{end}data:{end}{end}".encode()
    fits = EventSplitter("p", "m", limit=size + extra)
    assert [e.data for piece in cut(body, points) for e in fits.feed(piece)] == [value, ""]
    refuses = EventSplitter("p", "m", limit=size - 1)

    def feed_all() -> None:
        for piece in cut(body, points):
            refuses.feed(piece)

    with pytest.raises(StreamEventTooLargeError):
        feed_all()
