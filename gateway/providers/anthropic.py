"""The ``anthropic-messages`` provider: Anthropic's Messages API over aiohttp.

Wire rules this module keeps: the system prompt travels top-level; tool results go back as
``tool_result`` blocks inside a *user* message, first in its content; consecutive messages
of one role are merged into one (the API wants user and assistant to alternate); empty text
blocks are never sent (the API refuses them). Usage: ``input_tokens`` excludes cache reads
and writes, so the normalised input adds them back.
"""

from __future__ import annotations

import logging
from typing import Any

import aiohttp
import orjson

from gateway.llm import ChatMessage, ModelReply, ModelRequest, TextListener, ToolCall, Usage
from gateway.providers._http import HttpProvider
from gateway.providers._retry import RetryPolicy
from gateway.providers._sse import SseEvent, event_json
from gateway.providers.errors import ProviderError, ProviderResponseError
from gateway.settings import ProviderConfig

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"

Block = dict[str, Any]


def _blocks(message: ChatMessage) -> tuple[str, list[Block]]:
    """(wire role, content blocks) of one message."""
    if message.role == "tool":
        block: Block = {"type": "tool_result", "tool_use_id": message.tool_call_id}
        if message.content:
            block["content"] = message.content
        if message.is_error:
            block["is_error"] = True
        return "user", [block]
    blocks: list[Block] = []
    if message.content:
        blocks.append({"type": "text", "text": message.content})
    if message.role == "assistant":
        blocks.extend(
            {
                "type": "tool_use",
                "id": call.id,
                "name": call.name,
                # input must be an object; a malformed call's error result explains it.
                "input": call.arguments if call.arguments_error is None else {},
            }
            for call in message.tool_calls
        )
    return message.role, blocks


def wire_messages(messages: tuple[ChatMessage, ...]) -> list[dict[str, Any]]:
    """Messages in the API's shape: merged per role, tool results first in their message."""
    wire: list[dict[str, Any]] = []
    for message in messages:
        role, blocks = _blocks(message)
        if not blocks:
            continue
        if wire and wire[-1]["role"] == role:
            wire[-1]["content"].extend(blocks)
        else:
            wire.append({"role": role, "content": blocks})
    for entry in wire:
        if entry["role"] == "user":
            # Stable sort: tool results keep their order and come before any text.
            entry["content"].sort(key=lambda b: b["type"] != "tool_result")
    return wire


def build_payload(request: ModelRequest) -> dict[str, Any]:
    """The Messages API request body for ``request``."""
    payload: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_tokens,
        "messages": wire_messages(request.messages),
    }
    if request.system:
        payload["system"] = request.system
    if request.tools:
        payload["tools"] = [
            {"name": t.name, "description": t.description, "input_schema": t.parameters}
            for t in request.tools
        ]
    return payload


def _int(value: Any) -> int:
    return value if isinstance(value, int) and value > 0 else 0


def parse_usage(data: Any) -> Usage:
    """Normalise Anthropic usage: input = input_tokens + cache reads + cache writes."""
    if not isinstance(data, dict):
        return Usage()
    cache_read = _int(data.get("cache_read_input_tokens"))
    cache_write = _int(data.get("cache_creation_input_tokens"))
    return Usage(
        input=_int(data.get("input_tokens")) + cache_read + cache_write,
        output=_int(data.get("output_tokens")),
        cache_read=cache_read,
        cache_write=cache_write,
    )


def _tool_call(block: Block, index: int) -> ToolCall:
    call_id = str(block.get("id") or f"toolu_{index}")
    name = str(block.get("name") or "")
    arguments = block.get("input")
    if isinstance(arguments, dict):
        return ToolCall(id=call_id, name=name, arguments=arguments)
    problem = f"input must be a JSON object, got {type(arguments).__name__}"
    return ToolCall(id=call_id, name=name, raw_arguments=repr(arguments), arguments_error=problem)


def parse_reply(provider: str, model: str, data: dict[str, Any]) -> ModelReply:
    """The ModelReply of a Messages API answer; garbage raises ProviderResponseError.

    Text blocks are joined; block kinds Herald does not use (thinking…) are skipped. An
    answer with no content is a valid, empty reply.
    """
    content = data.get("content")
    if data.get("type") == "error" or not isinstance(content, list):
        raise ProviderResponseError(provider, model, "answer has no content list")
    texts: list[str] = []
    calls: list[ToolCall] = []
    for block in content:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            texts.append(str(block.get("text", "")))
        elif block.get("type") == "tool_use":
            calls.append(_tool_call(block, len(calls)))
    stop = data.get("stop_reason")
    return ModelReply(
        text="".join(texts),
        tool_calls=tuple(calls),
        usage=parse_usage(data.get("usage")),
        model=str(data.get("model") or model),
        stop_reason=str(stop) if stop is not None else None,
    )


#: Error types of an ``error`` event that a later attempt may not meet (529 overloaded…).
RETRYABLE_ERROR_TYPES = frozenset({"overloaded_error", "api_error", "rate_limit_error"})


