"""Remembering the newest message taken in each chat, for a channel that must catch up.

A chat provider that does not send again what a bot missed while it was away (Discord, on a
fresh gateway session) leaves the bot to read each chat's messages past the newest one it
took. The channel advances a chat's :class:`ChatCursor` once its handler took a message and
reads the recent cursors when it connects again. The gateway supplies :class:`ChatCursors`
kept in its state database, so they outlive a restart and are shared by a cluster.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

from channels.base import ChatType


@dataclass(frozen=True, slots=True)
class ChatCursor:
    """The newest message (``message_id``, a number that grows with time) taken in a chat."""

    channel: str
    account: str
    chat_id: str
    chat_type: ChatType
    message_id: int


class ChatCursors(Protocol):
    """Where a channel keeps its chats' cursors."""

    async def advance(self, cursor: ChatCursor) -> None:
        """Move the chat's cursor to ``cursor.message_id``, never back."""
        ...

    async def recent(self, channel: str, account: str, since: float) -> list[ChatCursor]:
        """The cursors of ``channel`` for ``account`` that moved at or after ``since``
        (epoch seconds)."""
        ...


class MemoryCursors:
    """:class:`ChatCursors` in memory (tests, a channel built on its own)."""

    def __init__(self) -> None:
        self.cursors: dict[tuple[str, str, str], tuple[ChatCursor, float]] = {}

    def __repr__(self) -> str:
        return f"<MemoryCursors {len(self.cursors)}>"

    async def advance(self, cursor: ChatCursor) -> None:
        key = (cursor.channel, cursor.account, cursor.chat_id)
        held = self.cursors.get(key)
        if held is not None and held[0].message_id > cursor.message_id:
            cursor = ChatCursor(
                cursor.channel, cursor.account, cursor.chat_id, cursor.chat_type, held[0].message_id
            )
        self.cursors[key] = (cursor, time.time())

    async def recent(self, channel: str, account: str, since: float) -> list[ChatCursor]:
        return [
            cursor
            for (name, acct, _), (cursor, at) in sorted(self.cursors.items())
            if name == channel and acct == account and at >= since
        ]
