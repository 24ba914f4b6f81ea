"""Discord channel (discord.py).

``DiscordChannel`` is loaded on first use: discord.py takes a noticeable moment to import,
and loading or checking the configuration needs only ``DiscordConfig``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from channels.discord.config import DiscordConfig
from channels.discord.format import DISCORD_MESSAGE_LIMIT, chunk_message

if TYPE_CHECKING:
    from channels.discord.channel import DiscordChannel
    from channels.discord.client import discord_intents

__all__ = [
    "DISCORD_MESSAGE_LIMIT",
    "DiscordChannel",
    "DiscordConfig",
    "chunk_message",
    "discord_intents",
]


# Defined for the interpreter alone: the type checker, seeing a module ``__getattr__``, would
# type any name imported from here as ``Any`` (a misspelt one too) instead of looking for it
# among the imports above.
if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        if name == "DiscordChannel":
            from channels.discord.channel import DiscordChannel

            return DiscordChannel
        if name == "discord_intents":
            from channels.discord.client import discord_intents

            return discord_intents
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
