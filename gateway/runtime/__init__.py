"""The chat runtime: routing inbound messages, chat turns, and chat commands."""

from gateway.runtime.chat_commands import ChatCommands
from gateway.runtime.commands import HELP_TEXT, ChatCommand, CommandUsageError, parse_command
from gateway.runtime.inbound import InboundReplay
from gateway.runtime.router import Router
from gateway.runtime.turns import BUSY_REPLY, ChatTurns, origin_of

__all__ = [
    "BUSY_REPLY",
    "HELP_TEXT",
    "ChatCommand",
    "ChatCommands",
    "ChatTurns",
    "CommandUsageError",
    "InboundReplay",
    "Router",
    "origin_of",
    "parse_command",
]
