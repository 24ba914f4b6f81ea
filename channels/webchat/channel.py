"""The web chat channel: a page at ``/`` and a WebSocket at ``/webchat/ws`` on the gateway's app.

Routes (added by :meth:`WebchatChannel.add_routes`): ``GET /`` the page,
``GET /static/webchat/app.js``, ``dom.js``, ``runs.js``, ``jobs.js``, ``sessions.js`` and
``style.css`` its assets (all public), and ``GET /webchat/ws`` the live socket, which the
gateway's token middleware guards (browsers pass ``?token=``). A plain GET of
``/webchat/ws`` answers 426, so the page can ask with an ``Authorization`` header whether
its token is accepted (401) before it opens the socket. The Sessions view of the page reads
``/v1/sessions`` and each session's ``/transcript`` with the same token, like any API
client.

The protocol is in :mod:`channels.webchat.protocol`. A page says hello with its client id
(kept in localStorage); the server answers ``ready`` and replays the client's recent
messages, the latest status of its sub-agent runs and the typing state. Each message of the
person is echoed as a ``user`` message to every page of that client and handed to the
gateway as an :class:`InboundMessage` (``chat_id`` = ``sender_id`` = the client id, a DM).
Sends to a client without an open page are kept (bounded) and replayed on its next hello.
A page asks for its chat's scheduled jobs and cancels them through the gateway's
:class:`~channels.webchat.jobs.ChatJobs`, which decides what is the chat's.

An announce (an outbox item) gets a message id made from its item, the same on every
attempt (a reply to a recorded message, one made from that message): a resend after a crash
is dropped by the server's history (which already holds that id) and by the page (which
shows each id once), and :meth:`WebchatChannel.find_delivered` answers from the history.

In a cluster of gateway replicas (a :class:`~channels.webchat.relay.Relay` given) a
client's pages may be on one replica while another sends to it: every send goes to the
client's history file (a shared state directory) and is announced through the relay, and
the replicas holding the client's pages read the file again and push what they lack
(:mod:`.relay`). Before each send, lookup and hello the file is read again too, so the
replay, the dedupe by message id and :meth:`WebchatChannel.find_delivered` see what every
replica wrote.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import secrets
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

from aiohttp import WSCloseCode, WSMsgType, web

from channels.base import (
    Channel,
    DeliveryLookup,
    InboundHandler,
    InboundMessage,
    OutboundMessage,
    Reply,
    RunUpdate,
    SentMessage,
)
from channels.errors import ChannelSendError
from channels.streaming import StreamedMessage, StreamRecorder
from channels.webchat.assets import PAGE, asset_handler, load_assets
from channels.webchat.clients import RUNS_KEPT, ClientRegistry, ClientState
from channels.webchat.config import WebchatConfig
from channels.webchat.connection import Connection
from channels.webchat.history import HistoryFiles
from channels.webchat.jobs import ChatJobs, answer_jobs
from channels.webchat.protocol import (
    MAX_FRAME_BYTES,
    FrameError,
    Hello,
    MessageKind,
    UserText,
    delta_frame,
    error_frame,
    message_frame,
    parse_client_frame,
    run_frame,
    typing_frame,
    valid_client_id,
)
from channels.webchat.relay import Relay, RelayedDelta
from channels.webchat.streams import RelayFeed, WebchatStream

log = logging.getLogger(__name__)

PAGE_PATH: Final = "/"
STATIC_PREFIX: Final = "/static/webchat/"
SOCKET_PATH: Final = "/webchat/ws"
#: The account of every web chat message: there is one web chat per gateway.
ACCOUNT: Final = "local"
#: Open pages per client (tabs of one browser); more is a runaway script.
MAX_PAGES_PER_CLIENT: Final = 16
#: Open sockets in all; the page is for a few people on one gateway.
MAX_CONNECTIONS: Final = 1024
#: Seconds between WebSocket pings; a dead peer is noticed within about twice this.
HEARTBEAT: Final = 30.0
#: Seconds a closing socket waits for the browser's close reply (aiohttp's default is 10).
CLOSE_TIMEOUT: Final = 5.0
#: Frames queued per page beyond a full replay before the page counts as too slow.
QUEUE_HEADROOM: Final = 256


class WebchatChannel(Channel):
    """The built-in web chat; every browser client is a DM chat whose id is its client id."""

    def __init__(
        self,
        config: WebchatConfig,
        *,
        name: str = "webchat",
        history_dir: Path | None = None,
        relay: Relay | None = None,
        jobs: ChatJobs | None = None,
    ) -> None:
        """``history_dir`` keeps each client's history on disk across restarts (the gateway
        passes ``<stateDir>/webchat``); without it the history lives in memory only.
        ``relay``: in a cluster, the notices between replicas sharing ``history_dir``.
        ``jobs``: each client's scheduled jobs (without it, a page is told its chat has
        none)."""
        if relay is not None and history_dir is None:
            raise ValueError("a web chat relay needs a history_dir shared by the replicas")
        self.name = name
        self._relay = relay
        self._jobs = jobs
        self.config = config
        files = (
            HistoryFiles(history_dir, history_size=config.history_size, runs_kept=RUNS_KEPT)
            if history_dir is not None
            else None
        )
        self._clients = ClientRegistry(
            max_clients=config.max_clients, history_size=config.history_size, files=files
        )
        self._connections: set[Connection] = set()
        self._handler: InboundHandler | None = None
        self._started = False
        self._stopped = False
        # Message ids are unique across restarts, so a page that reconnects to a restarted
        # gateway does not mistake new messages for ones it already shows.
        self._boot = secrets.token_hex(4)
        self._ids = itertools.count(1)
        self._assets = load_assets()
        #: In a cluster: the tasks relaying those replies to the other replicas.
        self._feeds: set[asyncio.Task[None]] = set()

    def __repr__(self) -> str:
        return (
            f"<WebchatChannel {self.name} clients={len(self._clients)} "
            f"pages={len(self._connections)} connected={self.connected}>"
        )

    # -- Channel interface ------------------------------------------------------------------

    def add_routes(self, app: web.Application) -> None:
        """Add the page, its assets and the socket; close the sockets when the app shuts down.

        Sockets are closed in ``on_shutdown`` because aiohttp waits for open handlers before
        it runs the cleanup contexts that call :meth:`stop`.
        """
        app.router.add_get(PAGE_PATH, asset_handler(self._assets, PAGE))
        for name in self._assets:
            if name != PAGE:
                app.router.add_get(STATIC_PREFIX + name, asset_handler(self._assets, name))
        app.router.add_get(SOCKET_PATH, self._socket)
        app.on_shutdown.append(self._on_shutdown)

    async def start(self, handler: InboundHandler) -> None:
        self._handler = handler
        if self._relay is not None:
            await self._relay.start(self._on_relay, self._on_delta)
        self._started = True
        self._stopped = False
        log.info("web chat ready", extra={"path": SOCKET_PATH})

    async def stop(self) -> None:
        """Close every open page with 1001 (going away). Idempotent."""
        self._stopped = True
        feeds, self._feeds = list(self._feeds), set()
        for task in feeds:
            task.cancel()
        await asyncio.gather(*feeds, return_exceptions=True)
        if self._relay is not None:
            await self._relay.stop()
        await self._close_all()

    @property
    def connected(self) -> bool:
        return self._started and not self._stopped

    @property
    def account(self) -> str:
        return ACCOUNT

    async def send(self, message: OutboundMessage) -> SentMessage:
        """Show ``message`` on every open page of its client; keep it for the next hello.

        In a cluster the message is in the client's history once this returns; an outbox
        item's send raises a retryable error when the other replicas could not be told (its
        retry is shown once and tells them), other messages only log it."""
        return await self._deliver(message)

    async def _deliver(
        self, message: OutboundMessage, stream: WebchatStream | None = None
    ) -> SentMessage:
        """:meth:`send`; ``stream``: the streamed reply ``message`` is the final text of,
        whose growing text it replaces."""
        client = self._client_for(message.chat_id)
        if client is None:
            raise ChannelSendError(
                f"invalid web chat client id {message.chat_id!r:.80}", retryable=False
            )
        self._refresh(client)
        traced = _traced_message_id(message)
        if stream is not None:
            stream.flush()  # its last piece before the final reply that replaces it
        message_id = self._record(client, message.kind, message.text, message.run_id, traced)
        if stream is not None:
            stream.replaced()  # so no end frame: the pages dropped the growing text
        log.debug(
            "web chat message",
            extra={
                "client": client.client_id,
                "kind": message.kind,
                "pages": len(client.connections),
            },
        )
        if message.outbox_id is None:
            await self._tell_others(client)  # a retry would show it twice: never raise
        elif self._relay is not None:  # a retry of an outbox item is shown once: raise
            await self._relay.publish(client.client_id)
        return SentMessage(chat_id=message.chat_id, message_ids=(message_id,))

    async def find_delivered(self, message: OutboundMessage, since: float) -> DeliveryLookup:
        """Found when the client's history (kept on disk before any page is sent the
        message) holds the message's id (an announce's, or a traced reply's)."""
        client = self._client_for(message.chat_id)
        message_id = _traced_message_id(message)
        if client is not None:
            self._refresh(client)
        if client is None or message_id is None or not client.has_message(message_id):
            return DeliveryLookup("not_found")
        return DeliveryLookup("found", (message_id,))

    async def run_update(self, update: RunUpdate) -> None:
        """Show a run's status on the client's pages and keep the latest for the replay."""
        client = self._client_for(update.chat_id)
        if client is None:
            log.warning(
                "run update for an invalid web chat client id", extra={"run": update.run_id}
            )
            return
        self._refresh(client)
        client.set_run(update.run_id, run_frame(update, time.time()))
        await self._tell_others(client)

    def stream_reply(
        self,
        message: InboundMessage,
        final: OutboundMessage,
        *,
        earlier: StreamedMessage | None = None,
        record: StreamRecorder | None = None,
    ) -> Reply | None:
        """Delta frames to the client's open pages while the reply to ``message`` is
        written; the final reply's message id (made from its ``reply_to``) is the turn id.

        Nothing is recorded (``earlier`` and ``record`` go unused): growing text is not a
        message of the client's history, and the turn id of a turn run again after a crash
        is the same, so its frames and its final message take the same place on a page."""
        client = self._client_for(message.chat_id) if message.channel == self.name else None
        if client is None:
            return None
        turn_id = _traced_message_id(final)
        if turn_id is None:
            return None
        feed = None
        if self._relay is not None:
            feed = RelayFeed(self._relay, client.client_id, turn_id, self._feeds)
        return WebchatStream(client, final, turn_id, self._deliver, feed)

    @contextlib.asynccontextmanager
    async def working(self, message: InboundMessage) -> AsyncIterator[None]:
        """Typing indicator on the client's pages while the agent works on ``message``."""
        client = self._client_for(message.chat_id) if message.channel == self.name else None
        if client is None:
            yield
            return
        client.typing += 1
        if client.typing == 1:
            client.broadcast(typing_frame(True))
        try:
            yield
        finally:
            client.typing -= 1
            if client.typing == 0:
                client.broadcast(typing_frame(False))

    # -- internals --------------------------------------------------------------------------

    def _client_for(self, chat_id: str) -> ClientState | None:
        return self._clients.get(chat_id) if valid_client_id(chat_id) else None

    def _refresh(self, client: ClientState) -> None:
        """In a cluster: take in what other replicas wrote to the client's history."""
        if self._relay is not None:
            client.refresh()

    async def _tell_others(self, client: ClientState) -> None:
        """In a cluster: announce the client's new frame; a failure is only logged (the
        frame is in the history: pages elsewhere get it with the next notice or hello)."""
        if self._relay is None:
            return
        try:
            await self._relay.publish(client.client_id)
        except Exception as exc:
            log.warning(
                "web chat: other replicas not told",
                extra={"client": client.client_id, "error": str(exc)},
            )

    async def _on_relay(self, client_id: str | None) -> None:
        """Another replica extended ``client_id``'s history (None: any client's, maybe):
        pages open here get what they lack."""
        if client_id is None:
            clients = [c for c in self._clients.all() if c.connections]
        elif client_id in self._clients and valid_client_id(client_id):
            clients = [self._clients.get(client_id)]
        else:
            return  # no page of it here; a later hello reads the file
        for client in clients:
            if client.connections:
                client.refresh()

    async def _on_delta(self, delta: RelayedDelta) -> None:
        """Another replica is writing a reply for ``delta.client_id``: pages open here show
        it. A piece that does not follow what this replica has (a notice missed) is not
        shown, nor are those after it: the final reply takes the growing text's place."""
        if delta.client_id not in self._clients or not valid_client_id(delta.client_id):
            return  # no page of it here; a page opened later gets the final reply
        client = self._clients.get(delta.client_id)
        turn_id = delta.turn_id
        if delta.end:  # (its final reply, if any, dropped the growing text already)
            client.streams.pop(turn_id, None)
            client.broadcast(delta_frame(turn_id, "", end=True))
            return
        if client.has_message(turn_id):
            return  # its final reply is shown already
        shown = client.streams.get(turn_id)
        if delta.reset or delta.at == 0:  # a turn begun (or run again after a crash)
            client.streams[turn_id] = delta.text
            client.broadcast(delta_frame(turn_id, delta.text, reset=True))
        elif shown is not None and len(shown) == delta.at:
            client.streams[turn_id] = shown + delta.text
            client.broadcast(delta_frame(turn_id, delta.text))

    def _record(
        self,
        client: ClientState,
        kind: MessageKind,
        text: str,
        run_id: str | None,
        message_id: str | None = None,
    ) -> str:
        message_id = message_id or f"{self._boot}-{next(self._ids)}"
        if client.has_message(message_id):
            log.info("web chat message already shown", extra={"client": client.client_id})
            return message_id
        client.add_message(
            message_frame(kind, text, message_id=message_id, ts=time.time(), run_id=run_id)
        )
        return message_id

    async def _socket(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(
            heartbeat=HEARTBEAT, max_msg_size=MAX_FRAME_BYTES, timeout=CLOSE_TIMEOUT
        )
        if not ws.can_prepare(request).ok:
            # Reached only past the token middleware: the page's check that its token works.
            return web.json_response(
                {"error": {"code": "upgrade_required", "message": "open this as a WebSocket"}},
                status=426,
                headers={"Upgrade": "websocket"},
            )
        if not self.connected or len(self._connections) >= MAX_CONNECTIONS:
            return web.json_response(
                {"error": {"code": "unavailable", "message": "the web chat is not available"}},
                status=503,
            )
        await ws.prepare(request)
        connection = Connection(
            ws, queue_size=self.config.history_size + RUNS_KEPT + QUEUE_HEADROOM
        )
        self._connections.add(connection)
        try:
            async for msg in ws:
                if msg.type is WSMsgType.TEXT:
                    await self._on_text(connection, msg.data)
                elif msg.type is WSMsgType.BINARY:
                    connection.push(error_frame("bad_frame", "frames are JSON text, not binary"))
        finally:
            self._connections.discard(connection)
            if connection.client_id is not None and connection.client_id in self._clients:
                self._clients.get(connection.client_id).connections.discard(connection)
            await connection.release()
            await ws.close()
        return ws

    async def _on_text(self, connection: Connection, data: str) -> None:
        try:
            frame = parse_client_frame(data)
        except FrameError as exc:
            connection.push(exc.frame())
            return
        if isinstance(frame, Hello):
            await self._on_hello(connection, frame.client_id)
            return
        if connection.client_id is None:
            connection.push(error_frame("hello_first", "send a hello frame first"))
            return
        handler = self._handler
        if handler is None or not self.connected:
            connection.push(error_frame("unavailable", "the web chat is shutting down"))
            return
        client = self._clients.get(connection.client_id)
        if not isinstance(frame, UserText):
            await answer_jobs(self._jobs, client, connection, frame)
            return
        self._refresh(client)
        message_id = self._record(client, "user", frame.text, None)
        await self._tell_others(client)
        inbound = InboundMessage(
            channel=self.name,
            account=self.account,
            chat_id=client.client_id,
            thread_id=None,
            sender_id=client.client_id,
            text=frame.text,
            chat_type="dm",
            message_id=message_id,
        )
        try:
            await handler(inbound)
        except Exception:
            log.exception("web chat message not accepted", extra={"client": client.client_id})
            connection.push(error_frame("unavailable", "the gateway could not take the message"))

    async def _on_hello(self, connection: Connection, client_id: str) -> None:
        if connection.client_id is not None:
            connection.push(error_frame("already_hello", "this socket has already said hello"))
            return
        client = self._clients.get(client_id)
        if len(client.connections) >= MAX_PAGES_PER_CLIENT:
            connection.push(error_frame("unavailable", "too many open pages for this client"))
            await connection.close(WSCloseCode.POLICY_VIOLATION, b"too many pages")
            return
        connection.client_id = client_id
        self._refresh(client)
        client.attach(connection)
        log.debug("web chat page connected", extra={"client": client_id})

    async def _on_shutdown(self, app: web.Application) -> None:
        await self._close_all()

    async def _close_all(self) -> None:
        results = await asyncio.gather(
            *(c.close(WSCloseCode.GOING_AWAY, b"server shutting down") for c in self._connections),
            return_exceptions=True,
        )
        for result in results:
            if isinstance(result, Exception):
                log.warning("web chat socket close failed", extra={"error": repr(result)})


def _traced_message_id(message: OutboundMessage) -> str | None:
    """The message id of an outbox item's message or of the reply to a recorded message,
    the same on every attempt (None for other messages, which get a fresh id)."""
    token = message.delivery_token()
    if token is None:
        return None
    return f"{'outbox' if message.outbox_id is not None else 'reply'}-{token}"
