"""Configuration of the Discord channel (DESIGN §2, ``channels.discord``)."""

from __future__ import annotations

from pydantic import SecretStr

from channels.config_base import ConfigModel


class DiscordConfig(ConfigModel):
    enabled: bool = False
    token: SecretStr | None = None
    agent: str = "main"
    require_mention: bool = True
    #: Versioned REST root, e.g. ``https://discord.com/api/v10``.
    api_base_url: str | None = None
    #: Gateway websocket, e.g. ``wss://gateway.discord.gg/``.
    gateway_url: str | None = None

    def required_secrets(self) -> tuple[str, ...]:
        return ("token",) if self.enabled else ()
