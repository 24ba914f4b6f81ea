"""The channel interface and the frozen messages that cross between channels and the runtime.

A channel turns provider events into :class:`InboundMessage` and sends
:class:`OutboundMessage`; nothing Slack- or Discord-specific crosses this line.
"""

from __future__ import annotations

import abc
import dataclasses
import hashlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from channels.probe import DEFAULT_PROBE_TIMEOUT, ProbeResult
from channels.streaming import StreamedMessage, StreamRecorder

if TYPE_CHECKING:  # aiohttp is only in an annotation: loading config or the CLI needs none
    from aiohttp import web

ChatType = Literal["dm", "channel"]
OutboundKind = Literal["reply", "announce", "notice"]
#: What a channel can say about an earlier send it may or may not have completed.
LookupOutcome = Literal["found", "not_found", "unknown"]
#: A channel's connection: ``standby`` — another replica of the cluster holds the inbound
#: connection (Discord's gateway) and this one only sends, which is its job there.
ChannelState = Literal["connected", "standby", "disconnected"]


@dataclass(frozen=True, slots=True)
class InboundMessage:
    """A message a person sent to the agent, as the channel saw it."""

    channel: str
    account: str
    chat_id: str
    thread_id: str | None
    sender_id: str
    text: str
    chat_type: ChatType = "channel"
    sender_name: str | None = None
    message_id: str | None = None
    received_at: float = field(default_factory=time.time)


@dataclass(frozen=True, slots=True)
class OutboundMessage:
    """A message for a chat: the reply to an inbound message, or a sub-agent's announce."""

    channel: str
    account: str
    chat_id: str
    thread_id: str | None
    text: str
    kind: OutboundKind = "reply"
    #: Correlation for live surfaces (the web chat shows announces beside their run).
    run_id: str | None = None
    #: The outbox item this message delivers: the same on every attempt, so a channel can
    #: make a resend idempotent or find an earlier attempt in the chat. None for replies.
    outbox_id: int | None = None
    #: The recorded inbound message this reply answers: the same when the reply is posted
    #: again after a crash, so a channel can find the first one. None for other messages.
    reply_to: str | None = None

    @property
    def traceable(self) -> bool:
        """Whether an earlier send of this message can be found in the chat (an outbox
        item, or the reply to a recorded message)."""
        return self.outbox_id is not None or self.reply_to is not None

    def delivery_token(self, part: int = 0) -> str | None:
        """A short id of part ``part`` of this message, the same on every attempt and unique
        across gateways (it covers the run id, or the inbound message's id): 24 hex digits,
        within Discord's 25-character nonce. None for a message that is not traceable."""
        if self.outbox_id is not None:
            seed = f"herald:{self.outbox_id}:{self.run_id or ''}:{part}"
        elif self.reply_to is not None:
            seed = f"herald:reply:{self.reply_to}:{part}"
        else:
            return None
        return hashlib.blake2b(seed.encode(), digest_size=12).hexdigest()


@dataclass(frozen=True, slots=True)
class SentMessage:
    """What the chat provider answered for a successful send."""

    chat_id: str
    message_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DeliveryLookup:
    """What a channel found when asked whether an earlier, cut-off send reached the chat.

    ``found``: every part is in the chat (``message_ids`` in order); ``not_found``: no
    complete copy, so sending (again) posts it once — parts already in the chat are skipped
    by the next :meth:`Channel.send` of the same message; ``unknown``: the channel cannot
    tell (``detail`` says why), so the caller must not send it again.
    """

    outcome: LookupOutcome
    message_ids: tuple[str, ...] = ()
    detail: str = ""


