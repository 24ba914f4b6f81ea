"""Chat surfaces: the channel interface and its implementations."""

from channels.base import (
    Channel,
    ChatType,
    InboundHandler,
    InboundMessage,
    OutboundKind,
    OutboundMessage,
    RunUpdate,
    SentMessage,
)
from channels.errors import ChannelError, ChannelSendError, ChannelStartError

__all__ = [
    "Channel",
    "ChannelError",
    "ChannelSendError",
    "ChannelStartError",
    "ChatType",
    "InboundHandler",
    "InboundMessage",
    "OutboundKind",
    "OutboundMessage",
    "RunUpdate",
    "SentMessage",
]
