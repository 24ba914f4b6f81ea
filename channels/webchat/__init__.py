"""The built-in web chat: a page at ``/`` and a WebSocket at ``/webchat/ws``.

``WebchatChannel`` is loaded on first use: it brings aiohttp's server, and loading or
checking the configuration (every ``herald`` command does) needs only ``WebchatConfig``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from channels.errors import JobRefusedError, JobsUnavailableError
from channels.webchat.config import WebchatConfig
from channels.webchat.jobs import ChatJob, ChatJobs
from channels.webchat.protocol import CLIENT_ID_PATTERN, MAX_TEXT_BYTES

if TYPE_CHECKING:
    from channels.webchat.channel import WebchatChannel

__all__ = [
    "CLIENT_ID_PATTERN",
    "MAX_TEXT_BYTES",
    "ChatJob",
    "ChatJobs",
    "JobRefusedError",
    "JobsUnavailableError",
    "WebchatChannel",
    "WebchatConfig",
]


# Defined for the interpreter alone: the type checker, seeing a module ``__getattr__``, would
# type any name imported from here as ``Any`` (a misspelt one too) instead of looking for it
# among the imports above.
if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        if name == "WebchatChannel":
            from channels.webchat.channel import WebchatChannel

            return WebchatChannel
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
