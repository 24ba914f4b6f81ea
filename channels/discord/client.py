"""The discord.py ``Client`` of a Discord channel: its events go to the channel's hooks."""

from __future__ import annotations

from typing import Any, Protocol

from channels.discord._sdk import discord


def discord_intents() -> discord.Intents:
    """Guilds, guild messages, DMs and message content (a privileged intent)."""
    intents = discord.Intents.none()
    intents.guilds = True
    intents.guild_messages = True
    intents.dm_messages = True
    intents.message_content = True
    return intents


class ClientOwner(Protocol):
    """What a :class:`Client` tells its channel."""

    def client_logged_in(self, user_id: int | None) -> None: ...

    def client_connected(self, connected: bool, why: str) -> None: ...

    async def client_message(self, message: discord.Message) -> None: ...


class Client(discord.Client):
    """A ``Client`` whose events go to its owner (:class:`.channel.DiscordChannel`)."""

    def __init__(self, owner: ClientOwner, **options: Any) -> None:
        super().__init__(**options)
        self._owner = owner

    async def setup_hook(self) -> None:
        # discord.py calls this at the end of login, before it dials the gateway.
        self._owner.client_logged_in(None if self.user is None else self.user.id)

    async def on_ready(self) -> None:
        self._owner.client_connected(True, "ready")

    async def on_resumed(self) -> None:
        self._owner.client_connected(True, "resumed")

    async def on_disconnect(self) -> None:
        self._owner.client_connected(False, "disconnected")

    async def on_message(self, message: discord.Message) -> None:
        await self._owner.client_message(message)
