"""Chat surfaces: the channel interface and its implementations."""

from channels.base import (
    Channel,
    ChatType,
    DeliveryLookup,
    InboundHandler,
    InboundMessage,
    LookupOutcome,
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
    "DeliveryLookup",
    "InboundHandler",
    "InboundMessage",
    "LookupOutcome",
    "MemorySeenKeys",
    "OutboundKind",
    "OutboundMessage",
    "ProbeOutcome",
    "ProbeResult",
    "RunUpdate",
    "SeenKeys",
    "SentMessage",
]
