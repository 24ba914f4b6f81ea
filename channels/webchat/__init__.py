"""The built-in web chat: a page at ``/`` and a WebSocket at ``/webchat/ws``."""

from channels.webchat.channel import WebchatChannel
from channels.webchat.config import WebchatConfig
from channels.webchat.protocol import CLIENT_ID_PATTERN, MAX_TEXT_BYTES

__all__ = ["CLIENT_ID_PATTERN", "MAX_TEXT_BYTES", "WebchatChannel", "WebchatConfig"]
