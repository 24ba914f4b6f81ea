"""Chat turns: one person's message → one agent turn → the reply, on bounded lanes.

A turn is queued on its session's lane (one turn at a time per session) and, inside it,
waits for a ``main`` lane slot (bounded overall concurrency). Both lanes bound their queues:
a chat whose turn cannot be queued is told the gateway is busy, and nothing is dropped
silently. Errors of every kind become a clear reply text; the transcript keeps the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping
from typing import Literal

from channels import Channel, InboundMessage, OutboundKind, StreamedMessage
from gateway.agent import Conversations
from gateway.constants import SESSION_LOCK_LOST
from gateway.delivery import Replier, TurnReply
from gateway.state import InboundTable, Origin, SessionRecord
from lanes import JobHandle, Lane, LaneClosed, LaneFullError

logger = logging.getLogger(__name__)

BUSY_REPLY = "Sorry, I am busy with too many conversations right now; please try again shortly."
STOPPED_REPLY = "Stopped."
#: A turn stopped because its session's lock went with a lost database connection.
LOCK_LOST_REPLY = (
    "Sorry, this reply was stopped: the gateway lost its database connection, and another "
    "gateway may be answering here now. Please send your message again."
)


#: The cancellation message of a turn stopped on request (``/stop``, the API).
STOP_REQUESTED = "stop requested"


#: The transcript ``meta`` key of a user message: its row in ``inbound``.
INBOUND_META = "inbound"

#: A turn's work: given the reply the turn opened (None: a command's answer, or no chat to
#: reply in), the text to answer with.
Work = Callable[[TurnReply | None], Awaitable[str | None]]


def origin_of(message: InboundMessage) -> Origin:
    """Where ``message`` was written: its channel, account, chat and thread."""
    return Origin(
        channel=message.channel,
        account=message.account,
        chat_id=message.chat_id,
        thread_id=message.thread_id,
        chat_type=message.chat_type,
    )


class ChatTurns:
    """Queues and runs chat turns; also the :class:`gateway.subagents.TurnQueue`."""

    def __init__(
        self,
        *,
        conversations: Conversations,
        session_lane: Lane,
        main_lane: Lane,
        channels: Mapping[str, Channel],
        replier: Replier,
        journal: InboundTable | None = None,
    ) -> None:
        """``journal`` keeps each chat message until its turn ended."""
        self._conversations = conversations
        self._journal = journal
        self._store = conversations.store
        self._session_lane = session_lane
        self._main_lane = main_lane
        self._channels = channels
        self._replier = replier
        self._turns: dict[str, set[JobHandle[None]]] = defaultdict(set)

    def __repr__(self) -> str:
        active = sum(len(handles) for handles in self._turns.values())
        return f"<ChatTurns turns={active} {self._session_lane!r}>"

    def submit_turn(
        self,
        session: SessionRecord,
        text: str,
        inbound: InboundMessage | None = None,
        inbound_id: str | None = None,
        *,
        streamed: StreamedMessage | None = None,
    ) -> JobHandle[None]:
        """Queue a turn of ``session`` with ``text`` as the user's message; ``inbound_id``
        (the message's row in ``inbound``) is written with it and is handled once it ends;
        ``streamed``: the message a run of it before a crash streamed its reply in.

        Raises ``LaneFullError`` when too many turns wait and ``LaneClosed`` once the
        gateway is stopping: the caller tells the person.
        """
        key = session.key
        origin = origin_of(inbound) if inbound is not None else None
        meta = {INBOUND_META: inbound_id} if inbound_id is not None else None

        async def work(reply: TurnReply | None) -> str | None:
            listener = reply.listener if reply is not None else None
            result = await self._conversations.turn(
                key, text, origin=origin, meta=meta, listener=listener
            )
            return result.text

        return self._submit(key, work, inbound, "reply", inbound_id, streamed)

    def submit_resume(
        self,
        session: SessionRecord,
        inbound: InboundMessage,
        inbound_id: str,
        *,
        streamed: StreamedMessage | None = None,
    ) -> JobHandle[None]:
        """Queue the end of the turn that wrote ``inbound`` to the transcript before the
        gateway died: its recorded reply, else the model goes on. Raises as
        :meth:`submit_turn`."""
        key, origin = session.key, origin_of(inbound)

        async def work(reply: TurnReply | None) -> str | None:
            listener = reply.listener if reply is not None else None
            result = await self._conversations.resume(key, origin=origin, listener=listener)
            if (
                result.recorded
                and result.text is not None
                and await self._replier.delivered(
                    origin, result.text, inbound_id, inbound.received_at
                )
            ):
                if reply is not None:  # in the message it streamed: that stays
                    reply.keep()
                return None  # the dead process posted it after writing it
            return result.text

        return self._submit(key, work, inbound, "reply", inbound_id, streamed)

    def submit_command(
        self,
        session: SessionRecord,
        name: Literal["compact", "new"],
        inbound: InboundMessage | None = None,
    ) -> JobHandle[None]:
        """Queue ``/compact`` or ``/new`` for ``session``: on its lane, after the turns
        queued before it, answered like a turn. Raises as :meth:`submit_turn`."""
        key = session.key
        command = self._conversations.compact if name == "compact" else self._conversations.renew
        return self._submit(key, lambda _: command(key), inbound, "notice")

    def _submit(
        self,
        key: str,
        work: Work,
        inbound: InboundMessage | None,
        kind: OutboundKind,
        inbound_id: str | None = None,
        streamed: StreamedMessage | None = None,
    ) -> JobHandle[None]:
        handle = self._session_lane.submit(
            lambda: self._turn(key, work, inbound, kind, inbound_id, streamed), key=key
        )
        self._prune()
        self._turns[key].add(handle)
        return handle

    def _prune(self) -> None:
        """Forget finished turns (cheaper than a watcher task per turn)."""
        for key in [k for k, hs in self._turns.items() if all(h.done() for h in hs)]:
            del self._turns[key]

    async def _turn(
        self,
        key: str,
        work: Work,
        inbound: InboundMessage | None,
        kind: OutboundKind,
        inbound_id: str | None,
        streamed: StreamedMessage | None,
    ) -> None:
        cut_off = False
        try:
            await self._answer(key, work, inbound, kind, inbound_id, streamed)
        except asyncio.CancelledError as stop:
            cut_off = self._cut_off(stop, inbound_id)
            raise
        finally:
            # A turn the gateway's stop cut off keeps its row: it is resumed from the
            # transcript at the next start or, in a cluster, by a live replica.
            if inbound_id is not None and not cut_off:
                await asyncio.shield(self._handled(inbound_id))

    def _cut_off(self, stop: asyncio.CancelledError, inbound_id: str | None) -> bool:
        """Whether ``stop`` is the gateway's own clean stop ending, after the drain, a turn
        whose message is recorded (so it can be resumed), rather than a person's ``/stop``
        or a lost session lock."""
        asked = {STOP_REQUESTED, SESSION_LOCK_LOST} & set(stop.args)
        return inbound_id is not None and self._session_lane.closed and not asked

    async def _handled(self, inbound_id: str) -> None:
        """The message is in the transcript, or was answered: not to be run again."""
        if self._journal is None:
            return
        try:
            await self._journal.handled(inbound_id)
        except Exception as exc:  # kept: the next start finds it in the transcript
            logger.warning("inbound message not marked handled", extra={"error": str(exc)})

    async def _answer(
        self,
        key: str,
        work: Work,
        inbound: InboundMessage | None,
        kind: OutboundKind,
        inbound_id: str | None,
        streamed: StreamedMessage | None,
    ) -> None:
        text: str | None
        channel = self._channels.get(inbound.channel) if inbound else None
        reply: TurnReply | None = None
        try:
            async with self._main_lane.slot():
                working = channel.working(inbound) if channel and inbound else None
                async with working or contextlib.nullcontext():
                    try:
                        reply = self._open_reply(channel, inbound, kind, inbound_id, streamed)
                        text = await work(reply)
                    except asyncio.CancelledError as stop:
                        if self._cut_off(stop, inbound_id):  # answered once resumed
                            if reply is not None:
                                await asyncio.shield(reply.close())
                            raise
                        lost = SESSION_LOCK_LOST in stop.args
                        notice = LOCK_LOST_REPLY if lost else STOPPED_REPLY
                        if (origin := await self._reply_to(key, inbound)) is not None:
                            await asyncio.shield(self._replier.reply(origin, notice, "notice"))
                        if reply is not None:
                            await asyncio.shield(reply.close())
                        raise
        except (LaneFullError, LaneClosed):
            text = BUSY_REPLY
        try:
            if text is not None and reply is not None:  # the reply this turn opened, no other
                await reply.finish(text)
            elif text is not None and (origin := await self._reply_to(key, inbound)) is not None:
                await self._replier.reply(origin, text, kind)
        finally:
            if reply is not None:  # after the final text: it took the streamed text's place
                await reply.close()

    def _open_reply(
        self,
        channel: Channel | None,
        inbound: InboundMessage | None,
        kind: OutboundKind,
        inbound_id: str | None,
        streamed: StreamedMessage | None,
    ) -> TurnReply | None:
        """The reply of a chat turn, opened in its chat (None for commands and where no
        chat is): shown as it is written when its chat streams and ``agent.streaming`` is
        on, or when a run of it before a crash streamed (``streamed``: the turn goes on in
        that message, streaming then whatever the setting), and the turn has a recorded
        message (what finds the reply after a crash). What it posts is recorded with the
        inbound message."""
        if channel is None or inbound is None or kind != "reply":
            return None
        stream = inbound_id is not None and (self._conversations.streaming or streamed is not None)
        journal = self._journal

        async def record(shown: StreamedMessage) -> None:
            if journal is not None and inbound_id is not None:
                await journal.streamed(inbound_id, shown)

        opened = channel.open_reply(
            inbound, inbound_id, stream=stream, earlier=streamed, record=record
        )
        return TurnReply(opened)

    async def _reply_to(self, key: str, inbound: InboundMessage | None) -> Origin | None:
        """Where a turn's answer goes: the chat and thread of the message it answers (the
        person may have moved on in the same session meanwhile), else the session's."""
        if inbound is not None:
            return origin_of(inbound)
        session = await self._store.get(key)
        return session.origin if session is not None else None

    def stop(self, key: str) -> int:
        """Cancel the session's queued and running turns; returns how many."""
        handles = list(self._turns.get(key, ()))
        return sum(1 for handle in handles if handle.cancel(STOP_REQUESTED))

    async def close(self, drain_seconds: float) -> None:
        """Refuse new turns; let running turns finish for ``drain_seconds``, then cancel."""
        for lane in (self._session_lane, self._main_lane):
            await lane.shutdown(drain_seconds)
