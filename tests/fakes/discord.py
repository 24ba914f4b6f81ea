"""A wire-level fake of Discord on loopback: the REST API (v10) and the gateway websocket.

REST, under ``/api/v10``: ``GET /users/@me`` and ``GET /oauth2/applications/@me`` (what
discord.py's login asks), ``POST /channels/{id}/messages``, ``GET /channels/{id}/messages``
(``limit`` 1–100, default 50, with ``before``/``after``; newest first, as Discord answers),
``PATCH`` and ``DELETE /channels/{id}/messages/{message id}`` (edit and delete the bot's
own messages; :attr:`FakeDiscord.edits` keeps every edit's time and content),
``POST /channels/{id}/typing`` and ``GET /channels/{id}``; a message sent while the bot was
offline (:meth:`FakeDiscord.store_message`) is only listed, as Discord replays nothing to
a fresh session. A message create with a
``nonce`` and ``enforce_nonce`` answers, within :attr:`FakeDiscord.nonce_window` seconds,
with the message the bot already created with that nonce instead of a second one (nonces
longer than 25 characters are refused, as Discord does); created messages echo the nonce,
listed ones carry none. Message ids are snowflakes of the time they were made.
Every request needs ``Authorization: Bot <token>`` (else 401) and is recorded. Failures
are scripted per route: any status and body, or a 429 shaped like Discord's
(``retry_after`` in the body, ``Retry-After``/``Via`` headers); or decided per request by
:attr:`FakeDiscord.fault` (failures at a set rate); or a message create is cut off
(:meth:`FakeDiscord.cut_off_next_message`). Message bodies are
checked like Discord does: at most 2,000 characters, never empty; a deleted channel is a
404 ``Unknown Channel`` (code 10003).

Gateway, at :attr:`FakeDiscord.gateway_url`: HELLO (op 10) → IDENTIFY (op 2) → READY, then
GUILD_CREATE for each guild; HEARTBEAT (op 1) gets HEARTBEAT_ACK (op 11); RESUME (op 6)
replays the events the client missed and sends RESUMED, or INVALID_SESSION (op 9) for an
unknown session. Frames are zlib-stream compressed when the client asks
(``compress=zlib-stream``), as discord.py does. Tests dispatch events (``MESSAGE_CREATE``,
``MESSAGE_UPDATE``, …), drop the connection (with a close code or without a close frame),
send RECONNECT (op 7), or have IDENTIFY answered with a close code such as 4004.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import socket
import time
import uuid
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

API_PREFIX = "/api/v10"
GATEWAY_PATH = "/gateway"
DEFAULT_TOKEN = "fake-discord-bot-token"
BOT_ID = "1100000000000000001"
APP_ID = "1100000000000000002"
TIMESTAMP = "2026-01-31T14:55:37.123000+00:00"
#: Discord's real heartbeat interval; tests that want to see heartbeats pass a short one.
DEFAULT_HEARTBEAT_MS = 41_250
#: Seconds a wait gives up after: a guard against hanging, not a timing assertion.
WAIT_GUARD = 10.0
#: Discord checks an enforced nonce for uniqueness "in the past few minutes".
NONCE_WINDOW = 300.0
#: Milliseconds of the Discord epoch (2015-01-01T00:00:00Z), the origin of snowflake times.
DISCORD_EPOCH_MS = 1_420_070_400_000
MAX_NONCE_LENGTH = 25

Json = dict[str, Any]


def user_payload(user_id: str, name: str, *, bot: bool = False) -> Json:
    """A Discord user object."""
    return {
        "id": user_id,
        "username": name,
        "discriminator": "0",
        "global_name": name.title(),
        "avatar": None,
        "bot": bot,
    }


def text_channel_payload(channel_id: str, guild_id: str, name: str) -> Json:
    """A guild text channel object (type 0)."""
    return {
        "id": channel_id,
        "type": 0,
        "guild_id": guild_id,
        "name": name,
        "position": 0,
        "permission_overwrites": [],
        "nsfw": False,
        "parent_id": None,
        "last_message_id": None,
    }


def thread_payload(thread_id: str, guild_id: str, parent_id: str, name: str) -> Json:
    """A public thread object (type 11) under ``parent_id``."""
    return {
        "id": thread_id,
        "type": 11,
        "guild_id": guild_id,
        "parent_id": parent_id,
        "owner_id": "1100000000000000099",
        "name": name,
        "last_message_id": None,
        "message_count": 0,
        "member_count": 1,
        "rate_limit_per_user": 0,
        "thread_metadata": {
            "archived": False,
            "auto_archive_duration": 1440,
            "archive_timestamp": TIMESTAMP,
            "locked": False,
        },
    }


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One REST request as the fake received it (path without the ``/api/v10`` prefix)."""

    method: str
    path: str
    body: Any
    authorized: bool
    #: The query string's parameters (``after``, ``limit``…).
    query: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RestFault:
    """An answer a :attr:`FakeDiscord.fault` hook gives instead of serving a request."""

    status: int
    body: Json
    headers: Mapping[str, str] = field(default_factory=dict)


