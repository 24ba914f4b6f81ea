"""The built-in web chat."""

from channels.webchat.config import WebchatConfig

__all__ = ["WebchatConfig"]
