"""The ``openai-completions`` provider: OpenAI's Chat Completions API over aiohttp.

Also speaks to OpenAI-compatible servers (Ollama, vLLM, LM Studio, gateways): ``baseUrl``
is the ``/v1`` root and the key is optional. The output limit is sent as
``max_completion_tokens`` to api.openai.com (``max_tokens`` is deprecated there and refused
by reasoning models) and as ``max_tokens`` elsewhere (most compatible servers only know it).
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

DEFAULT_BASE_URL = "https://api.openai.com/v1"


def _wire_message(message: ChatMessage) -> dict[str, Any]:
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    if message.role == "assistant" and message.tool_calls:
        return {
            "role": "assistant",
            # null, not "", beside tool calls: what the API itself returns and documents.
            "content": message.content or None,
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {
                        "name": call.name,
                        # A malformed call is sent back as "{}": strict compatible servers
                        # reject invalid JSON here; the tool's error result explains it.
                        "arguments": "{}"
                        if call.arguments_error is not None
                        else orjson.dumps(call.arguments).decode(),
                    },
                }
                for call in message.tool_calls
            ],
        }
    return {"role": message.role, "content": message.content}


def build_payload(request: ModelRequest, *, limit_key: str = "max_tokens") -> dict[str, Any]:
    """The Chat Completions request body for ``request``."""
    messages: list[dict[str, Any]] = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    messages.extend(_wire_message(m) for m in request.messages)
    payload: dict[str, Any] = {
        "model": request.model,
        "messages": messages,
        limit_key: request.max_tokens,
    }
    if request.tools:
        # The API refuses an empty tools list, so the key is only sent with tools.
        payload["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                },
            }
            for tool in request.tools
        ]
    return payload


def _int(value: Any) -> int:
    return value if isinstance(value, int) and value > 0 else 0


def parse_usage(data: Any) -> Usage:
    """Normalise OpenAI usage: ``prompt_tokens`` already includes the cached tokens."""
    if not isinstance(data, dict):
        return Usage()
    details = data.get("prompt_tokens_details")
    cached = _int(details.get("cached_tokens")) if isinstance(details, dict) else 0
    return Usage(
        input=_int(data.get("prompt_tokens")),
        output=_int(data.get("completion_tokens")),
        cache_read=cached,
    )


def _parse_tool_call(raw: Any, index: int) -> ToolCall:
    if not isinstance(raw, dict) or not isinstance(raw.get("function"), dict):
        return ToolCall(id=f"call_{index}", name="", arguments_error="tool call is not an object")
    function = raw["function"]
    call_id = str(raw.get("id") or f"call_{index}")
    name = str(function.get("name") or "")
    arguments = function.get("arguments")
    if isinstance(arguments, dict):  # some compatible servers send the object itself
        return ToolCall(id=call_id, name=name, arguments=arguments)
    text = arguments if isinstance(arguments, str) else ""
    if not text.strip():
        return ToolCall(id=call_id, name=name, raw_arguments=text)
    try:
        parsed = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        problem = f"arguments are not valid JSON: {exc}"
        return ToolCall(id=call_id, name=name, raw_arguments=text, arguments_error=problem)
    if not isinstance(parsed, dict):
        problem = f"arguments must be a JSON object, got {type(parsed).__name__}"
        return ToolCall(id=call_id, name=name, raw_arguments=text, arguments_error=problem)
    return ToolCall(id=call_id, name=name, arguments=parsed, raw_arguments=text)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts, as some compatible servers answer
        return "".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        )
    return ""


def parse_reply(provider: str, model: str, data: dict[str, Any]) -> ModelReply:
    """The ModelReply of a Chat Completions answer; garbage raises ProviderResponseError.

    An answer with neither text nor tool calls is a valid, empty reply (the runtime decides
    what an empty turn means).
    """
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ProviderResponseError(provider, model, "answer has no choices")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise ProviderResponseError(provider, model, "answer's first choice has no message")
    raw_calls = message.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise ProviderResponseError(provider, model, "answer's tool_calls is not a list")
    finish = choices[0].get("finish_reason")
    return ModelReply(
        text=_text(message.get("content")),
        tool_calls=tuple(_parse_tool_call(call, i) for i, call in enumerate(raw_calls)),
        usage=parse_usage(data.get("usage")),
        model=str(data.get("model") or model),
        stop_reason=str(finish) if finish is not None else None,
    )


class OpenAIStream:
    """Assembles a streamed chat completion (``chat.completion.chunk`` events ending in
    ``[DONE]``): text from ``delta.content``; tool calls from pieces keyed by ``index``
    (the first piece brings ``id`` and the name, later ones more of ``arguments``); usage
    from the last chunk, whose ``choices`` are empty (``stream_options.include_usage``)."""

    def __init__(self, provider: str, model: str, on_text: TextListener) -> None:
        self._provider = provider
        self._model = model
        self._on_text = on_text
        self.shown = ""
        self._texts: list[str] = []
        self._calls: dict[int, dict[str, str]] = {}
        self._usage: Any = None
        self._answered_model: str | None = None
        self._finish: str | None = None
        self._done = False

    @property
    def complete(self) -> bool:
        # Some compatible servers close without [DONE]: a finish reason says it is whole.
        return self._done

    def feed(self, event: SseEvent) -> None:
        if event.data.strip() == "[DONE]":
            self._done = True
            return
        chunk = event_json(event, self._provider, self._model)
        error = chunk.get("error")
        if error is not None:  # an error after the 200: OpenAI sends it as a data event
            message = error.get("message") if isinstance(error, dict) else error
            raise ProviderError(self._provider, self._model, str(message or error), None, True)
        if isinstance(chunk.get("model"), str):
            self._answered_model = chunk["model"]
        if chunk.get("usage") is not None:
            self._usage = chunk["usage"]
        choices = chunk.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return
        choice = choices[0]
        if choice.get("finish_reason") is not None:
            self._finish = str(choice["finish_reason"])
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return
        text = _text(delta.get("content"))
        if text:
            self._texts.append(text)
            self.shown += text
            self._on_text(text)
        for piece in delta.get("tool_calls") or ():
            if isinstance(piece, dict):
                self._take_call_piece(piece)

    def _take_call_piece(self, piece: dict[str, Any]) -> None:
        index = piece.get("index")
        index = index if isinstance(index, int) else len(self._calls)
        call = self._calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
        if isinstance(piece.get("id"), str):
            call["id"] = piece["id"]
        function = piece.get("function")
        if isinstance(function, dict):
            if isinstance(function.get("name"), str):
                call["name"] += function["name"]
            if isinstance(function.get("arguments"), str):
                call["arguments"] += function["arguments"]

    def ended(self) -> None:
        """The body ended: whole if a finish reason came (no ``[DONE]`` from some servers)."""
        if self._finish is not None:
            self._done = True

    def reply(self) -> ModelReply:
        calls = [
            {"id": call["id"], "function": {"name": call["name"], "arguments": call["arguments"]}}
            for _, call in sorted(self._calls.items())
        ]
        return ModelReply(
            text="".join(self._texts),
            tool_calls=tuple(_parse_tool_call(call, i) for i, call in enumerate(calls)),
            usage=parse_usage(self._usage),
            model=self._answered_model or self._model,
            stop_reason=self._finish,
        )

    def whole(self, data: dict[str, Any]) -> ModelReply:
        reply = parse_reply(self._provider, self._model, data)
        if reply.text:
            self.shown = reply.text
            self._on_text(reply.text)
        return reply


class OpenAIProvider(HttpProvider):
    """``POST {baseUrl}/chat/completions`` with ``Authorization: Bearer <apiKey>``; the
    probe lists ``GET {baseUrl}/models``."""

    API_KEY_ENV = "OPENAI_API_KEY"
    NOT_FOUND_FIX = "OpenAI-compatible baseUrl ends in /v1"

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
        self._url = f"{self.base_url}/chat/completions"
        self._models_url = f"{self.base_url}/models"
        self.limit_key = "max_completion_tokens" if self.official else "max_tokens"
        self._auth_headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        self._headers = {"Content-Type": "application/json", **self._auth_headers}

    async def complete(
        self, request: ModelRequest, *, on_text: TextListener | None = None
    ) -> ModelReply:
        """One model call, streamed when ``on_text`` listens; raises
        :class:`gateway.providers.ProviderError` on failure."""
        payload = build_payload(request, limit_key=self.limit_key)
        if on_text is None:
            data = await self._post(self._url, self._headers, payload, request.model)
            return parse_reply(self.name, request.model, data)
        payload["stream"] = True
        payload["stream_options"] = {"include_usage": True}
        return await self._stream(
            self._url,
            self._headers,
            payload,
            request.model,
            lambda: OpenAIStream(self.name, request.model, on_text),
        )

    def _listed_models(self, listing: Any) -> tuple[str, ...] | None:
        """Every id under ``data``: OpenAI and compatible servers list all they serve."""
        entries = listing.get("data") if isinstance(listing, dict) else None
        if not isinstance(entries, list):
            return None
        return tuple(
            entry["id"]
            for entry in entries
            if isinstance(entry, dict) and isinstance(entry.get("id"), str)
        )
