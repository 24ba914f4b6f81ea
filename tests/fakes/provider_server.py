"""What the OpenAI and Anthropic fakes share: a loopback aiohttp server that records every
request (secret headers masked) and answers from a queue of scripted :class:`Step` s.

A vendor fake subclasses :class:`ProviderFake` and supplies the parts that differ: how a
request is authorised, what a well-formed request is (``_check``, answering the vendor's
own error shapes), what to answer when the queue is empty, and its URL prefix.

A request that asks for a stream (``"stream": true``) gets its answer as server-sent
events: a step with ``events`` plays those (held at ``hold_at`` until ``hold`` is set, or
cut off at ``cut_at`` by dropping the connection); any other 200 step's JSON body is turned
into the vendor's events by :meth:`ProviderFake.to_events` (text in word pieces, tool-call
arguments in pieces). :attr:`ProviderFake.ignore_stream` makes the fake answer plain JSON
anyway, as some compatible servers do.

With :attr:`ProviderFake.context_window` set, a fake refuses a prompt that does not fit, as
its vendor does (each fake answers its vendor's real error body). Its "tokenizer" is
:func:`prompt_tokens`: a quarter of the characters of the request's JSON (system, messages
and tools), a little more than the gateway's own estimate, as a real tokenizer often is.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import re
from collections import deque
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any, ClassVar

import orjson
from aiohttp import web

SECRET_HEADERS = frozenset({"authorization", "x-api-key"})


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request as the fake saw it; secret header values are masked."""

    method: str
    path: str
    headers: dict[str, str]
    authorized: bool
    body: Any
    raw: bytes


@dataclass(frozen=True, slots=True)
class Step:
    """One scripted answer: sent after ``delay`` seconds, and once ``hold`` is set when one
    is given (the server wakes early on close)."""

    status: int = 200
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)
    delay: float = 0.0
    #: A gate the test opens: the model "thinks" until then, for exactly as long as needed.
    hold: asyncio.Event | None = None
    #: A streamed answer: its SSE events, each ``event:``/``data:`` lines and a blank line.
    events: tuple[bytes, ...] | None = None
    #: With ``events`` and ``hold``: the events before this index are sent, then the stream
    #: waits for ``hold`` (so a test sees text arrive before the model has finished).
    hold_at: int | None = None
    #: With ``events``: the connection is dropped after this many events (a provider drop).
    cut_at: int | None = None


#: Answers a request by its content (the decoded JSON body) when no scripted step is queued.
Responder = Callable[[Any], Step]


def prompt_tokens(body: Any) -> int:
    """The fake's token count of a request's prompt (see the module docstring)."""
    if not isinstance(body, dict):
        return 0
    parts = {key: body.get(key) for key in ("system", "messages", "tools")}
    return math.ceil(len(orjson.dumps(parts)) / 4)


def sse(data: Any, event: str | None = None) -> bytes:
    """One server-sent event carrying ``data`` (JSON-encoded unless it is a str)."""
    payload = data if isinstance(data, str) else orjson.dumps(data).decode()
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


def pieces(text: str, size: int = 2) -> list[str]:
    """``text`` cut every ``size`` words (whitespace kept), as a model's deltas come."""
    words = re.findall(r"\S+\s*|\s+", text)
    return ["".join(words[i : i + size]) for i in range(0, len(words), size)] or [text]


def masked_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """Headers with secret values replaced: ``Bearer ***``, ``***``."""
    shown: dict[str, str] = {}
    for name, value in headers.items():
        if name.lower() in SECRET_HEADERS:
            value = "Bearer ***" if value.startswith("Bearer ") else "***"
        shown[name] = value
    return shown


