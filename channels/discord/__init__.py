"""Discord channel (discord.py)."""

from channels.discord.config import DiscordConfig

__all__ = ["DiscordConfig"]
