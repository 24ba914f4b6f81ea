"""Configuration of the Slack channel (``channels.slack``)."""

from __future__ import annotations

from typing import Literal

from pydantic import SecretStr

from channels.config_base import ConfigModel


class SlackConfig(ConfigModel):
    enabled: bool = False
    mode: Literal["socket", "http"] = "socket"
    bot_token: SecretStr | None = None
    app_token: SecretStr | None = None
    signing_secret: SecretStr | None = None
    #: Web API root with its trailing slash; slack_sdk joins method names onto it.
    api_base_url: str | None = None
    agent: str = "main"
    require_mention: bool = True
    reply_in_thread: bool = True

    def required_secrets(self) -> tuple[str, ...]:
        """The secret keys this configuration needs to start."""
        if not self.enabled:
            return ()
        if self.mode == "socket":
            return ("botToken", "appToken")
        return ("botToken", "signingSecret")
