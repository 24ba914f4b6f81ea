"""Slack channel (slack-bolt): Socket Mode or HTTP mode, mrkdwn replies, chat commands.

``SlackChannel`` is loaded on first use: slack-bolt takes a noticeable moment to import, and
loading or checking the configuration needs only ``SlackConfig``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from channels.slack.config import SlackConfig
from channels.slack.format import split_text, to_mrkdwn

if TYPE_CHECKING:
    from channels.slack.channel import SlackChannel

__all__ = ["SlackChannel", "SlackConfig", "split_text", "to_mrkdwn"]


# Defined for the interpreter alone: the type checker, seeing a module ``__getattr__``, would
# type any name imported from here as ``Any`` (a misspelt one too) instead of looking for it
# among the imports above.
if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        if name == "SlackChannel":
            from channels.slack.channel import SlackChannel

            return SlackChannel
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