class ProviderFake:
    """The serving skeleton of a provider fake; see the module docstring."""

    #: Appended to the server's root to form :attr:`base_url` (``/v1`` for OpenAI).
    URL_SUFFIX: ClassVar[str] = ""
    #: The header carrying a request id, as the vendor names it.
    REQUEST_ID_HEADER: ClassVar[str] = "x-request-id"

    def __init__(self, *, api_key: str | None, model: str) -> None:
        self.api_key = api_key
        self.model = model
        self.requests: list[RecordedRequest] = []
        self._steps: deque[Step] = deque()
        self._closing = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._ids = itertools.count(1)
        self.base_url = ""
        #: Tokens a prompt and its requested reply may take; None: no limit.
        self.context_window: int | None = None
        #: Answer plain JSON even to a request that asks for a stream.
        self.ignore_stream = False

    @property
    def pending(self) -> int:
        """Scripted answers not yet played."""
        return len(self._steps)

    def enqueue(self, step: Step) -> None:
        self._steps.append(step)

    def reply_json(self, body: Any, *, status: int = 200, delay: float = 0.0) -> None:
        self.enqueue(Step(status=status, body=orjson.dumps(body), delay=delay))

    # -- what a vendor fake supplies ------------------------------------------------------

    def _authorized(self, request: web.Request) -> bool:
        raise NotImplementedError

    def _check(self, request: web.Request, authorized: bool, body: Any) -> Step | None:
        """The vendor's error for a request it would refuse, or None."""
        raise NotImplementedError

    def _next_step(self, body: Any) -> Step:
        """The answer to a request that passed ``_check``."""
        raise NotImplementedError

    def to_events(self, answer: dict[str, Any]) -> tuple[bytes, ...]:
        """The vendor's SSE events for a plain JSON ``answer``."""
        raise NotImplementedError

    def stream_step(
        self,
        answer: dict[str, Any],
        *,
        hold: asyncio.Event | None = None,
        hold_at: int | None = None,
        cut_at: int | None = None,
    ) -> Step:
        """``answer`` streamed, paused at event ``hold_at`` until ``hold`` is set, or cut
        off after ``cut_at`` events."""
        return Step(events=self.to_events(answer), hold=hold, hold_at=hold_at, cut_at=cut_at)

    # -- serving --------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body: Any = orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:
            body = None
        authorized = self.api_key is None or self._authorized(request)
        self.requests.append(
            RecordedRequest(
                request.method, request.path, masked_headers(request.headers), authorized, body, raw
            )
        )
        step = self._check(request, authorized, body) or self._next_step(body)
        if step.delay:
            with suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), step.delay)
        wants_stream = isinstance(body, dict) and body.get("stream") is True
        if wants_stream and not self.ignore_stream and step.status == 200:
            if step.events is None and step.body:
                step = Step(events=self.to_events(orjson.loads(step.body)), hold=step.hold)
            if step.events is not None:
                return await self._stream(request, step)
        if step.hold is not None:
            await self._until_closing(step.hold)
        headers = {
            "Content-Type": "application/json",
            self.REQUEST_ID_HEADER: f"req_{len(self.requests)}",
        }
        headers.update(step.headers)
        return web.Response(status=step.status, body=step.body, headers=headers)

    async def _stream(self, request: web.Request, step: Step) -> web.StreamResponse:
        assert step.events is not None
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                self.REQUEST_ID_HEADER: f"req_{len(self.requests)}",
            }
        )
        await response.prepare(request)
        hold_at = 0 if step.hold_at is None else step.hold_at
        for index, event in enumerate(step.events):
            if step.hold is not None and index == hold_at:
                await self._until_closing(step.hold)
            if step.cut_at is not None and index == step.cut_at:
                assert request.transport is not None
                request.transport.abort()  # a provider drop: no end of the chunked body
                return response
            await response.write(event)
        await response.write_eof()
        return response

    async def _until_closing(self, gate: asyncio.Event) -> None:
        """Wait for ``gate``, or for the fake to close."""
        waits = [asyncio.ensure_future(gate.wait()), asyncio.ensure_future(self._closing.wait())]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
            await asyncio.gather(*waits, return_exceptions=True)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # handler_cancellation: a client that gives up (timeout) ends the handler too.
        self._runner = web.AppRunner(
            app, access_log=None, handler_cancellation=True, shutdown_timeout=0.5
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.base_url = f"http://127.0.0.1:{port}{self.URL_SUFFIX}"

    async def close(self) -> None:
        self._closing.set()
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()
