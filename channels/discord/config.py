"""Configuration of the Discord channel (``channels.discord``)."""

from __future__ import annotations

from typing import Literal

from pydantic import SecretStr, StrictBool, field_validator

from configbase import ConfigModel


class DiscordConfig(ConfigModel):
    enabled: StrictBool = False
    """Connect to Discord at start."""
    token: SecretStr | None = None
    """The bot token (the bot needs the *Message Content* intent); required when enabled."""
    agent: str = "main"
    """The agent that answers on Discord; one of `routing.agents`."""
    require_mention: StrictBool = True
    """In channels, answer only messages that mention the bot; DMs are always answered."""
    api_base_url: str | None = None
    """Versioned REST root, e.g. `https://discord.com/api/v10` (no trailing slash
    needed), for Discord-compatible servers; null: Discord's."""
    gateway_url: str | None = None
    """Gateway websocket, e.g. `wss://gateway.discord.gg/`; null: Discord's."""
    streaming: Literal["edit", "off"] = "edit"
    """How a reply shows while it is written (with `agent.streaming`): `edit` posts it and
    edits it at most once a second as it grows (a new message past 2,000 characters);
    `off` posts it whole when done."""

    @field_validator("api_base_url")
    @classmethod
    def _http_root(cls, value: str | None) -> str | None:
        # discord.py appends "/users/@me" and the like to this root, so a trailing slash
        # would double up. An empty value (``${VAR:-}``) means the default.
        if not value:
            return None
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL like https://discord.com/api/v10")
        return value.rstrip("/")

    @field_validator("gateway_url")
    @classmethod
    def _websocket_url(cls, value: str | None) -> str | None:
        if not value:
            return None
        if not value.startswith(("ws://", "wss://")):
            raise ValueError("must be a ws:// or wss:// URL like wss://gateway.discord.gg/")
        return value

    def required_secrets(self) -> tuple[str, ...]:
        """The secret keys this configuration needs to start."""
        return ("token",) if self.enabled else ()
