"""The channels' inbound handler: a message → its agent and session → a command or a turn.

The agent comes from the channel's config (``channels.<name>.agent``, else the default
agent); the session key from the chat. The handler returns as soon as the turn is queued:
Slack and Discord want fast acknowledgements.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from channels import InboundMessage
from gateway.agent import DISK_FULL_REPLY
from gateway.delivery import Replier
from gateway.reload import SettingsHolder
from gateway.runtime.chat_commands import ChatCommands
from gateway.runtime.commands import ChatCommand, parse_command
from gateway.runtime.turns import BUSY_REPLY, ChatTurns, origin_of
from gateway.sessions import SessionError, SessionStore, key_for_inbound
from gateway.state import DiskFullError, Origin, SessionRecord, is_out_of_space
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
    ) -> None:
        self._holder = holder
        self._store = store
        self._turns = turns
        self._commands = commands
        self._replier = replier

    def agent_for_channel(self, channel: str) -> str:
        """The agent that answers in ``channel``."""
        settings = self._holder.current
        config = getattr(settings.channels, channel, None)
        agent = getattr(config, "agent", None)
        return agent if isinstance(agent, str) else settings.routing.default_agent

    async def handle_inbound(self, message: InboundMessage) -> None:
        """Route ``message``, then queue its turn (or run its command)."""
        try:
            key = key_for_inbound(
                self.agent_for_channel(message.channel),
                message.channel,
                message.chat_type,
                message.chat_id,
                message.thread_id,
                message.sender_id,
            )
        except SessionError as exc:
            logger.warning("message dropped: no session key", extra={"error": str(exc)})
            return
        origin = origin_of(message)
        try:
            session = await self._store.ensure(key, origin=origin)
            if session.origin != origin:  # replies and announces follow the latest place
                session = await self._store.set_origin(session.key, origin)
            await self._dispatch(session, origin, message)
        except (OSError, DiskFullError) as exc:
            if not is_out_of_space(exc):
                raise
            # Logged once by the disk-full state; the person is told rather than ignored.
            await self._replier.reply(origin, DISK_FULL_REPLY)

    async def _dispatch(
        self, session: SessionRecord, origin: Origin, message: InboundMessage
    ) -> None:
        """Run the message's chat command, or queue its turn."""
        command = parse_command(message.text)
        if isinstance(command, ChatCommand) and command.name in ("compact", "new"):
            # They act on the conversation itself: queued on its lane, in order with turns.
            name = command.name
            await self._queue(
                session, origin, lambda: self._turns.submit_command(session, name, message)
            )
            return
        if command is not None:
            text = await self._commands.run(command, session)
            await self._replier.reply(origin, text, "notice")
            return
        await self._queue(
            session, origin, lambda: self._turns.submit_turn(session, message.text, message)
        )

    async def _queue(
        self, session: SessionRecord, origin: Origin, submit: Callable[[], object]
    ) -> None:
        """Queue a turn (or a session command) on the session's lane; tell the chat when the
        gateway cannot take it."""
        try:
            submit()
        except LaneFullError:
            logger.warning("turn refused: lanes full", extra={"session": session.key})
            await self._replier.reply(origin, BUSY_REPLY, "notice")
        except LaneClosed:
            await self._replier.reply(origin, STOPPING_REPLY, "notice")