@dataclass(frozen=True, slots=True)
class RunUpdate:
    """A sub-agent run changed status (queued, running, announcing, done, …).

    Sent to the channel of the run's origin chat, for surfaces that show live run status.
    The rest places the run in its tree: the run that spawned it (None for a run a person's
    conversation spawned), its depth (1 for those), the ``sessions_yield`` batch it is
    in, its own session (whose transcript shows what it did) and when it was spawned; and
    describes it: its task, its model and when it started and ended (for its runtime).
    """

    run_id: str
    name: str
    status: str
    chat_id: str
    thread_id: str | None = None
    parent_run_id: str | None = None
    depth: int = 1
    batch_id: str | None = None
    session_key: str | None = None
    #: Unix seconds.
    created_at: float | None = None
    task: str | None = None
    #: ``<provider>/<model id>``.
    model: str | None = None
    #: Unix seconds; None until the run started, or ended.
    started_at: float | None = None
    ended_at: float | None = None


InboundHandler = Callable[[InboundMessage], Awaitable[None]]


class Channel(abc.ABC):
    """One chat surface. Subclasses keep their SDK objects private."""

    #: The channel's name in session keys and origins: "slack", "discord", "webchat", ...
    name: str

    def add_routes(self, app: web.Application) -> None:
        """Add the channel's HTTP routes to the gateway's app (before it starts). Default: none."""
        return None

    @abc.abstractmethod
    async def start(self, handler: InboundHandler) -> None:
        """Connect and begin handing inbound messages to ``handler``."""

    @abc.abstractmethod
    async def stop(self) -> None:
        """Disconnect. Idempotent."""

    @abc.abstractmethod
    async def send(self, message: OutboundMessage) -> SentMessage:
        """Deliver ``message``; raise :class:`channels.errors.ChannelSendError` on failure."""

    async def find_delivered(self, message: OutboundMessage, since: float) -> DeliveryLookup:
        """Look in the chat for ``message`` (an outbox item, ``outbox_id`` set) as sent by an
        attempt that began at or after ``since`` (epoch seconds) and was cut off before its
        outcome was recorded. Raise :class:`channels.errors.ChannelSendError` when the chat
        could not be asked (``retryable`` when asking again later can help).
        Default: ``unknown`` — the channel keeps no record it could search.
        """
        return DeliveryLookup("unknown", detail=f"the {self.name} channel cannot look up sends")

    @property
    @abc.abstractmethod
    def connected(self) -> bool:
        """True while the channel can receive and send."""

    @property
    def account(self) -> str:
        """The account this channel's messages carry (an inbound message's ``account``, the
        one its announces are sent as): a workspace, a bot. Default: ``"default"``, also
        until the channel has learnt its own at start."""
        return "default"

    @property
    def connection_state(self) -> ChannelState:
        """``connected``, ``standby`` (sending only, another replica receives) or
        ``disconnected``. Default: from :attr:`connected` (no standby)."""
        return "connected" if self.connected else "disconnected"

    async def run_update(self, update: RunUpdate) -> None:
        """Show a run's new status. Default: nothing (chat surfaces get the announce only)."""
        return None

    async def probe(self, *, timeout_seconds: float = DEFAULT_PROBE_TIMEOUT) -> ProbeResult:
        """Check that the chat service is reachable and accepts the configured credentials,
        with one cheap request bounded by ``timeout_seconds``. Default: nothing to check.

        Works on a channel that was never started (``herald doctor`` builds one just to call
        this): a channel's constructor only keeps its configuration, so the probe reads
        exactly what :meth:`start` would use, and a running daemon can ask the same question
        of its live channels. The deadline is a parameter rather than the caller's
        ``asyncio.timeout`` so that a slow service is reported as such, naming its URL.
        Never raises for network or HTTP failures; see :class:`channels.probe.ProbeResult`.
        """
        return ProbeResult("ok", "nothing to check")

    def open_reply(
        self,
        message: InboundMessage,
        reply_to: str | None = None,
        *,
        stream: bool = False,
        earlier: StreamedMessage | None = None,
        record: StreamRecorder | None = None,
    ) -> Reply:
        """The reply to ``message``, for the turn that answers it to hold until it ends.

        ``reply_to`` is the recorded inbound message the reply answers (what finds it after
        a crash). With ``stream`` (and ``reply_to``) the reply shows its text as it is
        written where this channel can (:meth:`stream_reply`); otherwise, and on channels
        that do not stream, :meth:`Reply.finish` posts it whole with :meth:`send`."""
        final = OutboundMessage(
            channel=message.channel,
            account=message.account,
            chat_id=message.chat_id,
            thread_id=message.thread_id,
            text="",
            reply_to=reply_to,
        )
        shown = None
        if stream and reply_to is not None:
            shown = self.stream_reply(message, final, earlier=earlier, record=record)
        return shown if shown is not None else PostedReply(self, final)

    def stream_reply(
        self,
        message: InboundMessage,
        final: OutboundMessage,
        *,
        earlier: StreamedMessage | None = None,
        record: StreamRecorder | None = None,
    ) -> Reply | None:
        """A reply to ``message`` shown as it is written, which :meth:`Reply.finish` makes
        the message ``final`` (with the final text). ``earlier``: the messages a run of this
        turn posted before a crash (the reply takes them over); ``record`` keeps the
        messages it posts (see :mod:`channels.streaming`). None when this channel does not
        stream (the default): :meth:`open_reply` then posts the reply whole."""
        return None

    @asynccontextmanager
    async def working(self, message: InboundMessage) -> AsyncIterator[None]:
        """Show that the agent is working on ``message`` (typing, a reaction) while inside."""
        yield


