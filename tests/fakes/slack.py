"""A wire-level fake Slack on loopback: the Web API methods Herald calls and Socket Mode.

Web API: ``POST /api/<method>`` with the bot token (the app token for
``apps.connections.open``) in ``Authorization: Bearer …``; arguments as slack_sdk sends them
(query string, form or JSON body). Every call is recorded; failures can be scripted per
method (``ok: false`` codes, HTTP 5xx, 429 with ``Retry-After``), or decided per call by
:attr:`FakeSlack.fault` (failures at a set rate).

Native streaming: ``chat.startStream`` (a thread reply; outside a DM it needs
``recipient_user_id`` and ``recipient_team_id``), ``chat.appendStream`` and
``chat.stopStream`` build one message, as Slack does; with :attr:`FakeSlack.refuse_streaming`
set, ``chat.startStream`` answers that error (an older workspace). One call carrying more than
:data:`STREAM_TEXT_LIMIT` characters of text is refused ``msg_too_long``.
:meth:`FakeSlack.end_streams` ends streams on Slack's side (one left too long without an
append, or stopped by the person): their later appends and stops are refused
``message_not_in_streaming_state`` and the message keeps the text it had. ``chat.update``
changes a stored message's text (``chat.delete`` removes it); :attr:`FakeSlack.updates` keeps
each update's time.

Conversations keep their messages, as Slack does: the bot's posts (with their message
``metadata``) and the ``message`` events a test pushes. ``conversations.history`` (top-level
messages, newest first) and ``conversations.replies`` (a thread's parent, then its replies,
oldest first) answer from them with ``oldest``/``latest``/``inclusive``/``limit``/``cursor``
paging, and include each message's metadata only with ``include_all_metadata``.

Socket Mode: ``apps.connections.open`` hands out a ``ws://`` URL on the same server; the
websocket sends ``hello``, then the envelopes a test pushes, and records the client's acks
(``{"envelope_id": …}``). HTTP mode requests are signed with :meth:`FakeSlack.sign` exactly
as Slack signs them (``v0:<timestamp>:<body>``, HMAC-SHA256 with the signing secret).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import WSMsgType, web

BOT_TOKEN = "xoxb-fake-bot-token"
APP_TOKEN = "xapp-fake-app-token"
SIGNING_SECRET = "fake-signing-secret"
TEAM_ID = "T0FAKE"
APP_ID = "A0FAKE"
BOT_USER_ID = "U0HERALD"
BOT_ID = "B0HERALD"
#: Slack's documented limit of the ``markdown_text`` one ``chat.startStream``,
#: ``chat.appendStream`` or ``chat.stopStream`` call carries (``markdown_text`` chunks count
#: alike); a longer call is refused ``msg_too_long``.
STREAM_TEXT_LIMIT = 12_000
#: Seconds any wait on the fake gives up after: generous, never reached when things work.
WAIT = 5.0


@dataclass(frozen=True)
class ApiCall:
    """One Web API request as the fake received it."""

    method: str
    args: Mapping[str, Any]
    token: str | None


@dataclass(frozen=True)
class Failure:
    """A scripted answer: ``ok: false`` with ``error``, or an HTTP ``status`` (5xx, 429)."""

    error: str | None = None
    status: int = 200
    retry_after: int | None = None


@dataclass
class Post:
    """A message posted with ``chat.postMessage``."""

    channel: str
    text: str
    ts: str
    thread_ts: str | None
    metadata: dict[str, Any] | None = None


@dataclass
class _Socket:
    ws: web.WebSocketResponse
    acks: dict[str, asyncio.Future[dict[str, Any]]] = field(default_factory=dict)


#: Decides, per Web API call (method, arguments), whether it fails and how; None lets it pass.
FaultHook = Callable[[str, Mapping[str, Any]], Failure | None]


class FakeSlack:
    """The fake server. ``await start()``, point the client at :attr:`api_base_url`."""

    def __init__(self, *, channels: set[str] | None = None) -> None:
        #: Conversations that exist: posting anywhere else answers ``channel_not_found``.
        self.channels: set[str] = channels if channels is not None else {"C1", "C2", "D1"}
        self.calls: list[ApiCall] = []
        self.posts: list[Post] = []
        self.reactions: set[tuple[str, str, str]] = set()
        #: Every ack received, by envelope id.
        self.acks: dict[str, dict[str, Any]] = {}
        self.connections = 0
        #: Consulted before the scripted failures of :meth:`fail`; a failing call is recorded
        #: in :attr:`calls` but stores nothing (no post).
        self.fault: FaultHook | None = None
        # Per method: [successes still to let through, then this failure].
        self._failures: dict[str, deque[list[Any]]] = {}
        #: Methods whose calls are recorded but answered only once their event is set.
        self._holds: dict[str, asyncio.Event] = {}
        #: Seconds a method's calls take to be answered (Slack's own latency).
        self._latency: dict[str, float] = {}
        # Per method: [calls still to answer, then cut one off: after Slack acted on it?].
        self._cuts: dict[str, deque[list[Any]]] = {}
        self._closing = asyncio.Event()
        self._sockets: list[web.WebSocketResponse] = []
        self._ack_waiters: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._changed = asyncio.Condition()
        self._connected = asyncio.Event()
        self._ts = itertools.count(1)
        self._last_ts = 0.0
        #: Each conversation's messages (message objects as Slack stores them), by channel.
        self.history: dict[str, list[dict[str, Any]]] = {}
        #: Set to an error code (``unknown_method``, ``missing_scope``…) to refuse streams.
        self.refuse_streaming: str | None = None
        #: Streams not yet stopped: ts → channel.
        self.open_streams: dict[str, str] = {}
        #: Each chat.update and chat.appendStream: (monotonic time, method, ts, text).
        self.updates: list[tuple[float, str, str, str]] = []
        self._runner: web.AppRunner | None = None
        self._port = 0

    def __repr__(self) -> str:
        return f"<FakeSlack port={self._port} calls={len(self.calls)} sockets={len(self._sockets)}>"

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_get("/socket", self._socket)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self._port = int(self._runner.addresses[0][1])

    async def close(self) -> None:
        for gate in self._holds.values():
            gate.set()
        self._closing.set()
        for ws in list(self._sockets):
            await ws.close()
        for waiter in self._ack_waiters.values():
            waiter.cancel()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def api_base_url(self) -> str:
        """The Web API root, with the trailing slash slack_sdk needs."""
        return f"http://127.0.0.1:{self._port}/api/"

    # -- scripting and inspection ------------------------------------------------------------

    def fail(
        self,
        method: str,
        *,
        error: str | None = None,
        status: int = 200,
        retry_after: int | None = None,
        times: int = 1,
        after: int = 0,
    ) -> None:
        """The next ``times`` calls of ``method`` fail this way, once ``after`` more succeeded."""
        entries: list[list[Any]] = [[0, Failure(error, status, retry_after)] for _ in range(times)]
        entries[0][0] = after
        self._failures.setdefault(method, deque()).extend(entries)

    def hold(self, method: str) -> None:
        """Calls of ``method`` are recorded at once but answered only after :meth:`release`
        (a Web API that hangs); a call released after its client gave up still takes effect,
        as a request that reached Slack does."""
        self._holds[method] = asyncio.Event()

    def slow(self, method: str, seconds: float) -> None:
        """Calls of ``method`` are recorded at once and answered ``seconds`` later."""
        self._latency[method] = seconds

    def release(self, method: str) -> None:
        """Answer the held calls of ``method`` and stop holding new ones."""
        gate = self._holds.pop(method, None)
        if gate is not None:
            gate.set()

    def cut_off(
        self,
        method: str,
        *,
        stored: bool,
        after: int = 0,
        matching: Callable[[Mapping[str, Any]], bool] | None = None,
    ) -> None:
        """Once ``after`` more calls of ``method`` (those ``matching`` their arguments, when
        given) were answered, the next one never gets an answer, as when the caller dies in
        the middle of it: Slack has acted on it (``stored``: the post is in the
        conversation) or not yet. It hangs until the fake closes."""
        self._cuts.setdefault(method, deque()).append([after, stored, matching])

    def end_streams(self) -> None:
        """Slack ends every open stream itself (left too long without an append, or stopped
        by the person in the client): later appends and stops of them are refused
        ``message_not_in_streaming_state``; each message keeps the text it had."""
        self.open_streams.clear()

    def calls_to(self, method: str) -> list[ApiCall]:
        return [call for call in self.calls if call.method == method]

    async def wait_for(self, predicate: Callable[[], bool], *, within: float = WAIT) -> None:
        """Wait until ``predicate()`` holds (checked after every API call and ack), at most
        ``within`` seconds."""
        async with asyncio.timeout(within), self._changed:
            await self._changed.wait_for(predicate)

    async def wait_posts(self, count: int) -> list[Post]:
        await self.wait_for(lambda: len(self.posts) >= count)
        return self.posts

    def next_ts(self) -> str:
        """A fresh message ts: the time now in microseconds, increasing like Slack's."""
        self._last_ts = max(time.time(), self._last_ts + 1e-6)
        return f"{self._last_ts:.6f}"

    def visible(self, channel: str) -> list[dict[str, Any]]:
        """The bot's messages in ``channel`` (threads included), oldest first."""
        return [m for m in self.history.get(channel, []) if m.get("bot_id") == BOT_ID]

    # -- Socket Mode -------------------------------------------------------------------------

    async def wait_connected(self) -> None:
        async with asyncio.timeout(WAIT):
            await self._connected.wait()

    @property
    def open_sockets(self) -> int:
        """Socket Mode connections open now (an app may hold up to 10)."""
        return len([ws for ws in self._sockets if not ws.closed])

    async def push(self, envelope: dict[str, Any], *, connection: int = -1) -> str:
        """Send an envelope on one websocket — the newest, or the ``connection``-th open one
        (Slack spreads an app's events over its connections) — and return its envelope id,
        whose ack can be awaited."""
        live = [ws for ws in self._sockets if not ws.closed]
        if not live:
            raise ConnectionError("no Socket Mode client is connected")
        envelope_id = str(envelope["envelope_id"])
        self._ack_waiters[envelope_id] = asyncio.get_running_loop().create_future()
        await live[connection].send_str(json.dumps(envelope))
        return envelope_id

    async def push_event(
        self,
        event: dict[str, Any],
        *,
        event_id: str | None = None,
        retry_attempt: int = 0,
        retry_reason: str = "",
        connection: int = -1,
    ) -> str:
        """Push an ``events_api`` envelope around ``event`` (on ``connection``, as
        :meth:`push`); returns the envelope id.

        A ``message`` event's message joins its conversation's history."""
        if event.get("type") == "message" and "subtype" not in event:
            self._store(str(event.get("channel")), dict(event))
        return await self.push(
            {
                "envelope_id": str(uuid.uuid4()),
                "type": "events_api",
                "payload": self.event_callback(event, event_id=event_id),
                "accepts_response_payload": False,
                "retry_attempt": retry_attempt,
                "retry_reason": retry_reason,
            },
            connection=connection,
        )

    async def send_event(
        self,
        request_url: str,
        event: dict[str, Any],
        *,
        event_id: str | None = None,
        retry_num: int | None = None,
    ) -> int:
        """HTTP mode: POST the signed ``event_callback`` around ``event`` to the app's Request
        URL, as Slack does; returns the HTTP status the app answered (Slack retries a
        non-2xx). A ``message`` event's message joins its conversation's history."""
        if event.get("type") == "message" and "subtype" not in event:
            self._store(str(event.get("channel")), dict(event))
        body = json.dumps(self.event_callback(event, event_id=event_id)).encode()
        headers = {"Content-Type": "application/json", **self.sign(body)}
        if retry_num is not None:
            headers |= {"X-Slack-Retry-Num": str(retry_num), "X-Slack-Retry-Reason": "timeout"}
        async with (
            aiohttp.ClientSession() as http,
            http.post(request_url, data=body, headers=headers) as response,
        ):
            return response.status

    async def push_command(
        self, command: str, text: str, *, channel_id: str = "C1", user_id: str = "U1"
    ) -> str:
        """Push a ``slash_commands`` envelope; returns the envelope id."""
        return await self.push(
            {
                "envelope_id": str(uuid.uuid4()),
                "type": "slash_commands",
                "payload": self.command_payload(
                    command, text, channel_id=channel_id, user_id=user_id
                ),
                "accepts_response_payload": True,
            }
        )

    async def wait_ack(self, envelope_id: str) -> dict[str, Any]:
        async with asyncio.timeout(WAIT):
            return await self._ack_waiters[envelope_id]

    async def disconnect(self, reason: str = "refresh_requested") -> None:
        """Ask the client to reconnect, as Slack does every few hours."""
        for ws in self._sockets:
            if not ws.closed:
                await ws.send_str(json.dumps({"type": "disconnect", "reason": reason}))

    # -- payload builders --------------------------------------------------------------------

    def message(
        self,
        text: str,
        *,
        channel: str = "C1",
        user: str = "U1",
        channel_type: str | None = None,
        thread_ts: str | None = None,
        ts: str | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """A ``message`` event as Slack sends it."""
        event: dict[str, Any] = {
            "type": "message",
            "channel": channel,
            "user": user,
            "text": text,
            "ts": ts or self.next_ts(),
            "channel_type": channel_type or ("im" if channel.startswith("D") else "channel"),
            "team": TEAM_ID,
        }
        if thread_ts is not None:
            event["thread_ts"] = thread_ts
        event.update(extra)
        return event

    def event_callback(
        self, event: dict[str, Any], *, event_id: str | None = None
    ) -> dict[str, Any]:
        """The Events API body (``event_callback``) around ``event``."""
        return {
            "token": "legacy-verification-token",
            "team_id": TEAM_ID,
            "api_app_id": APP_ID,
            "event": {**event, "event_ts": event.get("ts", self.next_ts())},
            "type": "event_callback",
            "event_id": event_id or f"Ev{uuid.uuid4().hex[:10].upper()}",
            "event_time": int(time.time()),
            "authorizations": [
                {
                    "team_id": TEAM_ID,
                    "user_id": BOT_USER_ID,
                    "is_bot": True,
                    "is_enterprise_install": False,
                }
            ],
            "is_ext_shared_channel": False,
        }

    def command_payload(
        self, command: str, text: str, *, channel_id: str = "C1", user_id: str = "U1"
    ) -> dict[str, Any]:
        """A slash command payload (what Slack form-encodes in HTTP mode)."""
        return {
            "token": "legacy-verification-token",
            "team_id": TEAM_ID,
            "team_domain": "fake",
            "channel_id": channel_id,
            "channel_name": "directmessage" if channel_id.startswith("D") else "general",
            "user_id": user_id,
            "user_name": "someone",
            "command": command,
            "text": text,
            "api_app_id": APP_ID,
            "is_enterprise_install": "false",
            "response_url": f"http://127.0.0.1:{self._port}/response",
            "trigger_id": f"{next(self._ts)}.{uuid.uuid4().hex[:12]}",
        }

    @staticmethod
    def sign(
        body: bytes, *, timestamp: int | None = None, secret: str = SIGNING_SECRET
    ) -> dict[str, str]:
        """Slack's request signing headers for ``body``."""
        stamp = str(int(time.time()) if timestamp is None else timestamp)
        base = b"v0:" + stamp.encode() + b":" + body
        digest = hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
        return {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": f"v0={digest}"}

    # -- server side -------------------------------------------------------------------------

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        args: dict[str, Any] = dict(request.query)
        if request.content_type == "application/json":
            args.update(await request.json())
        elif request.can_read_body:
            args.update((await request.post()).items())
        auth = request.headers.get("Authorization", "")
        token = auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else None
        cuts = self._cuts.get(method)
        cut: bool | None = None
        if cuts and (cuts[0][2] is None or cuts[0][2](args)):
            if cuts[0][0] > 0:
                cuts[0][0] -= 1
            else:
                cut = bool(cuts.popleft()[1])
        gate, latency = self._holds.get(method), self._latency.get(method, 0.0)
        waits = gate is not None or latency > 0
        if waits:
            async with self._changed:
                self.calls.append(ApiCall(method, args, token))
                self._changed.notify_all()
            if gate is not None:
                await gate.wait()
            await asyncio.sleep(latency)
        async with self._changed:
            if not waits:
                self.calls.append(ApiCall(method, args, token))
            if cut is None or cut:
                response = self._answer(method, args, token)
            self._changed.notify_all()
        if cut is not None:
            await self._closing.wait()  # the caller is gone before any answer
            raise web.HTTPServiceUnavailable()
        return response

    def _answer(self, method: str, args: dict[str, Any], token: str | None) -> web.Response:
        failure = self.fault(method, args) if self.fault is not None else None
        queue = self._failures.get(method)
        if failure is None and queue and queue[0][0] > 0:
            queue[0][0] -= 1
        elif failure is None and queue:
            failure = queue.popleft()[1]
        if failure is not None:
            if failure.status >= 500:
                return web.Response(
                    status=failure.status,
                    text="<html>upstream error</html>",
                    content_type="text/html",
                )
            headers = {}
            if failure.retry_after is not None:
                headers["Retry-After"] = str(failure.retry_after)
            error = failure.error or ("ratelimited" if failure.status == 429 else "fatal_error")
            return web.json_response(
                {"ok": False, "error": error}, status=failure.status, headers=headers
            )
        expected = APP_TOKEN if method == "apps.connections.open" else BOT_TOKEN
        if token is None:
            return _error("not_authed")
        if token != expected:
            return _error("invalid_auth")
        handler = getattr(self, "_m_" + method.replace(".", "_"), None)
        if handler is None:
            return _error("unknown_method")
        result: web.Response = handler(args)
        return result

    def _m_auth_test(self, args: dict[str, Any]) -> web.Response:
        return web.json_response(
            {
                "ok": True,
                "url": "https://fake.slack.com/",
                "team": "Fake",
                "user": "herald",
                "team_id": TEAM_ID,
                "user_id": BOT_USER_ID,
                "bot_id": BOT_ID,
                "is_enterprise_install": False,
            }
        )

    def _m_apps_connections_open(self, args: dict[str, Any]) -> web.Response:
        ticket = uuid.uuid4().hex
        return web.json_response(
            {"ok": True, "url": f"ws://127.0.0.1:{self._port}/socket?ticket={ticket}"}
        )

    def _m_chat_postMessage(self, args: dict[str, Any]) -> web.Response:  # noqa: N802
        channel = str(args.get("channel") or "")
        text = str(args.get("text") or "")
        if channel not in self.channels:
            return _error("channel_not_found")
        if not text:
            return _error("no_text")
        metadata = args.get("metadata")
        if isinstance(metadata, str):  # form-encoded callers send it as JSON text
            try:
                metadata = json.loads(metadata)
            except ValueError:
                return _error("invalid_metadata_format")
        if metadata is not None and not _valid_metadata(metadata):
            return _error("invalid_metadata_format")
        ts = self.next_ts()
        thread_ts = args.get("thread_ts")
        self.posts.append(Post(channel, text, ts, str(thread_ts) if thread_ts else None, metadata))
        message: dict[str, Any] = {
            "type": "message",
            "text": text,
            "user": BOT_USER_ID,
            "bot_id": BOT_ID,
            "app_id": APP_ID,
            "ts": ts,
        }
        if thread_ts:
            message["thread_ts"] = thread_ts
        if metadata is not None:
            message["metadata"] = metadata
        self._store(channel, message)
        return web.json_response({"ok": True, "channel": channel, "ts": ts, "message": message})

    def _store(self, channel: str, message: dict[str, Any]) -> None:
        messages = self.history.setdefault(channel, [])
        if any(m.get("ts") == message.get("ts") for m in messages):
            return
        messages.append(message)
        thread_ts = message.get("thread_ts")
        parent = next((m for m in messages if thread_ts and m.get("ts") == thread_ts), None)
        if parent is not None and parent is not message:
            parent["reply_count"] = int(parent.get("reply_count", 0)) + 1
            parent.setdefault("thread_ts", thread_ts)

    def _m_conversations_history(self, args: dict[str, Any]) -> web.Response:
        channel = str(args.get("channel") or "")
        if channel not in self.channels:
            return _error("channel_not_found")
        # Replies stay in their thread; the parent (thread_ts == ts) is top-level.
        top = [
            m for m in self.history.get(channel, []) if m.get("thread_ts") in (None, m.get("ts"))
        ]
        in_range = _in_range(top, args)
        in_range.sort(key=lambda m: float(m["ts"]), reverse=True)
        return _page(in_range, args)

    def _m_conversations_replies(self, args: dict[str, Any]) -> web.Response:
        channel = str(args.get("channel") or "")
        if channel not in self.channels:
            return _error("channel_not_found")
        ts = str(args.get("ts") or "")
        if not ts:
            return _error("invalid_arguments")
        messages = self.history.get(channel, [])
        parent = next((m for m in messages if m.get("ts") == ts), None)
        if parent is None:
            return _error("thread_not_found")
        replies = [m for m in messages if m.get("thread_ts") == ts and m is not parent]
        replies = _in_range(replies, args)
        replies.sort(key=lambda m: float(m["ts"]))
        return _page([parent, *replies], args)

    def _m_chat_update(self, args: dict[str, Any]) -> web.Response:
        channel = str(args.get("channel") or "")
        if channel not in self.channels:
            return _error("channel_not_found")
        ts = str(args.get("ts") or "")
        message = self.stored(channel, ts)
        if message is None:
            return _error("message_not_found")
        message["text"] = str(args.get("text") or "")
        metadata = args.get("metadata")
        if isinstance(metadata, str):
            metadata = json.loads(metadata)
        if metadata is not None:
            if not _valid_metadata(metadata):
                return _error("invalid_metadata_format")
            message["metadata"] = metadata
        self.updates.append((time.monotonic(), "chat.update", ts, message["text"]))
        return web.json_response(
            {"ok": True, "channel": channel, "ts": args.get("ts"), "text": args.get("text")}
        )

    def _m_chat_delete(self, args: dict[str, Any]) -> web.Response:
        channel, ts = str(args.get("channel") or ""), str(args.get("ts") or "")
        message = self.stored(channel, ts)
        if message is None:
            return _error("message_not_found")
        self.history[channel].remove(message)
        return web.json_response({"ok": True, "channel": channel, "ts": ts})

    def stored(self, channel: str, ts: str) -> dict[str, Any] | None:
        """The stored message ``ts`` of ``channel``, if there is one."""
        return next((m for m in self.history.get(channel, []) if m.get("ts") == ts), None)

    def _m_chat_startStream(self, args: dict[str, Any]) -> web.Response:  # noqa: N802
        channel = str(args.get("channel") or "")
        if self.refuse_streaming is not None:
            return _error(self.refuse_streaming)
        if channel not in self.channels:
            return _error("channel_not_found")
        thread_ts = args.get("thread_ts")
        if not thread_ts:
            return _error("invalid_arguments")
        in_dm = channel.startswith("D")
        if not in_dm and not (args.get("recipient_user_id") and args.get("recipient_team_id")):
            return _error("missing_recipient_user_id")
        text = stream_text(args)
        if len(text) > STREAM_TEXT_LIMIT:
            return _error("msg_too_long")
        ts = self.next_ts()
        message: dict[str, Any] = {
            "type": "message",
            "text": text,
            "user": BOT_USER_ID,
            "bot_id": BOT_ID,
            "app_id": APP_ID,
            "ts": ts,
            "thread_ts": str(thread_ts),
        }
        self._store(channel, message)
        self.open_streams[ts] = channel
        return web.json_response({"ok": True, "channel": channel, "ts": ts})

    def _m_chat_appendStream(self, args: dict[str, Any]) -> web.Response:  # noqa: N802
        ts, channel = str(args.get("ts") or ""), str(args.get("channel") or "")
        if self.open_streams.get(ts) != channel:
            return _error("message_not_in_streaming_state")
        text = stream_text(args)
        if not text:
            return _error("invalid_arguments")
        if len(text) > STREAM_TEXT_LIMIT:
            return _error("msg_too_long")
        message = self.stored(channel, ts)
        assert message is not None
        message["text"] = str(message["text"]) + text
        self.updates.append((time.monotonic(), "chat.appendStream", ts, message["text"]))
        return web.json_response({"ok": True, "channel": channel, "ts": ts})

    def _m_chat_stopStream(self, args: dict[str, Any]) -> web.Response:  # noqa: N802
        ts, channel = str(args.get("ts") or ""), str(args.get("channel") or "")
        if self.open_streams.get(ts) != channel:
            return _error("message_not_in_streaming_state")
        text = stream_text(args)
        if len(text) > STREAM_TEXT_LIMIT:
            return _error("msg_too_long")
        del self.open_streams[ts]
        message = self.stored(channel, ts)
        assert message is not None
        message["text"] = str(message["text"]) + text
        return web.json_response({"ok": True, "channel": channel, "ts": ts, "message": message})

    def _m_reactions_add(self, args: dict[str, Any]) -> web.Response:
        key = (str(args.get("channel")), str(args.get("timestamp")), str(args.get("name")))
        if key[0] not in self.channels:
            return _error("channel_not_found")
        if key in self.reactions:
            return _error("already_reacted")
        self.reactions.add(key)
        return web.json_response({"ok": True})

    def _m_reactions_remove(self, args: dict[str, Any]) -> web.Response:
        key = (str(args.get("channel")), str(args.get("timestamp")), str(args.get("name")))
        if key not in self.reactions:
            return _error("no_reaction")
        self.reactions.discard(key)
        return web.json_response({"ok": True})

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async with self._changed:
            self._sockets.append(ws)
            self.connections += 1
            self._changed.notify_all()
        await ws.send_str(
            json.dumps(
                {
                    "type": "hello",
                    "num_connections": 1,
                    "debug_info": {"host": "fake-applink", "approximate_connection_time": 18060},
                    "connection_info": {"app_id": APP_ID},
                }
            )
        )
        self._connected.set()
        try:
            async for frame in ws:
                if frame.type == WSMsgType.TEXT:
                    await self._on_ack(json.loads(frame.data))
        finally:
            self._sockets.remove(ws)
        return ws

    async def _on_ack(self, ack: dict[str, Any]) -> None:
        envelope_id = str(ack.get("envelope_id"))
        async with self._changed:
            self.acks[envelope_id] = ack
            waiter = self._ack_waiters.get(envelope_id)
            if waiter is not None and not waiter.done():
                waiter.set_result(ack)
            self._changed.notify_all()


def stream_text(args: Mapping[str, Any]) -> str:
    """The text a streaming call adds: ``markdown_text``, then its ``markdown_text`` chunks
    (slack_sdk's helper sends chunks: ``{"type": "markdown_text", "text": …}``)."""
    chunks = args.get("chunks")
    if isinstance(chunks, str):
        chunks = json.loads(chunks)
    parts = [str(args.get("markdown_text") or "")]
    for chunk in chunks if isinstance(chunks, list) else []:
        if isinstance(chunk, dict) and chunk.get("type") == "markdown_text":
            parts.append(str(chunk.get("text") or ""))
    return "".join(parts)


def _error(code: str) -> web.Response:
    return web.json_response({"ok": False, "error": code})


def _truthy(value: Any) -> bool:
    """A boolean argument as Slack reads it: slack_sdk sends "1"/"0" in query strings."""
    return value is True or str(value).lower() in ("1", "true")


def _valid_metadata(metadata: Any) -> bool:
    return (
        isinstance(metadata, dict)
        and isinstance(metadata.get("event_type"), str)
        and bool(metadata["event_type"])
        and isinstance(metadata.get("event_payload"), dict)
    )


def _in_range(messages: list[dict[str, Any]], args: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``messages`` within ``oldest``/``latest`` (exclusive unless ``inclusive``)."""
    inclusive = _truthy(args.get("inclusive"))
    oldest = float(args.get("oldest") or 0)
    latest = float(args["latest"]) if args.get("latest") else float("inf")

    def keep(message: dict[str, Any]) -> bool:
        ts = float(message["ts"])
        if inclusive:
            return oldest <= ts <= latest
        return oldest < ts < latest

    return [m for m in messages if keep(m)]


def _page(messages: list[dict[str, Any]], args: Mapping[str, Any]) -> web.Response:
    """One page of ``messages`` as Slack answers it: ``limit`` (default 100, at most 999)
    from ``cursor``, metadata only with ``include_all_metadata``."""
    limit = min(int(args.get("limit") or 100), 999)
    cursor = str(args.get("cursor") or "")
    start = int(cursor.removeprefix("next:")) if cursor.startswith("next:") else 0
    page = messages[start : start + limit]
    if not _truthy(args.get("include_all_metadata")):
        page = [{k: v for k, v in m.items() if k != "metadata"} for m in page]
    more = start + limit < len(messages)
    body: dict[str, Any] = {"ok": True, "messages": page, "has_more": more}
    body["response_metadata"] = {"next_cursor": f"next:{start + limit}" if more else ""}
    return web.json_response(body)