#: Decides, per authorized REST request (method, path, body), whether it fails and how.
FaultHook = Callable[[str, str, Any], RestFault | None]


@dataclass(slots=True)
class _Script:
    method: str
    path: str
    status: int
    body: Json
    headers: dict[str, str]
    times: int
    after: int = 0


@dataclass(slots=True)
class _Cut:
    stored: bool
    after: int
    matching: Callable[[Json], bool] | None


@dataclass(slots=True)
class _Session:
    session_id: str
    seq: int = 0
    events: list[Json] = field(default_factory=list)


class _Connection:
    """One gateway websocket; sends are serialised so the zlib stream stays in order."""

    def __init__(self, ws: web.WebSocketResponse, request: web.Request, compress: bool) -> None:
        self.ws = ws
        self.request = request
        self.session: _Session | None = None
        self.replaying = False
        self._zlib = zlib.compressobj() if compress else None
        self._lock = asyncio.Lock()

    async def send(self, payload: Json) -> None:
        data = json.dumps(payload)
        async with self._lock:
            if self.ws.closed:
                return
            if self._zlib is None:
                await self.ws.send_str(data)
            else:
                raw = self._zlib.compress(data.encode()) + self._zlib.flush(zlib.Z_SYNC_FLUSH)
                await self.ws.send_bytes(raw)


