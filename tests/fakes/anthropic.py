"""A fake Anthropic Messages API server on loopback, speaking the real wire format.

It checks ``x-api-key`` and ``anthropic-version`` and the request's shape the way the real
API does (401/400 in Anthropic's ``{"type":"error","error":{…}}`` shape), lists
:attr:`FakeAnthropic.models` at ``GET /v1/models``, plays a queue of scripted answers
(text, tool_use, usage with cache reads and writes, errors with Retry-After, garbage,
delays and hangs) and records every request::

    async with anthropic_server(api_key="sk-ant-test") as fake:
        fake.reply_text("hello", input_tokens=12, output_tokens=3)
        ...  # point a provider at fake.base_url
        assert fake.requests[0].body["system"] == "…"
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import orjson
from aiohttp import web

from tests.fakes.provider_server import ProviderFake, Responder, Step, pieces, prompt_tokens, sse

#: (id, name, input): a dict is the tool_use input; anything else is sent as given.
FakeToolUse = tuple[str, str, Any]


def anthropic_error(status: int, kind: str, message: str) -> Step:
    body = {"type": "error", "error": {"type": kind, "message": message}}
    return Step(status=status, body=orjson.dumps(body))


def _blocks(content: Any) -> list[dict[str, Any]] | None:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list) and all(isinstance(b, dict) for b in content):
        return content
    return None


def _shape_problem(body: Any) -> str | None:
    """What the real API would refuse in ``body`` with a 400, or None."""
    if not isinstance(body, dict):
        return "There was an issue with the format of your request: invalid JSON"
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "model: Field required"
    if not isinstance(body.get("max_tokens"), int):
        return "max_tokens: Field required"
    system = body.get("system")
    if system is not None and not isinstance(system, str | list):
        return "system: Input should be a valid string or list"
    for i, tool in enumerate(body.get("tools") or []):
        if not isinstance(tool, dict) or not tool.get("name"):
            return f"tools.{i}.name: Field required"
        if not isinstance(tool.get("input_schema"), dict):
            return f"tools.{i}.input_schema: Field required"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    open_calls: set[str] = set()
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ("user", "assistant"):
            return f'messages.{i}.role: Input should be "user" or "assistant"'
        blocks = _blocks(message.get("content"))
        if not blocks:
            return f"messages.{i}: all messages must have non-empty content"
        results = {b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"}
        if open_calls and open_calls != results:
            return (
                f"messages.{i}: `tool_use` ids were found without `tool_result` blocks "
                f"immediately after: {', '.join(sorted(open_calls - results))}"
            )
        if results - open_calls:
            return (
                f"messages.{i}.content: unexpected `tool_use_id` found in `tool_result` "
                "blocks. Each `tool_result` block must have a corresponding `tool_use` "
                "block in the previous message."
            )
        open_calls = set()
        for j, block in enumerate(blocks):
            if block.get("type") == "text" and not block.get("text"):
                return f"messages.{i}.content.{j}: text content blocks must be non-empty"
            if block.get("type") == "tool_use":
                if role != "assistant" or not isinstance(block.get("input"), dict):
                    return f"messages.{i}.content.{j}.tool_use: invalid block"
                open_calls.add(str(block.get("id")))
    if open_calls:
        return "messages: the last message has `tool_use` blocks without results"
    return None


class FakeAnthropic(ProviderFake):
    """The fake server; start it with :func:`anthropic_server`."""

    REQUEST_ID_HEADER = "request-id"

    def __init__(
        self, *, api_key: str | None = "sk-ant-fake-key", model: str = "claude-sonnet-4-5"
    ) -> None:
        super().__init__(api_key=api_key, model=model)
        #: What ``GET /v1/models`` lists (after any scripted step, which it plays first).
        self.models: list[str] = [model]
        #: When set, answers every request the queue has no step for, by its content.
        self.responder: Responder | None = None

    # -- scripting ------------------------------------------------------------------------

    def message(
        self,
        *,
        text: str | None,
        tool_uses: Sequence[FakeToolUse] = (),
        input_tokens: int = 10,
        output_tokens: int = 5,
        cache_read: int = 0,
        cache_write: int = 0,
        stop_reason: str | None = None,
        model: str | None = None,
    ) -> dict[str, Any]:
        """A Messages API ``message`` object as the real API returns it."""
        content: list[dict[str, Any]] = []
        if text is not None:
            content.append({"type": "text", "text": text})
        content += [
            {"type": "tool_use", "id": use_id, "name": name, "input": tool_input}
            for use_id, name, tool_input in tool_uses
        ]
        return {
            "id": f"msg_fake{next(self._ids)}",
            "type": "message",
            "role": "assistant",
            "model": model or self.model,
            "content": content,
            "stop_reason": stop_reason or ("tool_use" if tool_uses else "end_turn"),
            "stop_sequence": None,
            "usage": {
                "input_tokens": input_tokens,
                "cache_creation_input_tokens": cache_write,
                "cache_read_input_tokens": cache_read,
                "output_tokens": output_tokens,
            },
        }

    def reply_text(self, text: str | None, *, delay: float = 0.0, **usage: Any) -> None:
        """Answer with a text block (``None`` = empty content); usage kwargs as in
        :meth:`message`."""
        self.reply_json(self.message(text=text, **usage), delay=delay)

    def reply_tool_uses(
        self,
        uses: Sequence[FakeToolUse],
        *,
        text: str | None = None,
        delay: float = 0.0,
        **usage: Any,
    ) -> None:
        """Answer with tool_use blocks (after an optional text block)."""
        self.reply_json(self.message(text=text, tool_uses=uses, **usage), delay=delay)

    def reply_error(
        self,
        status: int,
        message: str,
        *,
        kind: str = "api_error",
        retry_after: str | None = None,
        headers: Mapping[str, str] | None = None,
        delay: float = 0.0,
    ) -> None:
        """Answer an HTTP error in Anthropic's shape, with ``retry-after`` when given."""
        step = anthropic_error(status, kind, message)
        extra = dict(headers or {})
        if retry_after is not None:
            extra["retry-after"] = retry_after
        self.enqueue(Step(status=status, body=step.body, headers=extra, delay=delay))

    def reply_raw(
        self, body: bytes, *, status: int = 200, content_type: str = "application/json"
    ) -> None:
        """Answer ``body`` verbatim (garbage, HTML error pages, truncated JSON)."""
        self.enqueue(Step(status=status, body=body, headers={"Content-Type": content_type}))

    def hang(self, seconds: float = 30.0) -> None:
        """Say nothing for ``seconds`` (then a text reply, if anyone is still listening)."""
        self.reply_json(self.message(text="too late"), delay=seconds)

    def to_events(self, answer: dict[str, Any]) -> tuple[bytes, ...]:
        """A message as the API streams it: ``message_start`` (input usage, no content),
        each block's start, deltas (``text_delta`` pieces, ``input_json_delta`` pieces) and
        stop, a ``ping``, ``message_delta`` (stop reason, output tokens), ``message_stop``."""
        usage = answer["usage"]
        start_usage = {**usage, "output_tokens": 1}
        started = {**answer, "content": [], "stop_reason": None, "usage": start_usage}
        events = [sse({"type": "message_start", "message": started}, "message_start")]
        events.append(sse({"type": "ping"}, "ping"))
        for index, block in enumerate(answer["content"]):
            if block["type"] == "text":
                opened: dict[str, Any] = {"type": "text", "text": ""}
                deltas = [{"type": "text_delta", "text": p} for p in pieces(block["text"])]
            else:
                opened = {**block, "input": {}}
                raw = orjson.dumps(block["input"]).decode()
                deltas = [
                    {"type": "input_json_delta", "partial_json": raw[i : i + 7]}
                    for i in range(0, len(raw), 7)
                ]
            start = {"type": "content_block_start", "index": index, "content_block": opened}
            events.append(sse(start, "content_block_start"))
            for delta in deltas:
                body = {"type": "content_block_delta", "index": index, "delta": delta}
                events.append(sse(body, "content_block_delta"))
            events.append(sse({"type": "content_block_stop", "index": index}, "content_block_stop"))
        ending: dict[str, Any] = {"stop_reason": answer["stop_reason"], "stop_sequence": None}
        last = {
            "type": "message_delta",
            "delta": ending,
            "usage": {"output_tokens": usage["output_tokens"]},
        }
        events.append(sse(last, "message_delta"))
        events.append(sse({"type": "message_stop"}, "message_stop"))
        return tuple(events)

    def reply_stream(
        self,
        text: str | None,
        *,
        tool_uses: Sequence[FakeToolUse] = (),
        hold: asyncio.Event | None = None,
        hold_at: int | None = None,
        cut_at: int | None = None,
        **usage: Any,
    ) -> None:
        """Answer a streaming request with ``text`` (and tool uses) in pieces, paused at
        event ``hold_at`` until ``hold`` is set, or cut off after ``cut_at`` events."""
        answer = self.message(text=text, tool_uses=tool_uses, **usage)
        self.enqueue(self.stream_step(answer, hold=hold, hold_at=hold_at, cut_at=cut_at))

    def models_step(self) -> Step:
        """``GET /v1/models`` as the real API answers it: one page holding :attr:`models`."""
        data = [
            {
                "type": "model",
                "id": model,
                "display_name": model.replace("-", " ").title(),
                "created_at": "2025-09-29T00:00:00Z",
            }
            for model in self.models
        ]
        page = {
            "data": data,
            "has_more": False,
            "first_id": self.models[0] if self.models else None,
            "last_id": self.models[-1] if self.models else None,
        }
        return Step(body=orjson.dumps(page))

    # -- serving --------------------------------------------------------------------------

    def _authorized(self, request: web.Request) -> bool:
        return request.headers.get("x-api-key") == self.api_key

    def _check(self, request: web.Request, authorized: bool, body: Any) -> Step | None:
        route = (request.method, request.path)
        if route not in (("POST", "/v1/messages"), ("GET", "/v1/models")):
            return anthropic_error(404, "not_found_error", "Not Found")
        if not authorized:
            return anthropic_error(401, "authentication_error", "invalid x-api-key")
        if not request.headers.get("anthropic-version"):
            return anthropic_error(
                400, "invalid_request_error", "anthropic-version: header is required"
            )
        if route == ("GET", "/v1/models"):
            return self._steps.popleft() if self._steps else self.models_step()
        problem = _shape_problem(body)
        if problem:
            return anthropic_error(400, "invalid_request_error", problem)
        return self._window_check(body)

    def _window_check(self, body: dict[str, Any]) -> Step | None:
        """Anthropic's answers to a prompt over the context window (400
        ``invalid_request_error``): "prompt is too long" when the prompt alone does not fit,
        the ``max_tokens`` message when the prompt and the requested reply do not."""
        window = self.context_window
        if window is None:
            return None
        prompt = prompt_tokens(body)
        reply = int(body.get("max_tokens") or 0)
        if prompt > window:
            message = f"prompt is too long: {prompt} tokens > {window} maximum"
        elif prompt + reply > window:
            message = (
                f"input length and `max_tokens` exceed context limit: {prompt} + {reply} > "
                f"{window}, decrease input length or `max_tokens` and try again"
            )
        else:
            return None
        return anthropic_error(400, "invalid_request_error", message)

    def _next_step(self, body: Any) -> Step:
        if not self._steps and self.responder is not None:
            return self.responder(body)
        if not self._steps:
            return anthropic_error(500, "api_error", "fake anthropic: script exhausted")
        return self._steps.popleft()


@asynccontextmanager
async def anthropic_server(
    *, api_key: str | None = "sk-ant-fake-key", model: str = "claude-sonnet-4-5"
) -> AsyncIterator[FakeAnthropic]:
    """A started :class:`FakeAnthropic`, closed on exit."""
    fake = FakeAnthropic(api_key=api_key, model=model)
    await fake.start()
    try:
        yield fake
    finally:
        await fake.close()
