"""The channels' inbound handler: a message → its agent and session → a command or a turn.

The agent comes from the channel's config (``channels.<name>.agent``, else the default
agent); the session key from the chat. A message that makes a turn is first recorded in the
state database (``inbound``), so that a crash after the channel acknowledged it loses
nothing. The handler returns as soon as the turn is queued: Slack and Discord want fast
acknowledgements.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from channels import InboundMessage, StreamedMessage
from gateway.agent import DISK_FULL_REPLY
from gateway.delivery import Replier
from gateway.reload import SettingsHolder
from gateway.runtime.chat_commands import ChatCommands
from gateway.runtime.commands import ChatCommand, parse_command
from gateway.runtime.turns import BUSY_REPLY, ChatTurns, origin_of
from gateway.sessions import (
    SessionError,
    SessionKey,
    SessionStore,
    agent_of_channel,
    key_for_inbound,
)
from gateway.state import DiskFullError, InboundTable, Origin, SessionRecord, is_out_of_space
from lanes import LaneClosed, LaneFullError

logger = logging.getLogger(__name__)

STOPPING_REPLY = "The gateway is restarting; please send that again in a moment."


class Router:
    """Routes inbound chat messages (see the module docstring)."""

    def __init__(
        self,
        *,
        holder: SettingsHolder,
        store: SessionStore,
        turns: ChatTurns,
        commands: ChatCommands,
        replier: Replier,
        journal: InboundTable | None = None,
        replica_id: str | None = None,
    ) -> None:
        """``journal`` keeps each message that makes a turn until the turn ended (claimed
        by ``replica_id`` in a cluster)."""
        self._journal = journal
        self._replica_id = replica_id
        self._holder = holder
        self._store = store
        self._turns = turns
        self._commands = commands
        self._replier = replier

    def agent_for_channel(self, channel: str) -> str:
        """The agent that answers in ``channel``."""
        return agent_of_channel(self._holder.current, channel)

    async def handle_inbound(self, message: InboundMessage) -> None:
        """Record ``message`` (one that makes a turn) so that a crash cannot lose it, then
        route it and queue its turn (or run its command)."""
        inbound_id = None
        if self._journal is not None and parse_command(message.text) is None:
            inbound_id = await self._record(message)
        await self.route(message, inbound_id)

    async def route(
        self,
        message: InboundMessage,
        inbound_id: str | None,
        *,
        resume: bool = False,
        streamed: StreamedMessage | None = None,
    ) -> None:
        """Route ``message`` (its ``inbound`` row: ``inbound_id``) and queue its turn; with
        ``resume``, the end of its turn the transcript already began; ``streamed``, the
        message a run of it before a crash streamed its reply in."""
        try:
            key = self.session_key(message)
        except SessionError as exc:
            logger.warning("message dropped: no session key", extra={"error": str(exc)})
            await self._handled(inbound_id)
            return
        origin = origin_of(message)
        try:
            session = await self._store.ensure(key, origin=origin)
            if session.origin != origin:  # replies and announces follow the latest place
                session = await self._store.set_origin(session.key, origin)
            queued = await self._dispatch(session, origin, message, inbound_id, resume, streamed)
        except (OSError, DiskFullError) as exc:
            if not is_out_of_space(exc):
                raise
            # Logged once by the disk-full state; the person is told rather than ignored.
            await self._replier.reply(origin, DISK_FULL_REPLY)
            queued = False
        if not queued:  # answered already (a command, a refusal): nothing to run again
            await self._handled(inbound_id)

    def session_key(self, message: InboundMessage) -> SessionKey:
        """The session ``message`` belongs to; raises ``SessionError``."""
        return key_for_inbound(
            self.agent_for_channel(message.channel),
            message.channel,
            message.chat_type,
            message.chat_id,
            message.thread_id,
            message.sender_id,
        )

    async def _record(self, message: InboundMessage) -> str | None:
        assert self._journal is not None
        try:
            return await self._journal.record(message, replica_id=self._replica_id)
        except Exception as exc:  # the turn still runs; only a crash before it would lose it
            logger.warning("inbound message not recorded", extra={"error": str(exc)})
            return None

    async def _handled(self, inbound_id: str | None) -> None:
        if inbound_id is not None and self._journal is not None:
            await self._journal.handled(inbound_id)

    async def _dispatch(
        self,
        session: SessionRecord,
        origin: Origin,
        message: InboundMessage,
        inbound_id: str | None,
        resume: bool,
        streamed: StreamedMessage | None = None,
    ) -> bool:
        """Run the message's chat command, or queue its turn; whether a turn was queued."""
        command = parse_command(message.text)
        if isinstance(command, ChatCommand) and command.name in ("compact", "new"):
            # They act on the conversation itself: queued on its lane, in order with turns.
            name = command.name
            await self._queue(
                session, origin, lambda: self._turns.submit_command(session, name, message)
            )
            return False
        if command is not None:
            text = await self._commands.run(command, session)
            await self._replier.reply(origin, text, "notice")
            return False
        kept = inbound_id is not None
        if resume and inbound_id is not None:
            ident = inbound_id
            return await self._queue(
                session,
                origin,
                lambda: self._turns.submit_resume(session, message, ident, streamed=streamed),
                kept,
            )
        return await self._queue(
            session,
            origin,
            lambda: self._turns.submit_turn(
                session, message.text, message, inbound_id, streamed=streamed
            ),
            kept,
        )

    async def _queue(
        self,
        session: SessionRecord,
        origin: Origin,
        submit: Callable[[], object],
        kept: bool = False,
    ) -> bool:
        """Queue a turn (or a session command) on the session's lane; tell the chat when the
        gateway cannot take it. Whether it was queued, or left recorded (``kept``: the
        message has its ``inbound`` row) for a replica that runs it."""
        try:
            submit()
        except LaneFullError:
            logger.warning("turn refused: lanes full", extra={"session": session.key})
            await self._replier.reply(origin, BUSY_REPLY, "notice")
        except LaneClosed:
            if kept and self._replica_id is not None:
                # A message that reached a replica as it stopped: a live replica takes its
                # row over once this one is marked stopped (or it runs it itself on restart).
                logger.info(
                    "turn left to another replica: stopping", extra={"session": session.key}
                )
                return True
            await self._replier.reply(origin, STOPPING_REPLY, "notice")
        else:
            return True
        return False
