"""The built-in web chat: a page at ``/`` and a WebSocket at ``/webchat/ws``."""

from channels.errors import JobRefusedError, JobsUnavailableError
from channels.webchat.channel import WebchatChannel
from channels.webchat.config import WebchatConfig
from channels.webchat.jobs import ChatJob, ChatJobs
from channels.webchat.protocol import CLIENT_ID_PATTERN, MAX_TEXT_BYTES

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
