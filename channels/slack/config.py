"""Configuration of the Slack channel (``channels.slack``)."""

from __future__ import annotations

from typing import Literal

from pydantic import SecretStr, StrictBool

from configbase import ConfigModel


class SlackConfig(ConfigModel):
    enabled: StrictBool = False
    """Connect to Slack at start."""
    mode: Literal["socket", "http"] = "socket"
    """`"socket"`: Socket Mode (needs `botToken` and `appToken`); `"http"`: events
    at `POST /slack/events` (needs `botToken` and `signingSecret`)."""
    bot_token: SecretStr | None = None
    """The bot token (`xoxb-…`); required when enabled."""
    app_token: SecretStr | None = None
    """The app-level token (`xapp-…`); required in Socket Mode."""
    signing_secret: SecretStr | None = None
    """The app's signing secret, to verify events; required in HTTP mode."""
    api_base_url: str | None = None
    """Web API root with its trailing slash (`https://slack.com/api/`), for
    Slack-compatible servers; null: Slack's."""
    agent: str = "main"
    """The agent that answers on Slack; one of `routing.agents`."""
    require_mention: StrictBool = True
    """In channels, answer only messages that mention the bot; DMs are always answered."""
    reply_in_thread: StrictBool = True
    """Answer a top-level mention in a new thread rather than in the channel."""
    streaming: Literal["auto", "native", "edit", "off"] = "auto"
    """How a reply shows while it is written (with `agent.streaming`): `native` streams it
    with Slack's `chat.startStream`/`appendStream`/`stopStream` (thread replies only);
    `edit` posts it and updates it at most once a second; `auto` is native in threads and
    edit elsewhere or where Slack refuses native; `off` posts it whole when done."""

    def required_secrets(self) -> tuple[str, ...]:
        """The secret keys this configuration needs to start."""
        if not self.enabled:
            return ()
        if self.mode == "socket":
            return ("botToken", "appToken")
        return ("botToken", "signingSecret")