class AnthropicStream:
    """Assembles a streamed Messages answer: ``message_start`` (model, input usage),
    ``content_block_start``/``_delta``/``_stop`` per block (``text_delta`` pieces of text,
    ``input_json_delta`` pieces of a tool call's input), ``message_delta`` (stop reason,
    output usage) and ``message_stop``; ``ping`` is ignored and ``error`` raises."""

    def __init__(self, provider: str, model: str, on_text: TextListener) -> None:
        self._provider = provider
        self._model = model
        self._on_text = on_text
        self.shown = ""
        self._blocks: dict[int, Block] = {}
        self._json: dict[int, list[str]] = {}
        self._usage: dict[str, Any] = {}
        self._answered_model: str | None = None
        self._stop: str | None = None
        self._done = False

    @property
    def complete(self) -> bool:
        return self._done

    def ended(self) -> None:
        """Anthropic always ends with ``message_stop``: without it the stream was cut."""

    def feed(self, event: SseEvent) -> None:
        if event.event == "ping":
            return
        data = event_json(event, self._provider, self._model)
        kind = data.get("type", event.event)
        if kind == "error":
            error = data.get("error")
            error = error if isinstance(error, dict) else {}
            message = str(error.get("message") or "the stream reported an error")
            retryable = error.get("type") in RETRYABLE_ERROR_TYPES
            raise ProviderError(
                self._provider, self._model, message, None, retryable, error_type=error.get("type")
            )
        if kind == "message_start" and isinstance(data.get("message"), dict):
            message = data["message"]
            if isinstance(message.get("model"), str):
                self._answered_model = message["model"]
            if isinstance(message.get("usage"), dict):
                self._usage.update(message["usage"])
        elif kind == "content_block_start" and isinstance(data.get("content_block"), dict):
            self._blocks[_index(data, len(self._blocks))] = dict(data["content_block"])
        elif kind == "content_block_delta" and isinstance(data.get("delta"), dict):
            self._take_delta(_index(data, len(self._blocks) - 1), data["delta"])
        elif kind == "message_delta":
            delta = data.get("delta")
            if isinstance(delta, dict) and delta.get("stop_reason") is not None:
                self._stop = str(delta["stop_reason"])
            if isinstance(data.get("usage"), dict):
                # Cumulative counts: the last word on each key wins.
                self._usage.update({k: v for k, v in data["usage"].items() if v is not None})
        elif kind == "message_stop":
            self._done = True

    def _take_delta(self, index: int, delta: dict[str, Any]) -> None:
        block = self._blocks.setdefault(index, {"type": "text", "text": ""})
        if delta.get("type") == "text_delta" and isinstance(delta.get("text"), str):
            block["text"] = str(block.get("text", "")) + delta["text"]
            if block.get("type") == "text" and delta["text"]:
                self.shown += delta["text"]
                self._on_text(delta["text"])
        elif delta.get("type") == "input_json_delta":
            self._json.setdefault(index, []).append(str(delta.get("partial_json", "")))

    def _finished_block(self, index: int, block: Block) -> Block:
        """A tool_use block with its input parsed from the JSON pieces, when it had any."""
        pieces = self._json.get(index)
        if block.get("type") != "tool_use" or pieces is None:
            return block
        text = "".join(pieces)
        if not text.strip():
            return {**block, "input": {}}
        try:
            return {**block, "input": orjson.loads(text)}
        except orjson.JSONDecodeError:
            return {**block, "input": text}  # _tool_call reports it as not an object

    def reply(self) -> ModelReply:
        content = [self._finished_block(i, b) for i, b in sorted(self._blocks.items())]
        return parse_reply(
            self._provider,
            self._model,
            {
                "content": content,
                "model": self._answered_model or self._model,
                "stop_reason": self._stop,
                "usage": self._usage,
            },
        )

    def whole(self, data: dict[str, Any]) -> ModelReply:
        reply = parse_reply(self._provider, self._model, data)
        if reply.text:
            self.shown = reply.text
            self._on_text(reply.text)
        return reply


def _index(data: dict[str, Any], default: int) -> int:
    index = data.get("index")
    return index if isinstance(index, int) else default


class AnthropicProvider(HttpProvider):
    """``POST {baseUrl}/v1/messages`` with ``x-api-key`` and ``anthropic-version``; the
    probe lists ``GET {baseUrl}/v1/models``.

    The probe reports no model ids: the list leaves out the aliases most configurations
    use (``claude-sonnet-4-5`` is listed only by its dated id) and comes in pages, so an id
    missing from it proves nothing.
    """

    API_KEY_ENV = "ANTHROPIC_API_KEY"

    def __init__(
        self,
        name: str,
        config: ProviderConfig,
        *,
        session: aiohttp.ClientSession | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        super().__init__(
            name, config, default_base_url=DEFAULT_BASE_URL, session=session, retry=retry
        )
        # Accept a baseUrl given with the version segment too ("…/v1").
        root = self.base_url.removesuffix("/v1")
        self._url = f"{root}/v1/messages"
        self._models_url = f"{root}/v1/models"
        self._auth_headers = {"anthropic-version": API_VERSION}
        if self._api_key:
            self._auth_headers["x-api-key"] = self._api_key
        self._headers = {"Content-Type": "application/json", **self._auth_headers}

    async def complete(
        self, request: ModelRequest, *, on_text: TextListener | None = None
    ) -> ModelReply:
        """One model call, streamed when ``on_text`` listens; raises
        :class:`gateway.providers.ProviderError` on failure."""
        payload = build_payload(request)
        if on_text is None:
            data = await self._post(self._url, self._headers, payload, request.model)
            return parse_reply(self.name, request.model, data)
        payload["stream"] = True
        return await self._stream(
            self._url,
            self._headers,
            payload,
            request.model,
            lambda: AnthropicStream(self.name, request.model, on_text),
        )
