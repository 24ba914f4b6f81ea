"""Slack channel (slack-bolt)."""

from channels.slack.config import SlackConfig

__all__ = ["SlackConfig"]
