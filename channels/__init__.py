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
from channels.probe import ProbeOutcome, ProbeResult
from channels.replay import MemorySeenKeys, SeenKeys

__all__ = [
    "Channel",
    "ChannelError",
    "ChannelSendError",
    "ChannelStartError",
    "ChatType",
    "InboundHandler",
    "InboundMessage",
    "MemorySeenKeys",
    "OutboundKind",
    "OutboundMessage",
    "ProbeOutcome",
    "ProbeResult",
    "RunUpdate",
    "SeenKeys",
    "SentMessage",
]
