"""A fake OpenAI Chat Completions server on loopback, speaking the real wire format.

It checks the bearer key and the request's shape the way the real API does (401 and 400 in
OpenAI's error shape), lists :attr:`FakeOpenAI.models` at ``GET /v1/models``, plays a queue
of scripted answers (text, tool calls, usage with cached tokens, HTTP errors with
Retry-After, garbage bodies, delays and hangs) and records every request so tests can
assert what the provider really sent::

    async with openai_server(api_key="sk-test") as fake:
        fake.reply_text("hello", prompt_tokens=12, completion_tokens=3)
        ...  # point a provider at fake.base_url
        assert fake.requests[0].body["model"] == "gpt-4o-mini"

When requests interleave (concurrent runs), set :attr:`FakeOpenAI.responder` instead: a
function of the request body that returns the :class:`Step` to answer with
(:meth:`~FakeOpenAI.text_step`, :meth:`~FakeOpenAI.error_step`, ...).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import orjson
from aiohttp import web

from tests.fakes.provider_server import ProviderFake, Responder, Step, pieces, prompt_tokens, sse

__all__ = [
    "FakeOpenAI",
    "FakeToolCall",
    "HeldReplies",
    "Step",
    "last_user_text",
    "openai_error",
    "openai_server",
]

#: (id, name, arguments): a dict is sent as its JSON string, a str is sent as given.
FakeToolCall = tuple[str, str, dict[str, Any] | str]


def openai_error(status: int, message: str, kind: str, code: str | None = None) -> Step:
    param = "messages" if code == "context_length_exceeded" else None
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return Step(status=status, body=orjson.dumps(body))


def _shape_problem(body: Any) -> str | None:
    """What the real API would refuse in ``body`` with a 400, or None."""
    if not isinstance(body, dict):
        return "We could not parse the JSON body of your request."
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "you must provide a model parameter"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "[] is too short - 'messages'"
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list) or not tools:
            return "[] is too short - 'tools'"
        for i, tool in enumerate(tools):
            function = tool.get("function") if isinstance(tool, dict) else None
            if tool.get("type") != "function" or not isinstance(function, dict):
                return f"Invalid value for 'tools[{i}]': expected a function tool."
            if not function.get("name"):
                return f"Missing required parameter: 'tools[{i}].function.name'."
    pending: set[str] = set()
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ("system", "user", "assistant", "tool", "developer"):
            return f"Invalid value for 'messages[{i}].role'."
        if role == "tool":
            if message.get("tool_call_id") not in pending:
                return (
                    "Invalid parameter: messages with role 'tool' must be a response to a "
                    "preceeding message with 'tool_calls'."
                )
            pending.discard(message["tool_call_id"])
            continue
        if pending:
            return (
                "An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                f"response messages: {', '.join(sorted(pending))}"
            )
        for call in message.get("tool_calls") or []:
            arguments = call.get("function", {}).get("arguments")
            if not isinstance(arguments, str):
                return f"Invalid type for 'messages[{i}].tool_calls.function.arguments'."
            pending.add(call.get("id"))
    return None


class FakeOpenAI(ProviderFake):
    """The fake server; start it with :func:`openai_server`."""

    URL_SUFFIX = "/v1"
    REQUEST_ID_HEADER = "x-request-id"

    def __init__(
        self, *, api_key: str | None = "sk-fake-openai-key", model: str = "gpt-4o-mini"
    ) -> None:
        super().__init__(api_key=api_key, model=model)
        #: When set, answers every request the queue has no step for, by its content: for
        #: tests whose requests interleave, so that a fixed order of answers cannot work.
        self.responder: Responder | None = None
        #: What ``GET /v1/models`` lists (after any scripted step, which it plays first).
        self.models: list[str] = [model]

    # -- scripting ------------------------------------------------------------------------

    def completion(
        self,
        *,
        content: str | None,
        tool_calls: Sequence[FakeToolCall] = (),
        prompt_tokens: int = 10,
        completion_tokens: int = 5,
        cached_tokens: int = 0,
        finish_reason: str | None = None,
        model: str | None = None,
    ) -> dict[str, Any]:
        """A chat.completion object as the real API returns it."""
        message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
        if tool_calls:
            message["tool_calls"] = [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {
                        "name": name,
                        "arguments": args if isinstance(args, str) else orjson.dumps(args).decode(),
                    },
                }
                for call_id, name, args in tool_calls
            ]
        return {
            "id": f"chatcmpl-fake{next(self._ids)}",
            "object": "chat.completion",
            "created": 1_767_225_600,
            "model": model or self.model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": finish_reason or ("tool_calls" if tool_calls else "stop"),
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
                "prompt_tokens_details": {"cached_tokens": cached_tokens, "audio_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
            },
        }

    def reply_text(self, text: str | None, *, delay: float = 0.0, **usage: Any) -> None:
        """Answer with assistant text (``None`` = null content); usage kwargs as in
        :meth:`completion`."""
        self.reply_json(self.completion(content=text, **usage), delay=delay)

    def reply_tool_calls(
        self,
        calls: Sequence[FakeToolCall],
        *,
        text: str | None = None,
        delay: float = 0.0,
        **usage: Any,
    ) -> None:
        """Answer with tool calls (and optional text)."""
        self.reply_json(self.completion(content=text, tool_calls=calls, **usage), delay=delay)

    def reply_error(
        self,
        status: int,
        message: str,
        *,
        kind: str = "server_error",
        code: str | None = None,
        retry_after: str | None = None,
        headers: Mapping[str, str] | None = None,
        delay: float = 0.0,
    ) -> None:
        """Answer an HTTP error in OpenAI's shape, with ``Retry-After`` when given."""
        step = openai_error(status, message, kind, code)
        extra = dict(headers or {})
        if retry_after is not None:
            extra["Retry-After"] = retry_after
        self.enqueue(Step(status=status, body=step.body, headers=extra, delay=delay))

    def reply_raw(
        self, body: bytes, *, status: int = 200, content_type: str = "application/json"
    ) -> None:
        """Answer ``body`` verbatim (garbage, HTML error pages, truncated JSON)."""
        self.enqueue(Step(status=status, body=body, headers={"Content-Type": content_type}))

    def hang(self, seconds: float = 30.0) -> None:
        """Say nothing for ``seconds`` (then a text reply, if anyone is still listening)."""
        self.reply_json(self.completion(content="too late"), delay=seconds)

    def models_step(self) -> Step:
        """``GET /v1/models`` as the real API answers it: every id in :attr:`models`."""
        data = [
            {"id": model, "object": "model", "created": 1_686_935_002, "owned_by": "system"}
            for model in self.models
        ]
        return Step(body=orjson.dumps({"object": "list", "data": data}))

    def to_events(self, answer: dict[str, Any]) -> tuple[bytes, ...]:
        """A chat.completion as the API streams it: a role chunk, the text in pieces, each
        tool call as a first piece (index, id, name) and its arguments in pieces, a chunk
        with the finish reason, the usage chunk (empty choices) and ``[DONE]``."""
        base = {k: answer[k] for k in ("id", "created", "model")}
        base["object"] = "chat.completion.chunk"
        choice = answer["choices"][0]
        message = choice["message"]

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            choices = [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
            return sse({**base, "choices": choices, "usage": None})

        events = [chunk({"role": "assistant", "content": "", "refusal": None})]
        if message.get("content"):
            events += [chunk({"content": piece}) for piece in pieces(message["content"])]
        for index, call in enumerate(message.get("tool_calls") or ()):
            first = {"index": index, "id": call["id"], "type": "function"}
            function = call["function"]
            events.append(
                chunk(
                    {
                        "tool_calls": [
                            {**first, "function": {"name": function["name"], "arguments": ""}}
                        ]
                    }
                )
            )
            arguments = function["arguments"]
            for start in range(0, len(arguments), 7):
                piece = {"index": index, "function": {"arguments": arguments[start : start + 7]}}
                events.append(chunk({"tool_calls": [piece]}))
        events.append(chunk({}, choice["finish_reason"]))
        events.append(sse({**base, "choices": [], "usage": answer["usage"]}))
        events.append(sse("[DONE]"))
        return tuple(events)

    def reply_stream(
        self,
        text: str | None,
        *,
        hold: asyncio.Event | None = None,
        hold_at: int | None = None,
        cut_at: int | None = None,
        **usage: Any,
    ) -> None:
        """Answer a streaming request with ``text`` in pieces, paused at event ``hold_at``
        until ``hold`` is set, or cut off after ``cut_at`` events."""
        answer = self.completion(content=text, **usage)
        self.enqueue(self.stream_step(answer, hold=hold, hold_at=hold_at, cut_at=cut_at))

    # -- steps for a responder ------------------------------------------------------------

    def text_step(
        self,
        text: str | None,
        *,
        delay: float = 0.0,
        hold: asyncio.Event | None = None,
        **usage: Any,
    ) -> Step:
        """The step :meth:`reply_text` would queue, for a :attr:`responder` to return;
        with ``hold``, sent once that event is set."""
        body = orjson.dumps(self.completion(content=text, **usage))
        return Step(body=body, delay=delay, hold=hold)

    @staticmethod
    def error_step(
        status: int,
        message: str,
        *,
        kind: str = "server_error",
        retry_after_ms: int | None = None,
    ) -> Step:
        """An HTTP error in OpenAI's shape, with ``retry-after-ms`` when given."""
        step = openai_error(status, message, kind)
        headers = {} if retry_after_ms is None else {"retry-after-ms": str(retry_after_ms)}
        return Step(status=status, body=step.body, headers=headers)

    @staticmethod
    def garbage_step() -> Step:
        """A 200 whose body is not JSON (a proxy's HTML page)."""
        body = b"<html><body>502 Bad Gateway</body></html>"
        return Step(status=200, body=body, headers={"Content-Type": "text/html"})

    def hang_step(self, seconds: float = 30.0) -> Step:
        """Nothing for ``seconds`` (the fake wakes early when it closes)."""
        return self.text_step("too late", delay=seconds)

    # -- serving --------------------------------------------------------------------------

    def _authorized(self, request: web.Request) -> bool:
        return request.headers.get("Authorization") == f"Bearer {self.api_key}"

    def _check(self, request: web.Request, authorized: bool, body: Any) -> Step | None:
        auth = request.headers.get("Authorization")
        route = (request.method, request.path)
        if route not in (("POST", "/v1/chat/completions"), ("GET", "/v1/models")):
            message = f"Invalid URL ({request.method} {request.path})"
            return openai_error(404, message, "invalid_request_error")
        if not authorized:
            if not auth:
                return openai_error(
                    401,
                    "You didn't provide an API key. You need to provide your API key in an "
                    "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
                    "invalid_request_error",
                )
            given = auth.removeprefix("Bearer ")
            shown = f"{given[:3]}***{given[-2:]}" if len(given) > 8 else "***"
            return openai_error(
                401,
                f"Incorrect API key provided: {shown}. You can find your API key at "
                "https://platform.openai.com/account/api-keys.",
                "invalid_request_error",
                "invalid_api_key",
            )
        if route == ("GET", "/v1/models"):
            return self._steps.popleft() if self._steps else self.models_step()
        problem = _shape_problem(body)
        if problem:
            return openai_error(400, problem, "invalid_request_error")
        return self._window_check(body)

    def _window_check(self, body: dict[str, Any]) -> Step | None:
        """OpenAI's answer to a prompt over the context window (400 with the code
        ``context_length_exceeded``; the message names the window)."""
        window = self.context_window
        if window is None:
            return None
        prompt = prompt_tokens(body)
        completion = body.get("max_completion_tokens") or body.get("max_tokens") or 0
        if prompt > window:
            message = (
                f"This model's maximum context length is {window} tokens. However, your "
                f"messages resulted in {prompt} tokens. Please reduce the length of the messages."
            )
        elif prompt + completion > window:
            message = (
                f"This model's maximum context length is {window} tokens. However, you "
                f"requested {prompt + completion} tokens ({prompt} in the messages, "
                f"{completion} in the completion). Please reduce the length of the messages "
                "or completion."
            )
        else:
            return None
        return openai_error(400, message, "invalid_request_error", "context_length_exceeded")

    def _next_step(self, body: Any) -> Step:
        if not self._steps and self.responder is not None:
            return self.responder(body)
        if not self._steps:
            return openai_error(500, "fake openai: script exhausted", "server_error")
        return self._steps.popleft()


def last_user_text(body: Any) -> str:
    """The text of the last user message of a chat.completions request body."""
    users = [m for m in body["messages"] if m.get("role") == "user"]
    return str(users[-1]["content"]) if users else ""


class HeldReplies:
    """A :attr:`FakeOpenAI.responder` whose answers wait for the test: each request gets
    ``reply(body)`` as text, held until :attr:`gate` is set when ``held(body)`` says so
    (default: every request), with ``usage`` as in :meth:`FakeOpenAI.completion`.
    :meth:`arrived` waits until that many requests came in."""

    def __init__(
        self,
        fake: FakeOpenAI,
        reply: Callable[[Any], str],
        *,
        held: Callable[[Any], bool] = lambda body: True,
        **usage: int,
    ) -> None:
        self.fake = fake
        self.reply = reply
        self.held = held
        self.usage = usage
        self.gate = asyncio.Event()
        self.asked: list[Any] = []
        self._came = asyncio.Event()

    def __call__(self, body: Any) -> Step:
        self.asked.append(body)
        self._came.set()
        hold = self.gate if self.held(body) else None
        return self.fake.text_step(self.reply(body), hold=hold, **self.usage)

    async def arrived(self, count: int = 1) -> None:
        """Wait until ``count`` requests have come in (the caller bounds the wait)."""
        while len(self.asked) < count:
            self._came.clear()
            await self._came.wait()


@asynccontextmanager
async def openai_server(
    *, api_key: str | None = "sk-fake-openai-key", model: str = "gpt-4o-mini"
) -> AsyncIterator[FakeOpenAI]:
    """A started :class:`FakeOpenAI`, closed on exit."""
    fake = FakeOpenAI(api_key=api_key, model=model)
    await fake.start()
    try:
        yield fake
    finally:
        await fake.close()
