"""Delivery to chats: the durable announce outbox, a chat turn's reply and plain replies."""

from gateway.delivery.outbox import MAX_ATTEMPTS, UNCERTAIN, DeliveryListener, Outbox
from gateway.delivery.replies import Replier, send_reply
from gateway.delivery.streaming import TurnReply, status_line

__all__ = [
    "MAX_ATTEMPTS",
    "UNCERTAIN",
    "DeliveryListener",
    "Outbox",
    "Replier",
    "TurnReply",
    "send_reply",
    "status_line",
]