class FakeDiscord:
    """Discord's REST API and gateway for one bot, served on 127.0.0.1 at a free port."""

    def __init__(
        self,
        *,
        token: str = DEFAULT_TOKEN,
        bot_id: str = BOT_ID,
        heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_MS,
    ) -> None:
        self.token = token
        self.bot = user_payload(bot_id, "herald", bot=True)
        self.heartbeat_interval_ms = heartbeat_interval_ms
        #: When set, the gateway accepts connections and never says HELLO.
        self.silent = False
        #: When set, IDENTIFY is answered by closing with this code (4004, 4014, …).
        self.close_on_identify: int | None = None
        self.requests: list[RecordedRequest] = []
        #: Message create bodies that created a message, by channel id.
        self.posted: dict[str, list[Json]] = {}
        #: The messages each channel holds (the bot's, as created), oldest first.
        self.messages: dict[str, list[Json]] = {}
        #: Seconds an enforced nonce returns the bot's earlier message.
        self.nonce_window = NONCE_WINDOW
        self._nonces: dict[str, tuple[float, Json]] = {}
        self._cuts: list[_Cut] = []
        self._closing = asyncio.Event()
        self.typing: list[str] = []
        #: Each edit of a message: (monotonic time, channel id, message id, new content).
        self.edits: list[tuple[float, str, str, str]] = []
        #: Message ids deleted, by channel id.
        self.deleted_messages: dict[str, list[str]] = {}
        self.deleted_channels: set[str] = set()
        self.channels: dict[str, Json] = {}
        self.guilds: list[Json] = []
        self.identifies: list[Json] = []
        self.resumes: list[Json] = []
        self.heartbeats: list[int | None] = []
        self.gateway_queries: list[dict[str, str]] = []
        self.connections = 0
        #: Consulted before the scripted failures of :meth:`fail`; a failing request is
        #: recorded in :attr:`requests` but stores nothing (no message posted).
        self.fault: FaultHook | None = None
        self._scripts: list[_Script] = []
        self._sessions: dict[str, _Session] = {}
        self._session: _Session | None = None
        self._live: _Connection | None = None
        self._all: set[_Connection] = set()
        self._last_id = 0
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self._port = 0

    # lifecycle

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get(GATEWAY_PATH, self._gateway)
        app.router.add_route("*", API_PREFIX + "/{tail:.*}", self._rest)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        self._port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()

    async def close(self) -> None:
        self._closing.set()
        for conn in list(self._all):
            await conn.ws.close(code=1001, message=b"fake Discord shutting down")
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeDiscord:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def api_base_url(self) -> str:
        return f"http://127.0.0.1:{self._port}{API_PREFIX}"

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self._port}{GATEWAY_PATH}"

    @property
    def open_connections(self) -> int:
        """Gateway websockets open now (a bot should hold one)."""
        return len(self._all)

    @property
    def session_id(self) -> str | None:
        return None if self._session is None else self._session.session_id

    # scripting REST

    def fail(
        self,
        method: str,
        path: str,
        status: int,
        body: Json | None = None,
        *,
        headers: Mapping[str, str] | None = None,
        times: int = 1,
        after: int = 0,
    ) -> None:
        """Answer ``times`` requests to ``method path`` with ``status`` and ``body``.

        The first ``after`` matching requests are served normally.
        """
        body = body if body is not None else {"message": f"{status}: scripted", "code": 0}
        script = _Script(method, path, status, body, dict(headers or {}), times, after)
        self._scripts.append(script)

    def rate_limit(
        self, method: str, path: str, retry_after: float, *, is_global: bool = False, times: int = 1
    ) -> None:
        """Answer the next ``times`` requests with a 429 the way Discord does."""
        headers = {
            "Retry-After": str(max(1, round(retry_after))),
            "X-RateLimit-Scope": "global" if is_global else "user",
            "Via": "1.1 google",
        }
        if is_global:
            headers["X-RateLimit-Global"] = "true"
        body = {"message": "You are being rate limited.", "retry_after": retry_after}
        body["global"] = is_global
        self.fail(method, path, 429, body, headers=headers, times=times)

    def add_guild(
        self, guild_id: str, name: str, channels: list[Json], threads: list[Json]
    ) -> None:
        """A guild the bot is in: listed in READY and sent as GUILD_CREATE after it."""
        for channel in [*channels, *threads]:
            self.channels[channel["id"]] = channel
        self.guilds.append(
            {
                "id": guild_id,
                "name": name,
                "unavailable": False,
                "member_count": 2,
                "roles": [],
                "members": [],
                "channels": channels,
                "threads": threads,
                "features": [],
                "owner_id": "1100000000000000099",
            }
        )

    def cut_off_next_message(
        self, *, stored: bool, after: int = 0, matching: Callable[[Json], bool] | None = None
    ) -> None:
        """Once ``after`` more message creates (those whose body is ``matching``, when
        given) were answered, the next one never gets an answer, as when the caller dies in
        the middle of it: the message is created first (``stored``) or not. The request
        hangs until the fake closes."""
        self._cuts.append(_Cut(stored, after, matching))

    def next_id(self) -> str:
        """A fresh snowflake: the time now, increasing like Discord's."""
        now = (int(time.time() * 1000) - DISCORD_EPOCH_MS) << 22
        self._last_id = max(now, self._last_id + 1)
        return str(self._last_id)

    def requests_to(self, method: str, path: str) -> list[RecordedRequest]:
        """The recorded requests of one route."""
        return [r for r in self.requests if r.method == method and r.path == path]

    # gateway events

    def message_payload(
        self,
        *,
        channel_id: str,
        author: Json,
        content: str,
        guild_id: str | None = None,
        mentions: list[Json] | None = None,
        attachments: list[Json] | None = None,
        embeds: list[Json] | None = None,
        message_type: int = 0,
    ) -> Json:
        """A message object as MESSAGE_CREATE carries it (no ``guild_id`` for a DM)."""
        payload: Json = {
            "id": self.next_id(),
            "channel_id": channel_id,
            "author": author,
            "content": content,
            "timestamp": TIMESTAMP,
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": mentions or [],
            "mention_roles": [],
            "attachments": attachments or [],
            "embeds": embeds or [],
            "pinned": False,
            "type": message_type,
            "flags": 0,
        }
        if guild_id is not None:
            payload["guild_id"] = guild_id
            payload["member"] = {
                "roles": [],
                "joined_at": TIMESTAMP,
                "deaf": False,
                "mute": False,
                "flags": 0,
            }
        return payload

    async def dispatch(self, event: str, data: Json) -> int:
        """Send a DISPATCH (op 0) in the current session; buffered for RESUME if offline."""
        session = self._session
        if session is None:
            raise LookupError("no gateway session: nobody has identified yet")
        session.seq += 1
        payload = {"op": 0, "t": event, "s": session.seq, "d": data}
        session.events.append(payload)
        live = self._live
        if live is not None and live.session is session and not live.replaying:
            await live.send(payload)
        return session.seq

    async def post_message(self, **fields: Any) -> Json:
        """Dispatch MESSAGE_CREATE for :meth:`message_payload` ``(**fields)`` (the message
        joins its channel's messages); return it."""
        payload = self.message_payload(**fields)
        self.messages.setdefault(payload["channel_id"], []).append(payload)
        await self.dispatch("MESSAGE_CREATE", payload)
        return payload

    def store_message(self, *, at: float | None = None, **fields: Any) -> Json:
        """A message a person sent while the bot had no gateway connection: it joins its
        channel's messages (``GET /channels/{id}/messages`` lists it) and no event is sent,
        buffered or replayed, as on Discord. ``at``: when it was sent (epoch seconds; now
        by default), which its snowflake id and timestamp carry."""
        payload = self.message_payload(**fields)
        if at is not None:
            payload["id"] = str((int(at * 1000) - DISCORD_EPOCH_MS) << 22)
        sent = datetime.datetime.fromtimestamp(
            ((int(payload["id"]) >> 22) + DISCORD_EPOCH_MS) / 1000, datetime.UTC
        )
        payload["timestamp"] = sent.isoformat()
        self.messages.setdefault(payload["channel_id"], []).append(payload)
        return payload

    async def drop(self, code: int | None = 4000) -> None:
        """End the live connection: with a close frame of ``code``, or abruptly if ``None``."""
        conn, self._live = self._live, None
        if conn is None:
            raise LookupError("no live gateway connection")
        if code is None:
            transport = conn.request.transport
            if transport is not None:
                transport.abort()
            return
        await conn.ws.close(code=code, message=b"fake Discord dropped the connection")

    async def request_reconnect(self) -> None:
        """Send RECONNECT (op 7): the client should close and RESUME."""
        if self._live is None:
            raise LookupError("no live gateway connection")
        await self._live.send({"op": 7, "d": None, "s": None, "t": None})

    async def wait_until(self, check: Callable[[], bool]) -> None:
        """Wait until ``check()`` holds; the fake re-checks after each thing it records.

        Gives up with ``TimeoutError`` after :data:`WAIT_GUARD` seconds, so a broken test
        fails instead of hanging.
        """
        async with asyncio.timeout(WAIT_GUARD):
            async with self._changed:
                await self._changed.wait_for(check)

    async def _note(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    # REST

    async def _rest(self, request: web.Request) -> web.StreamResponse:
        path = "/" + request.match_info["tail"]
        body: Any = None
        if request.can_read_body:
            raw = await request.read()
            body = json.loads(raw) if request.content_type == "application/json" else None
        authorized = request.headers.get("Authorization") == f"Bot {self.token}"
        self.requests.append(
            RecordedRequest(request.method, path, body, authorized, dict(request.query))
        )
        await self._note()
        creates = request.method == "POST" and path.endswith("/messages")
        cut = self._cuts[0] if authorized and creates and self._cuts else None
        if cut is not None and (cut.matching is None or cut.matching(body)):
            if cut.after > 0:
                cut.after -= 1
                cut = None
            else:
                self._cuts.pop(0)
        else:
            cut = None
        if cut is not None:
            if cut.stored:
                await self._route(request.method, path.strip("/").split("/"), body, request)
                await self._note()
            await self._closing.wait()  # the caller is gone before any answer
            raise web.HTTPServiceUnavailable()
        if not authorized:
            return _json({"message": "401: Unauthorized", "code": 0}, status=401)
        fault = self.fault(request.method, path, body) if self.fault is not None else None
        if fault is not None:
            return _json(fault.body, status=fault.status, headers=fault.headers)
        for script in self._scripts:
            if script.method != request.method or script.path != path or script.times <= 0:
                continue
            if script.after > 0:
                script.after -= 1
                break
            script.times -= 1
            return _json(script.body, status=script.status, headers=script.headers)
        return await self._route(request.method, path.strip("/").split("/"), body, request)

    async def _route(
        self, method: str, parts: list[str], body: Any, request: web.Request
    ) -> web.StreamResponse:
        match method, parts:
            case "GET", ["users", "@me"]:
                return _json(self.bot)
            case "GET", ["oauth2", "applications", "@me"]:
                return _json(self._application())
            case "POST", ["channels", channel_id, "messages"]:
                return self._create_message(channel_id, body)
            case "GET", ["channels", channel_id, "messages"]:
                return self._list_messages(channel_id, request.query)
            case "PATCH", ["channels", channel_id, "messages", message_id]:
                edited = self._edit_message(channel_id, message_id, body)
                await self._note()
                return edited
            case "DELETE", ["channels", channel_id, "messages", message_id]:
                held = self.messages.get(channel_id, [])
                found = [m for m in held if m["id"] == message_id]
                if not found:
                    return _json({"message": "Unknown Message", "code": 10008}, status=404)
                held.remove(found[0])
                self.deleted_messages.setdefault(channel_id, []).append(message_id)
                await self._note()
                return web.Response(status=204)
            case "POST", ["channels", channel_id, "typing"]:
                if channel_id in self.deleted_channels:
                    return _unknown_channel()
                self.typing.append(channel_id)
                await self._note()
                return web.Response(status=204)
            case "GET", ["channels", channel_id]:
                if channel_id in self.channels and channel_id not in self.deleted_channels:
                    return _json(self.channels[channel_id])
                return _unknown_channel()
        return _json({"message": "404: Not Found", "code": 0}, status=404)

    def _create_message(self, channel_id: str, body: Any) -> web.StreamResponse:
        if channel_id in self.deleted_channels:
            return _unknown_channel()
        content = body.get("content") if isinstance(body, dict) else None
        if not content:
            return _json({"message": "Cannot send an empty message", "code": 50006}, status=400)
        if len(content) > 2000:
            errors = {"content": {"_errors": [{"code": "BASE_TYPE_MAX_LENGTH"}]}}
            return _json(
                {"message": "Invalid Form Body", "code": 50035, "errors": errors}, status=400
            )
        nonce = body.get("nonce")
        if nonce is not None and len(str(nonce)) > MAX_NONCE_LENGTH:
            errors = {"nonce": {"_errors": [{"code": "BASE_TYPE_MAX_LENGTH"}]}}
            return _json(
                {"message": "Invalid Form Body", "code": 50035, "errors": errors}, status=400
            )
        now = time.monotonic()
        if nonce is not None and body.get("enforce_nonce") is True:
            earlier = self._nonces.get(str(nonce))
            if earlier is not None and now - earlier[0] < self.nonce_window:
                return _json(earlier[1])  # the same message again, nothing new posted
        self.posted.setdefault(channel_id, []).append(body)
        # Discord stores the content trimmed.
        message = self.message_payload(
            channel_id=channel_id, author=self.bot, content=content.strip()
        )
        self.messages.setdefault(channel_id, []).append(message)
        if nonce is not None:
            self._nonces[str(nonce)] = (now, message)
            return _json({**message, "nonce": nonce})
        return _json(message)

    def _edit_message(self, channel_id: str, message_id: str, body: Any) -> web.StreamResponse:
        """Discord's edit: only the bot's own message, content within the same limits."""
        if channel_id in self.deleted_channels:
            return _unknown_channel()
        found = [m for m in self.messages.get(channel_id, []) if m["id"] == message_id]
        if not found:
            return _json({"message": "Unknown Message", "code": 10008}, status=404)
        content = body.get("content") if isinstance(body, dict) else None
        if not isinstance(content, str) or not content or len(content) > 2000:
            errors = {"content": {"_errors": [{"code": "BASE_TYPE_MAX_LENGTH"}]}}
            return _json(
                {"message": "Invalid Form Body", "code": 50035, "errors": errors}, status=400
            )
        message = found[0]
        message["content"] = content.strip()
        message["edited_timestamp"] = TIMESTAMP
        self.edits.append((time.monotonic(), channel_id, message_id, message["content"]))
        return _json(message)

    def _list_messages(self, channel_id: str, query: Mapping[str, str]) -> web.StreamResponse:
        if channel_id in self.deleted_channels:
            return _unknown_channel()
        try:
            limit = int(query.get("limit", "50"))
            before = int(query["before"]) if "before" in query else None
            after = int(query["after"]) if "after" in query else None
        except ValueError:
            return _json({"message": "Invalid Form Body", "code": 50035}, status=400)
        if not 1 <= limit <= 100:
            return _json({"message": "Invalid Form Body", "code": 50035}, status=400)
        held = sorted(self.messages.get(channel_id, []), key=lambda m: int(m["id"]))
        if before is not None:
            held = [m for m in held if int(m["id"]) < before]
        if after is not None:
            # The oldest ``limit`` after it (discord.py pages forward from the newest).
            held = [m for m in held if int(m["id"]) > after][:limit]
        else:
            held = held[-limit:]
        return _json(list(reversed(held)))

    def _application(self) -> Json:
        return {
            "id": APP_ID,
            "name": "herald",
            "description": "",
            "icon": None,
            "bot_public": False,
            "bot_require_code_grant": False,
            "owner": user_payload("1100000000000000099", "owner"),
            "verify_key": "0" * 64,
            "flags": 0,
        }

    # gateway

    async def _gateway(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self.gateway_queries.append(dict(request.query))
        conn = _Connection(ws, request, compress=request.query.get("compress") == "zlib-stream")
        self._all.add(conn)
        self.connections += 1
        await self._note()
        try:
            hello = {"heartbeat_interval": self.heartbeat_interval_ms}
            if not self.silent:
                await conn.send({"op": 10, "d": hello, "s": None, "t": None})
            async for msg in ws:
                if msg.type is WSMsgType.TEXT:
                    await self._on_frame(conn, json.loads(msg.data))
        finally:
            self._all.discard(conn)
            if self._live is conn:
                self._live = None
            await self._note()
        return ws

    async def _on_frame(self, conn: _Connection, frame: Json) -> None:
        op = frame.get("op")
        data: Any = frame.get("d")
        if op == 1:
            self.heartbeats.append(data)
            await conn.send({"op": 11, "d": None, "s": None, "t": None})
        elif op == 2:
            self.identifies.append(data)
            await self._identify(conn, data)
        elif op == 6:
            self.resumes.append(data)
            await self._resume(conn, data)
        await self._note()

    async def _identify(self, conn: _Connection, data: Json) -> None:
        if data.get("token") != self.token:
            await conn.ws.close(code=4004, message=b"Authentication failed.")
            return
        if self.close_on_identify is not None:
            await conn.ws.close(code=self.close_on_identify, message=b"scripted close")
            return
        session = _Session(uuid.uuid4().hex)
        self._sessions[session.session_id] = session
        self._session = session
        conn.session = session
        self._live = conn
        ready = {
            "v": 10,
            "user": self.bot,
            "guilds": [{"id": g["id"], "unavailable": True} for g in self.guilds],
            "session_id": session.session_id,
            "resume_gateway_url": self.gateway_url,
            "application": {"id": APP_ID, "flags": 0},
        }
        await self.dispatch("READY", ready)
        for guild in self.guilds:
            await self.dispatch("GUILD_CREATE", guild)

    async def _resume(self, conn: _Connection, data: Json) -> None:
        session = self._sessions.get(data.get("session_id") or "")
        if session is None or data.get("token") != self.token:
            await conn.send({"op": 9, "d": False, "s": None, "t": None})
            return
        seen = data.get("seq") or 0
        conn.session = session
        self._session = session
        self._live = conn
        # Replay by index: events dispatched while replaying are appended, not sent, so the
        # client still gets every event once and in order.
        conn.replaying = True
        index = 0
        while index < len(session.events):
            event = session.events[index]
            index += 1
            if event["s"] > seen:
                await conn.send(event)
        conn.replaying = False
        await self.dispatch("RESUMED", {})


def _json(data: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> web.Response:
    # Exactly "application/json", no charset: discord.py parses a body as JSON only then.
    return web.Response(
        body=json.dumps(data).encode(),
        status=status,
        headers=headers,
        content_type="application/json",
    )


def _unknown_channel() -> web.Response:
    return _json({"message": "Unknown Channel", "code": 10003}, status=404)
