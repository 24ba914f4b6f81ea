"""Chat surfaces: the channel interface and its implementations."""

from channels.base import (
    Channel,
    ChannelState,
    ChatType,
    DeliveryLookup,
    InboundHandler,
    InboundMessage,
    LookupOutcome,
    OutboundKind,
    OutboundMessage,
    PostedReply,
    Reply,
    RunUpdate,
    SentMessage,
)
from channels.cursors import ChatCursor, ChatCursors, MemoryCursors
from channels.errors import ChannelError, ChannelSendError, ChannelStartError
from channels.leadership import AlwaysLeader, Leadership, Lease
from channels.probe import ProbeOutcome, ProbeResult
from channels.replay import MemorySeenKeys, SeenKeys
from channels.streaming import StreamedMessage, StreamRecorder

__all__ = [
    "AlwaysLeader",
    "Channel",
    "ChannelError",
    "ChannelSendError",
    "ChannelStartError",
    "ChannelState",
    "ChatCursor",
    "ChatCursors",
    "ChatType",
    "DeliveryLookup",
    "InboundHandler",
    "InboundMessage",
    "Leadership",
    "Lease",
    "LookupOutcome",
    "MemoryCursors",
    "MemorySeenKeys",
    "OutboundKind",
    "OutboundMessage",
    "PostedReply",
    "ProbeOutcome",
    "ProbeResult",
    "Reply",
    "RunUpdate",
    "SeenKeys",
    "SentMessage",
    "StreamRecorder",
    "StreamedMessage",
]
