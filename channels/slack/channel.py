"""The Slack channel: slack-bolt's ``AsyncApp`` inside the gateway's event loop.

``mode: "socket"`` connects through ``AsyncSocketModeHandler.connect_async()``; ``mode:
"http"`` serves ``POST /slack/events`` on the gateway's own aiohttp app, where bolt verifies
Slack's signature (bad or stale: 401) and answers ``url_verification``. Listeners run before
the ack (``process_before_response``) but only filter and hand the message to a task of
their own, so :meth:`stop` can see every call in flight; the ack waits (up to
``ACCEPT_WAIT``) for that handler to return, i.e. for the gateway to record the message.
Events Slack sends again (``X-Slack-Retry-Num``/``retry_attempt``, same ``event_id``) and
signed requests replayed while their signature is valid are acked and dropped: their keys
(:func:`channels.slack.events.replay_keys`) go to a :class:`channels.replay.SeenKeys` that
the gateway keeps in its state database, so this holds after any number of other events
and across a restart. The ``app_mention`` twin of a ``message`` event is dropped too.
Which events count and how they become :class:`InboundMessage`: :mod:`channels.slack.events`.
Sending and the retry policy: :mod:`channels.slack.delivery`; finding a cut-off announce in
the conversation after a crash: :mod:`channels.slack.lookup`.

The gateway's side: in HTTP mode call :meth:`SlackChannel.add_routes` before the app starts
and leave ``/slack/events`` out of bearer-token auth (Slack signs instead); the inbound
handler should record the message and enqueue its turn, then return: Slack's ack waits for
it (a little), a slow turn must not.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
from aiohttp import web
from slack_bolt import BoltResponse
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncBoltRequest
from slack_sdk.web.async_client import AsyncWebClient

from channels.base import (
    Channel,
    DeliveryLookup,
    InboundHandler,
    InboundMessage,
    OutboundMessage,
    Reply,
    SentMessage,
)
from channels.errors import ChannelSendError, ChannelStartError
from channels.probe import DEFAULT_PROBE_TIMEOUT, ProbeResult
from channels.replay import MemorySeenKeys, SeenKeys
from channels.slack.config import SlackConfig
from channels.slack.constants import (
    ACCEPT_WAIT,
    ACTIVE_THREADS_CAPACITY,
    API_TIMEOUT,
    COMMANDS,
    CONNECT_TIMEOUT,
    DEDUPE_CAPACITY,
    EVENTS_PATH,
    MAX_PENDING_INBOUND,
    REPLAY_WINDOW_SECONDS,
    STOP_GRACE,
    WORKING_REACTION,
)
from channels.slack.delivery import Poster, send_error, web_client
from channels.slack.events import (
    EventContext,
    RecentKeys,
    inbound_from_command,
    inbound_from_event,
    replay_keys,
)
from channels.slack.lookup import lookup
from channels.slack.probe import probe_auth
from channels.slack.streams import SlackStream
from channels.streaming import StreamedMessage, StreamRecorder
from configbase import secret_value

log = logging.getLogger(__name__)
_sdk_log = logging.getLogger(f"{__name__}.sdk")


class SlackChannel(Channel):
    """Slack through slack-bolt, in Socket Mode or HTTP mode (``channels.slack.mode``)."""

    def __init__(
        self, config: SlackConfig, *, name: str = "slack", seen: SeenKeys | None = None
    ) -> None:
        """``seen`` remembers handled requests (default: in memory, until a restart)."""
        self.name = name
        self._config = config
        self._routes_added = False
        self._handler: InboundHandler | None = None
        self._session: aiohttp.ClientSession | None = None
        self._client: AsyncWebClient | None = None
        self._app: AsyncApp | None = None
        self._socket: AsyncSocketModeHandler | None = None
        self._poster: Poster | None = None
        self._context: EventContext | None = None
        self._team_id: str | None = None
        self._seen = RecentKeys(DEDUPE_CAPACITY)
        self._requests: SeenKeys = MemorySeenKeys(DEDUPE_CAPACITY) if seen is None else seen
        # Used only while ``seen`` fails (the state database unwritable): a repeat is still
        # dropped within this process rather than every event being refused.
        self._fallback = MemorySeenKeys(DEDUPE_CAPACITY)
        self._seen_failing = False
        self._threads = RecentKeys(ACTIVE_THREADS_CAPACITY)
        self._tasks: set[asyncio.Task[None]] = set()
        #: Slack refused native streaming once: ``auto`` streams by edits from then on.
        self._refused = False

    def __repr__(self) -> str:
        return (
            f"<SlackChannel {self.name} mode={self._config.mode} connected={self.connected} "
            f"pending={len(self._tasks)}>"
        )

    @property
    def account(self) -> str:
        """The workspace (team id from ``auth.test``), or ``"default"`` before start."""
        return self._team_id or "default"

    @property
    def connected(self) -> bool:
        if self._app is None:
            return False
        if self._socket is None:
            return self._config.mode == "http" and self._routes_added
        client = self._socket.client
        session = client.current_session
        return not client.closed and session is not None and not session.closed

    @property
    def pending(self) -> int:
        """Inbound handler calls in flight."""
        return len(self._tasks)

    def add_routes(self, app: web.Application) -> None:
        """In HTTP mode, add ``POST /slack/events``; requests before :meth:`start` get 503."""
        if self._config.mode != "http" or self._routes_added:
            return
        app.router.add_post(EVENTS_PATH, self._handle_http)
        self._routes_added = True

    async def probe(self, *, timeout_seconds: float = DEFAULT_PROBE_TIMEOUT) -> ProbeResult:
        """``auth.test`` with the bot token, as :meth:`start` begins; see
        :mod:`channels.slack.probe`. Needs no :meth:`start` and leaves nothing open."""
        return await probe_auth(self._config, timeout_seconds=timeout_seconds)

    async def start(self, handler: InboundHandler) -> None:
        """Check the bot token with ``auth.test``, then connect (socket) or accept requests."""
        if self._app is not None:
            raise ChannelStartError(f"{self.name}: already started")
        cfg = self._config
        bot_token = _required(cfg.bot_token, "botToken")
        app_token = _required(cfg.app_token, "appToken") if cfg.mode == "socket" else None
        secret = _required(cfg.signing_secret, "signingSecret") if cfg.mode == "http" else ""
        if cfg.mode == "http" and not self._routes_added:
            raise ChannelStartError("channels.slack: HTTP mode needs add_routes(app) before start")
        if os.environ.get("SLACK_CLIENT_ID") and os.environ.get("SLACK_CLIENT_SECRET"):
            # slack-bolt would switch to its OAuth flow and drop the bot token.
            raise ChannelStartError(
                "channels.slack: unset SLACK_CLIENT_ID/SLACK_CLIENT_SECRET; Herald uses botToken"
            )
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=API_TIMEOUT))
        try:
            client = web_client(cfg, bot_token, self._session, logger=_sdk_log)
            auth = await _call_or_fail("auth.test", client.auth_test())
            self._team_id = str(auth.get("team_id") or "") or None
            bot_user_id = str(auth.get("user_id") or "")
            self._context = EventContext(
                channel=self.name,
                account=self.account,
                bot_user_id=bot_user_id,
                require_mention=cfg.require_mention,
                reply_in_thread=cfg.reply_in_thread,
                is_active_thread=lambda chat, ts: f"{chat}:{ts}" in self._threads,
            )
            app = AsyncApp(
                name="herald",
                client=client,
                signing_secret=secret,
                process_before_response=True,
                logger=_sdk_log,
            )
            self._register(app)
            self._client, self._poster, self._handler = client, Poster(client), handler
            if app_token is not None:
                await self._connect(app, app_token)
            self._app = app
        except BaseException:
            self._handler = None
            await self._release()
            raise
        log.info(
            "slack: %s mode ready as %s in team %s", cfg.mode, bot_user_id or "?", self.account
        )

    async def _connect(self, app: AsyncApp, app_token: str) -> None:
        socket = AsyncSocketModeHandler(app, app_token=app_token, logger=_sdk_log)
        self._socket = socket
        # Ask for the URL first: the client's own connect loop retries bad tokens forever.
        socket.client.wss_uri = await _call_or_fail(
            "apps.connections.open", socket.client.issue_new_wss_url()
        )
        try:
            await asyncio.wait_for(socket.connect_async(), CONNECT_TIMEOUT)  # type: ignore[no-untyped-call]
        except TimeoutError as exc:
            raise ChannelStartError(
                "slack: Socket Mode websocket did not connect", fault=True
            ) from exc

    def _register(self, app: AsyncApp) -> None:
        # After bolt's own middleware: only requests whose signature checked out are recorded.
        app.middleware(self._drop_repeats)
        app.event("message")(self._on_message)
        app.event("app_mention")(self._on_message)
        for command in COMMANDS:
            app.command(f"/{command}")(self._on_command)
        # Every other event is acked and dropped (bolt would answer 404 and Slack retry).
        app.event(re.compile(r".*"))(self._on_other_event)

    async def stop(self) -> None:
        """Disconnect, let in-flight handler calls finish briefly, release everything."""
        if self._session is None:
            return
        self._handler = None
        await self._release()
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=STOP_GRACE)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        log.info("slack: stopped")

    async def _release(self) -> None:
        self._app = None
        socket, self._socket = self._socket, None
        if socket is not None:
            client = socket.client
            try:
                await socket.close_async()  # type: ignore[no-untyped-call]
            except Exception:
                log.exception("slack: closing the Socket Mode client failed")
            # close() cancels the client's tasks without waiting; reap them here.
            futures = [
                client.message_processor,
                client.current_session_monitor,
                client.message_receiver,
            ]
            await asyncio.gather(*(f for f in futures if f is not None), return_exceptions=True)
        session, self._session = self._session, None
        self._client = self._poster = None
        if session is not None:
            await session.close()

    async def send(self, message: OutboundMessage) -> SentMessage:
        """Post ``message`` (mrkdwn, chunked) to its chat and thread."""
        poster = self._poster
        if poster is None:
            raise ChannelSendError(f"{self.name}: not started", retryable=True)
        sent = await poster.post(message)
        self._took_part(message, sent)
        return sent

    def _took_part(self, message: OutboundMessage, sent: SentMessage) -> None:
        """A thread the bot posts in is one it takes part in: replies there need no mention."""
        if message.thread_id is not None:
            self._threads.add(f"{message.chat_id}:{message.thread_id}")
        for ts in sent.message_ids:
            self._threads.add(f"{message.chat_id}:{ts}")

    async def find_delivered(self, message: OutboundMessage, since: float) -> DeliveryLookup:
        """Look for the announce's chunks by their message metadata in the conversation
        (or thread) since ``since``; see :mod:`channels.slack.lookup`."""
        client, poster = self._client, self._poster
        if client is None or poster is None:
            raise ChannelSendError(f"{self.name}: not started", retryable=True)
        return await lookup(client, poster, message, since)

    def stream_reply(
        self,
        message: InboundMessage,
        final: OutboundMessage,
        *,
        earlier: StreamedMessage | None = None,
        record: StreamRecorder | None = None,
    ) -> Reply | None:
        """Show the reply to ``message`` as it is written (:mod:`.streams`): natively in a
        thread, by edits elsewhere, as ``streaming`` says (by edits of ``earlier``, the
        message a run before a crash posted); None when ``off`` or not started."""
        client, poster, setting = self._client, self._poster, self._config.streaming
        if client is None or poster is None or setting == "off" or message.channel != self.name:
            return None
        threaded = message.thread_id is not None
        native = setting == "native" or (setting == "auto" and threaded and not self._refused)
        if setting == "native" and not threaded:
            return None  # Slack streams thread replies only: this reply is posted whole
        in_dm = message.chat_type == "dm"
        return SlackStream(
            client,
            poster,
            final,
            mode="native" if native else "edit",
            recipient=None if in_dm else (message.sender_id, self._team_id),
            fallback=setting == "auto",
            on_refused=self._native_refused,
            on_sent=self._took_part,
            earlier=earlier,
            record=record,
        )

    def _native_refused(self) -> None:
        if not self._refused:
            log.warning("slack: native streaming refused; replies stream by edits")
        self._refused = True

    @asynccontextmanager
    async def working(self, message: InboundMessage) -> AsyncIterator[None]:
        """Show a reaction on ``message`` while the agent works; failures are only logged."""
        client = self._client
        if client is None or message.message_id is None or message.channel != self.name:
            yield
            return
        added = await self._react("reactions.add", client.reactions_add, message)
        try:
            yield
        finally:
            if added:
                await self._react("reactions.remove", client.reactions_remove, message)

    async def _react(
        self, method: str, call: Callable[..., Awaitable[Any]], message: InboundMessage
    ) -> bool:
        try:
            await call(channel=message.chat_id, timestamp=message.message_id, name=WORKING_REACTION)
        except Exception as exc:
            log.warning("%s (progress reaction; ignored)", send_error(method, exc))
            return False
        return True

    # -- inbound -----------------------------------------------------------------------------

    async def _drop_repeats(
        self,
        req: AsyncBoltRequest,
        resp: BoltResponse,
        body: dict[str, Any],
        next: Callable[[], Awaitable[None]],
    ) -> BoltResponse:
        keys = [f"{self.name}:{key}" for key in replay_keys(req.headers, body)]
        if keys and not await self._first_sighting(keys):
            log.info("slack: dropped a repeated or replayed request")
            return BoltResponse(status=200, body="")
        await next()
        return resp

    async def _first_sighting(self, keys: list[str]) -> bool:
        try:
            new = await self._requests.first_sighting(keys, REPLAY_WINDOW_SECONDS)
        except Exception as exc:
            if not self._seen_failing:
                log.warning("slack: cannot record seen requests (%s); remembering in memory", exc)
            self._seen_failing = True
            return self._fallback.first_sighting_now(keys, REPLAY_WINDOW_SECONDS)
        if self._seen_failing:
            log.info("slack: recording seen requests again")
            self._seen_failing = False
        return new

    async def _on_message(self, event: dict[str, Any]) -> None:
        if self._context is None:
            return
        message = inbound_from_event(event, self._context)
        key = f"msg:{message.chat_id}:{message.message_id}" if message is not None else ""
        if message is None or not self._seen.add(key):
            return
        # A mention comes twice (``message`` and ``app_mention``, each with its own event
        # id), maybe to two replicas of a cluster: the message itself is remembered where
        # every replica looks.
        if message.message_id is not None and not await self._first_sighting(
            [f"{self.name}:{key}"]
        ):
            return
        if message.chat_type == "channel" and message.thread_id is not None:
            self._threads.add(f"{message.chat_id}:{message.thread_id}")
        task = self._dispatch(message)
        if task is not None:
            # The ack waits (briefly) for the handler to take the message: once Slack has
            # its 200 it never sends the event again, so the gateway records it first.
            await asyncio.wait({task}, timeout=ACCEPT_WAIT)

    async def _on_command(self, ack: AsyncAck, command: dict[str, Any]) -> None:
        await ack()
        if self._context is not None and (message := inbound_from_command(command, self._context)):
            self._dispatch(message)

    async def _on_other_event(self, event: dict[str, Any]) -> None:
        log.debug("slack: ignored %s event", event.get("type"))

    def _dispatch(self, message: InboundMessage) -> asyncio.Task[None] | None:
        handler = self._handler
        if handler is None:
            return None
        if len(self._tasks) >= MAX_PENDING_INBOUND:
            log.error(
                "slack: %d messages in flight; dropped one in %s", len(self._tasks), message.chat_id
            )
            return None
        task = asyncio.create_task(_deliver(handler, message), name=f"slack-in-{message.chat_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _handle_http(self, request: web.Request) -> web.StreamResponse:
        app = self._app
        if app is None:
            return web.json_response({"error": "slack channel is not running"}, status=503)
        # Anyone can post here: bad requests get a short answer, never a traceback.
        body = await request.read()
        try:
            body.decode("utf-8")
        except UnicodeDecodeError:
            return web.json_response({"error": "the body is not UTF-8"}, status=400)
        stamp = request.headers.get(TIMESTAMP_HEADER, "")
        if not stamp.strip().isdigit():
            log.warning("slack: request without a valid signature timestamp refused")
            return web.json_response({"error": "invalid request signature"}, status=401)
        try:
            bolt_request = await to_bolt_request(request)
        except ValueError:  # bolt parses the body when the request is built
            return web.json_response({"error": "the body is not a Slack request"}, status=400)
        response = await app.async_dispatch(bolt_request)
        return await to_aiohttp_response(response)


#: Slack's request timestamp header: an integer, seconds since the epoch.
TIMESTAMP_HEADER = "X-Slack-Request-Timestamp"


async def _deliver(handler: InboundHandler, message: InboundMessage) -> None:
    try:
        await handler(message)
    except Exception:
        log.exception("slack: inbound handler failed for a message in %s", message.chat_id)


def _required(secret: Any, key: str) -> str:
    value = secret_value(secret)
    if value is None:
        raise ChannelStartError(f"channels.slack.{key} is not set")
    return value


async def _call_or_fail(method: str, call: Awaitable[Any]) -> Any:
    """Await a start-up API call; any failure becomes :class:`ChannelStartError`, a fault
    when trying again can help (network, 5xx, rate limit), else a configuration error
    (``invalid_auth`` and every other refusal)."""
    try:
        return await call
    except Exception as exc:
        error = send_error(method, exc)
        raise ChannelStartError(str(error), fault=error.retryable) from exc
