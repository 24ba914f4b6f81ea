"""Configuration of the built-in web chat (DESIGN §2, ``channels.webchat``)."""

from __future__ import annotations

from channels.config_base import ConfigModel


class WebchatConfig(ConfigModel):
    enabled: bool = True
    agent: str = "main"

    def required_secrets(self) -> tuple[str, ...]:
        return ()
