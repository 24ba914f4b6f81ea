"""The Discord channel: a discord.py ``Client`` run as a task of the gateway's event loop.

``start()`` logs in (``GET /users/@me``), connects to the gateway and returns once the
client is READY; the client then keeps running in a background task and reconnects (with
RESUME) by itself. Inbound messages are handed to the gateway's handler one at a time, in
the order Discord sent them, each once, with what a fresh session missed read back first
(:mod:`.inflow`, :mod:`.catchup`). ``send()`` posts over REST, split to Discord's 2,000-character
limit, with mentions that can never ping ``@everyone``, roles or users; rate limits are left
to discord.py, which sleeps ``retry_after`` on a 429 and tries again. An announce's parts
carry nonces made from its outbox item, so Discord itself drops a resend soon after a
crash; :meth:`DiscordChannel.find_delivered` looks in the channel (:mod:`.lookup`).

In a cluster (a :class:`~channels.leadership.Leadership` given) ``start()`` only logs in and
returns: the replica holding the channel's lock connects to the gateway
(:mod:`.leading`), the others stand by and send over REST.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections import OrderedDict
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from channels.base import (
    Channel,
    ChannelState,
    DeliveryLookup,
    InboundHandler,
    InboundMessage,
    OutboundMessage,
    Reply,
    SentMessage,
)
from channels.cursors import ChatCursors, MemoryCursors
from channels.discord._sdk import discord
from channels.discord.client import Client, discord_intents
from channels.discord.config import DiscordConfig
from channels.discord.endpoints import (
    DEFAULT_API_BASE_URL,
    DEFAULT_GATEWAY_URL,
    Endpoints,
    claim_endpoints,
    release_endpoints,
)
from channels.discord.errors import send_error, start_error
from channels.discord.events import to_inbound
from channels.discord.format import chunk_message
from channels.discord.inflow import Inflow
from channels.discord.leading import hold_gateway
from channels.discord.lookup import lookup
from channels.discord.probe import probe_login
from channels.discord.streams import DiscordStream
from channels.errors import ChannelSendError, ChannelStartError
from channels.leadership import Leadership
from channels.probe import DEFAULT_PROBE_TIMEOUT, ProbeResult
from channels.replay import SeenKeys
from channels.streaming import StreamedMessage, StreamRecorder
from configbase import secret_value

log = logging.getLogger(__name__)

#: Seconds ``start()`` waits for READY; discord.py's own handshake timeout is 60 s.
START_TIMEOUT = 30.0
#: Seconds ``stop()`` gives ``Client.close()`` (it closes the websocket and HTTP session).
STOP_TIMEOUT = 10.0
#: Seconds the closed client's task gets to return before it is cancelled: enough to leave
#: its read loop, not to sit out a reconnect backoff sleep.
STOP_GRACE = 1.0
#: Seconds after READY to wait for the burst of GUILD_CREATE events (discord.py's default).
GUILD_READY_TIMEOUT = 2.0
#: Discord shows "typing…" for about 10 s after each POST, so refresh a little sooner.
TYPING_INTERVAL = 8.0
#: A 429 asking for a longer wait than this is handed to the outbox (with ``retry_after``)
#: instead of blocking the send; 30 s is the least discord.py accepts.
MAX_RATELIMIT_WAIT = 30.0
#: Partly delivered multi-part replies remembered so that a retry skips the parts sent.
PARTIAL_SENDS_KEPT = 128


#: Replies never notify anyone: no @everyone/@here, no roles, no users, no reply pings.
NO_PINGS = discord.AllowedMentions.none()


class DiscordChannel(Channel):
    """Herald's Discord surface. See the module docstring and :mod:`.events` for the rules."""

    def __init__(
        self,
        config: DiscordConfig,
        *,
        name: str = "discord",
        start_timeout: float = START_TIMEOUT,
        guild_ready_timeout: float = GUILD_READY_TIMEOUT,
        leadership: Leadership | None = None,
        seen: SeenKeys | None = None,
        cursors: ChatCursors | None = None,
    ) -> None:
        """``leadership``: in a cluster, the lock that decides which replica connects to
        the gateway (see the module docstring); without it this channel always connects.
        ``seen`` remembers the messages handed on, so that one read again after READY (or
        by another replica) is dropped; ``cursors`` the newest message taken per chat, read
        from after a fresh gateway session (:mod:`.catchup`). Both default to memory."""
        self.name = name
        self._inflow = Inflow(
            name,
            require_mention=config.require_mention,
            seen=seen,
            cursors=cursors if cursors is not None else MemoryCursors(),
        )
        self._leadership = leadership
        self._leading = False
        self._config = config
        self._start_timeout = start_timeout
        self._guild_ready_timeout = guild_ready_timeout
        self._client: Client | None = None
        self._task: asyncio.Task[None] | None = None
        self._consumer: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self._login = asyncio.Event()
        self._connected = False
        self._stopping = False
        self._failure: Exception | None = None
        self._logged_in = False
        self._me: int | None = None
        self._event_tasks: set[asyncio.Task[Any]] = set()
        self._partial: OrderedDict[OutboundMessage, list[str]] = OrderedDict()
        self._claimed = False

    def __repr__(self) -> str:
        state = self.connection_state if self._task else "stopped"
        return f"<DiscordChannel {self.name} {state} user={self._me} queued={self._inflow.queued}>"

    @property
    def connected(self) -> bool:
        """True from READY (or RESUMED) until the gateway connection drops or stops."""
        return self._connected and self._client is not None and not self._client.is_closed()

    @property
    def connection_state(self) -> ChannelState:
        """``standby`` while logged in (sending) and another replica holds the gateway."""
        if self.connected:
            return "connected"
        client, task = self._client, self._task
        running = client is not None and not client.is_closed() and task is not None
        if running and self._leadership is not None and self._login.is_set() and not self._leading:
            return "standby"
        return "disconnected"

    @property
    def bot_user_id(self) -> str | None:
        """The bot's user id once logged in: the ``account`` of every inbound message."""
        return None if self._me is None else str(self._me)

    @property
    def account(self) -> str:
        """The bot's user id, or ``"default"`` before it has logged in."""
        return self.bot_user_id or "default"

    async def probe(self, *, timeout_seconds: float = DEFAULT_PROBE_TIMEOUT) -> ProbeResult:
        """``GET /users/@me`` with the bot token, as discord.py's login begins; see
        :mod:`channels.discord.probe`. Needs no :meth:`start`, opens no gateway connection
        and leaves discord.py's process-wide URLs alone."""
        return await probe_login(self._config, timeout_seconds=timeout_seconds)

    async def start(self, handler: InboundHandler) -> None:
        """Log in and connect; return once READY, else raise ``ChannelStartError``.

        Raises within ``start_timeout`` seconds: a bad token (401 on login or gateway close
        4004), a refused Message Content intent (4014), another fatal close code, an
        unreachable API, or no READY in time. The error never contains the token. After a
        failure everything opened is closed again, so the gateway can simply exit.
        """
        if self._task is not None:
            raise ChannelStartError(f"the {self.name} channel is already started")
        token = secret_value(self._config.token)
        if token is None:
            raise ChannelStartError("channels.discord.token is not set")
        claim_endpoints(Endpoints(self._config.api_base_url, self._config.gateway_url))
        self._claimed = True
        self._stopping = False
        self._failure = None
        self._logged_in = False
        self._ready = asyncio.Event()
        self._login = asyncio.Event()
        self._client = Client(
            self,
            intents=discord_intents(),
            allowed_mentions=NO_PINGS,
            max_messages=None,
            chunk_guilds_at_startup=False,
            guild_ready_timeout=self._guild_ready_timeout,
            max_ratelimit_timeout=MAX_RATELIMIT_WAIT,
        )
        self._consumer = asyncio.create_task(
            self._inflow.deliver(handler), name=f"{self.name}-inbound"
        )
        run = (
            self._run(self._client, token)
            if self._leadership is None
            else self._run_clustered(self._client, token, self._leadership)
        )
        self._task = asyncio.create_task(run, name=f"{self.name}-client")
        # In a cluster, start-up needs the login only: the gateway is the lock holder's.
        started = self._ready if self._leadership is None else self._login
        ready = asyncio.create_task(started.wait())
        try:
            await asyncio.wait(
                {ready, self._task},
                timeout=self._start_timeout,
                return_when=asyncio.FIRST_COMPLETED,
            )
        except asyncio.CancelledError:
            await self.stop()  # the gateway gave up on us: leave nothing running
            raise
        finally:
            ready.cancel()
            await asyncio.gather(ready, return_exceptions=True)
        if started.is_set() and not self._task.done():
            if self._leadership is None:
                log.info("%s channel connected as user %s", self.name, self._me)
            else:
                log.info("%s channel logged in as user %s", self.name, self._me)
            return
        failure = self._failure if self._task.done() else None
        await self.stop()
        if failure is not None:
            raise start_error(failure, self._talking_to()) from failure
        what = "no READY" if self._leadership is None else "no answer to the login"
        raise ChannelStartError(
            f"Discord did not become ready within {self._start_timeout:g} s: "
            f"{what} from {self._talking_to()}",
            fault=True,
        )

    async def stop(self) -> None:
        """Close the client, stop handing on messages, restore discord.py's URLs. Idempotent."""
        task, self._task = self._task, None
        if task is None:
            return
        self._stopping = True
        self._connected = False
        client = self._client
        if client is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.close(), STOP_TIMEOUT)
        await asyncio.wait({task}, timeout=STOP_GRACE)
        catch_up, dropped = self._inflow.reset()
        pending = [
            t for t in (task, self._consumer, catch_up, *self._event_tasks) if t and not t.done()
        ]
        for leftover in pending:
            leftover.cancel()
        await asyncio.gather(*pending, task, return_exceptions=True)
        self._consumer = None
        self._event_tasks.clear()
        if self._claimed:
            release_endpoints()
            self._claimed = False
        if dropped:
            log.warning("%s channel stopped with %d inbound messages unhandled", self.name, dropped)
        log.info("%s channel stopped", self.name)

    async def send(self, message: OutboundMessage) -> SentMessage:
        """Post ``message`` to its chat (a channel, thread or DM id), in as many parts as needed.

        Raises ``ChannelSendError``: ``retryable=False`` for an unknown or deleted channel,
        missing permissions or a rejected body; ``retryable=True`` for server errors,
        connection errors, a stopped client, or a rate limit longer than discord.py waits
        (with ``retry_after``). If a later part fails, a retry of the same message resumes
        after the parts already delivered instead of posting them twice.
        """
        client = self._client
        if client is None or client.is_closed() or self._task is None:
            raise ChannelSendError(f"the {self.name} channel is not running", retryable=True)
        if not message.chat_id.isdigit():
            raise ChannelSendError(
                f"{message.chat_id!r} is not a Discord channel id", retryable=False
            )
        parts = chunk_message(message.text)
        if not parts:
            log.debug("nothing to send to Discord channel %s: empty text", message.chat_id)
            return SentMessage(chat_id=message.chat_id, message_ids=())
        target = client.get_partial_messageable(int(message.chat_id))
        sent = self._partial.pop(message, [])
        for index in range(len(sent), len(parts)):
            # A traceable message's nonce makes a resend idempotent (discord.py always sends
            # enforce_nonce with it); other messages get a random one, as discord.py would.
            nonce = message.delivery_token(index) or secrets.randbits(64)
            try:
                posted = await target.send(parts[index], allowed_mentions=NO_PINGS, nonce=nonce)
            except Exception as exc:
                error = send_error(exc)
                if error is None:
                    raise
                if error.retryable and sent:
                    self._remember_partial(message, sent)
                raise error from exc
            sent.append(str(posted.id))
        return SentMessage(chat_id=message.chat_id, message_ids=tuple(sent))

    def stream_reply(
        self,
        message: InboundMessage,
        final: OutboundMessage,
        *,
        earlier: StreamedMessage | None = None,
        record: StreamRecorder | None = None,
    ) -> Reply | None:
        """Post the reply to ``message`` as it is written and edit it as it grows
        (:mod:`.streams`; ``earlier`` are the parts a run before a crash posted), unless
        ``streaming`` is ``off`` or the client is not running."""
        client = self._client
        if self._config.streaming == "off" or not message.chat_id.isdigit():
            return None
        if client is None or client.is_closed() or self._task is None:
            return None
        return DiscordStream(
            client.get_partial_messageable(int(message.chat_id)),
            final,
            allowed_mentions=NO_PINGS,
            earlier=earlier,
            record=record,
        )

    async def find_delivered(self, message: OutboundMessage, since: float) -> DeliveryLookup:
        """Look for the announce's parts among the bot's messages in its channel since
        ``since``; leading parts found are skipped by the next :meth:`send` of it."""
        client = self._client
        if client is None or client.is_closed() or self._task is None or self._me is None:
            raise ChannelSendError(f"the {self.name} channel is not running", retryable=True)
        if not message.chat_id.isdigit():
            return DeliveryLookup("not_found")  # its send fails for good, as it did before
        parts = chunk_message(message.text)
        target = client.get_partial_messageable(int(message.chat_id))
        result, leading = await lookup(target, self._me, parts, message, since)
        if result.outcome == "not_found" and leading:
            self._remember_partial(message, leading)
        return result

    @contextlib.asynccontextmanager
    async def working(self, message: InboundMessage) -> AsyncIterator[None]:
        """Show "typing…" in the message's chat while the agent works on it.

        Typing is decoration: its failures are logged at debug level and never raised.
        """
        client = self._client
        typing: asyncio.Task[None] | None = None
        if client is not None and not client.is_closed() and message.chat_id.isdigit():
            typing = asyncio.create_task(self._keep_typing(client, int(message.chat_id)))
        try:
            yield
        finally:
            if typing is not None:
                typing.cancel()
                await asyncio.gather(typing, return_exceptions=True)

    # internals: the client task and its events

    async def _run(self, client: Client, token: str) -> None:
        # Failures are kept, not raised: start() reports one that comes before READY, and
        # one after READY is logged here, as nobody awaits this task until stop().
        try:
            await client.start(token)
        except Exception as exc:
            self._failure = exc
            if self._ready.is_set() and not self._stopping:
                log.error("%s channel is down: %s", self.name, start_error(exc, self._talking_to()))
        finally:
            self._connected = False
            await client.close()

    async def _run_clustered(self, client: Client, token: str, leadership: Leadership) -> None:
        # Log in (REST: sends work from here on), then hold the gateway while leading.
        try:
            await client.login(token)
            await hold_gateway(client, leadership, self.name, on_leading=self._set_leading)
        except Exception as exc:
            self._failure = exc
            if self._login.is_set() and not self._stopping:
                log.error("%s channel is down: %s", self.name, start_error(exc, self._talking_to()))
        finally:
            self._connected = False
            self._leading = False
            await client.close()

    def _set_leading(self, leading: bool) -> None:
        self._leading = leading
        if not leading:
            self._connected = False

    def _talking_to(self) -> str:
        """What the client was talking to last: the REST API until logged in, then the gateway."""
        if self._logged_in:
            return f"the Discord gateway at {self._config.gateway_url or DEFAULT_GATEWAY_URL}"
        return f"the Discord API at {self._config.api_base_url or DEFAULT_API_BASE_URL}"

    def client_logged_in(self, user_id: int | None) -> None:
        """The client's login ended (REST works from here): called by :class:`.client.Client`."""
        self._logged_in = True
        if user_id is not None:
            self._me = user_id
        self._login.set()

    def client_connected(self, connected: bool, why: str) -> None:
        """READY, RESUMED or a dropped gateway connection: called by the client."""
        if self._stopping:
            return
        if connected and self._client is not None and self._client.user is not None:
            self._me = self._client.user.id
            self._ready.set()
            if why == "ready":  # a fresh session: Discord replays nothing it missed
                self._inflow.catch_up(self._client, self._client.user.id)
        if connected != self._connected:
            log.info("%s channel %s", self.name, why)
        self._connected = connected

    async def client_message(self, message: discord.Message) -> None:
        """A message the gateway delivered: called by the client."""
        client = self._client
        if client is None or client.user is None or self._stopping:
            return
        inbound = to_inbound(
            message,
            me=client.user.id,
            channel_name=self.name,
            require_mention=self._config.require_mention,
        )
        if inbound is None:
            return
        current = asyncio.current_task()
        if current is not None:
            self._event_tasks.add(current)
        try:
            await self._inflow.take(inbound)
        finally:
            if current is not None:
                self._event_tasks.discard(current)

    async def _keep_typing(self, client: Client, channel_id: int) -> None:
        target = client.get_partial_messageable(channel_id)
        while True:
            try:
                await target.typing()
            except (discord.NotFound, discord.Forbidden) as exc:
                log.debug("no typing indicator in Discord channel %s: %s", channel_id, exc)
                return
            except (discord.DiscordException, aiohttp.ClientError, OSError, TimeoutError) as exc:
                log.debug("typing indicator failed in Discord channel %s: %s", channel_id, exc)
            await asyncio.sleep(TYPING_INTERVAL)

    def _remember_partial(self, message: OutboundMessage, sent: list[str]) -> None:
        self._partial[message] = sent
        while len(self._partial) > PARTIAL_SENDS_KEPT:
            self._partial.popitem(last=False)
