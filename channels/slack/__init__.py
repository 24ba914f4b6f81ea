"""Slack channel (slack-bolt): Socket Mode or HTTP mode, mrkdwn replies, chat commands."""

from channels.slack.channel import SlackChannel
from channels.slack.config import SlackConfig
from channels.slack.format import split_text, to_mrkdwn

__all__ = ["SlackChannel", "SlackConfig", "split_text", "to_mrkdwn"]