class Reply(abc.ABC):
    """One turn's reply in its chat, from its first piece of text to its final text.

    A channel opens one per chat turn (:meth:`Channel.open_reply`); the turn feeds it the
    text as the model writes it, gives it the final text (:meth:`finish`) and, whatever
    happened, closes it. The turn holds the object: nothing finds a reply again by a key.
    ``append`` and ``replace`` never block and never raise: the model's stream must not
    wait for a chat, so a reply that shows text buffers it and shows it in its own time.
    """

    #: Whether this reply shows its text as it is written. False: :meth:`append` and
    #: :meth:`replace` show nothing, so the turn need not stream its model calls.
    streams: bool = False
    #: The message this reply becomes, but for its text: where it goes, what it answers.
    final: OutboundMessage

    def append(self, text: str) -> None:
        """Add ``text`` to the end of the text shown. Default: nothing is shown."""
        return None

    def replace(self, text: str) -> None:
        """Show ``text`` in place of everything shown so far (a tool-call status line).
        Default: nothing is shown."""
        return None

    def keep(self) -> None:
        """The reply is in the chat already (a run of this turn before a crash sent it, in
        the messages this reply took over): :meth:`close` leaves what is shown. Default:
        nothing is taken back anyway."""
        return None

    @abc.abstractmethod
    async def finish(self, text: str) -> SentMessage:
        """Deliver the final reply ``text`` (what was shown becomes it: one reply per turn).
        Raises :class:`channels.errors.ChannelSendError` as :meth:`Channel.send` does; after
        a retryable one it may be called again, and resumes rather than repeats."""

    async def close(self) -> None:
        """The turn is over, its final text delivered or not coming (a yield with nothing
        to say, a stop): stop showing the growing text, and take back what was shown of a
        reply that never came. Idempotent. Default: nothing to release."""
        return None


class PostedReply(Reply):
    """A reply posted whole when the turn ends: for chats that do not stream, and turns
    that do not."""

    def __init__(self, channel: Channel, final: OutboundMessage) -> None:
        """``final`` is the message to post (its text is not used)."""
        self._channel = channel
        self.final = final

    def __repr__(self) -> str:
        return f"<PostedReply {self._channel.name} {self.final.chat_id}>"

    async def finish(self, text: str) -> SentMessage:
        return await self._channel.send(dataclasses.replace(self.final, text=text))
