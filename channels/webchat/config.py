"""Configuration of the built-in web chat (``channels.webchat``)."""

from __future__ import annotations

from pydantic import Field, StrictBool

from configbase import ConfigModel


class WebchatConfig(ConfigModel):
    enabled: StrictBool = True
    """Serve the web chat page at `/`."""
    agent: str = "main"
    """The agent that answers in the web chat; one of `routing.agents`."""
    history_size: int = Field(default=200, ge=1, le=10_000)
    """Messages remembered per browser client and replayed when its page (re)connects, so
    a reload keeps the conversation and an announce that arrived while the tab was closed
    is still seen."""
    max_clients: int = Field(default=1_000, ge=1, le=1_000_000)
    """Browser clients remembered at once; the least recently active one without an open
    page is forgotten first."""

    def required_secrets(self) -> tuple[str, ...]:
        return ()
